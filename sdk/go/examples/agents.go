// Package examples holds example agents: rock-paper-scissors and Overcooked.
package examples

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/trialog/trialog/sdk/go/trialog"
)

// Agents maps the names the command line accepts to agent factories.
var Agents = map[string]trialog.AgentFactory{
	"rps-counter":     func(a *trialog.Actor) (trialog.Agent, error) { return &Counter{}, nil },
	"overcooked-cook": func(a *trialog.Actor) (trialog.Agent, error) { return &Cook{actor: a}, nil },
}

var beats = map[string]string{"ROCK": "PAPER", "PAPER": "SCISSORS", "SCISSORS": "ROCK"}

// Counter plays rock-paper-scissors (examples/rps/spec.yaml): what beats the opponent's
// last move, rock on the first round.
type Counter struct{ Rewards float64 }

// Decide reads the rps.Observation record; their_last_move is a union [null, rps.Move].
func (c *Counter) Decide(obs trialog.ObservationEvent) (any, error) {
	record, _ := obs.Value.(map[string]any)
	last := record["their_last_move"]
	if branch, ok := last.(map[string]any); ok { // a union decodes as {branch: value}
		last = branch["rps.Move"]
	}
	if move, ok := last.(string); ok {
		return beats[move], nil
	}
	return "ROCK", nil
}

// OnReward keeps the running total (rewards arrive live, retroactive ones included).
func (c *Counter) OnReward(r trialog.Reward) { c.Rewards += r.Value * r.Confidence }

// Cook plays Overcooked (examples/overcooked/spec.yaml): its observation is a
// trialog.Tensor, its action one of CoGrid's 7 moves. It moves pseudo-randomly, but
// deterministically in (seed, actor, tick, observation) — replay and recovery need that.
type Cook struct{ actor *trialog.Actor }

// Decide hashes what it saw into a move.
func (c *Cook) Decide(obs trialog.ObservationEvent) (any, error) {
	tensor, err := trialog.TensorOf(obs.Value)
	if err != nil {
		return nil, err
	}
	values, err := tensor.Float64s()
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(c.actor.Trial.Seed)^uint64(obs.Tick))
	h.Write(buf[:])
	h.Write([]byte(c.actor.Spec.Name))
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(int64(sum)))
	h.Write(buf[:])
	return int64(h.Sum64() % 7), nil
}
