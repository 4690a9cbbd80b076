package examples

import (
	"fmt"

	"github.com/trialog/trialog/sdk/go/trialog"
)

// Environments maps the names the command line accepts to environment factories.
var Environments = map[string]trialog.EnvironmentFactory{
	"rps": NewRockPaperScissors,
}

// RockPaperScissors is examples/rps/game.py in Go, move for move and reward for reward
// (so `trialog replay --verify` re-simulates its trials with the Python game): two
// players pick a move each tick; the round's winner gets +1, the loser -1; the trial
// ends when one reaches target_score (config, default 5). Schemas: examples/rps.
type RockPaperScissors struct {
	players [2]string
	score   map[string]int64
	last    map[string]string // "" before the first round
	round   int64
	target  int64
}

var rpsBeats = map[string]string{"ROCK": "SCISSORS", "PAPER": "ROCK", "SCISSORS": "PAPER"}

// NewRockPaperScissors builds the game of one trial.
func NewRockPaperScissors(trial *trialog.EnvTrial) (trialog.Environment, error) {
	if len(trial.Actors) != 2 {
		return nil, fmt.Errorf("rock-paper-scissors needs exactly 2 players, got %d", len(trial.Actors))
	}
	g := &RockPaperScissors{players: [2]string{trial.Actors[0].Name, trial.Actors[1].Name}, target: 5,
		score: map[string]int64{}, last: map[string]string{}}
	if t, ok := trial.Config["target_score"].(float64); ok {
		g.target = int64(t)
	}
	return g, nil
}

// Start gives the observations of tick 0.
func (g *RockPaperScissors) Start() (map[string]any, error) { return g.observations(), nil }

func (g *RockPaperScissors) observations() map[string]any {
	a, b := g.players[0], g.players[1]
	return map[string]any{a: g.observation(a, b), b: g.observation(b, a)}
}

func (g *RockPaperScissors) observation(me, them string) map[string]any {
	var last any // the union [null, rps.Move]: nil, or {"rps.Move": symbol}
	if m := g.last[them]; m != "" {
		last = map[string]any{"rps.Move": m}
	}
	return map[string]any{"round": g.round, "my_score": g.score[me], "their_score": g.score[them], "their_last_move": last}
}

// Step plays one round. A player who left the trial (timeout policy drop) forfeits it:
// the game is over.
func (g *RockPaperScissors) Step(actions map[string]any) (trialog.Step, error) {
	a, b := g.players[0], g.players[1]
	moveA, okA := actions[a].(string)
	moveB, okB := actions[b].(string)
	if !okA || !okB {
		done := map[string]bool{a: true, b: true}
		return trialog.Step{Observations: g.observations(), Rewards: map[string]float64{}, Terminated: done, Done: true}, nil
	}
	rewards := map[string]float64{a: 0, b: 0}
	if rpsBeats[moveA] == moveB {
		g.score[a]++
		rewards = map[string]float64{a: 1, b: -1}
	} else if rpsBeats[moveB] == moveA {
		g.score[b]++
		rewards = map[string]float64{a: -1, b: 1}
	}
	g.last = map[string]string{a: moveA, b: moveB}
	g.round++
	done := max(g.score[a], g.score[b]) >= g.target
	return trialog.Step{Observations: g.observations(), Rewards: rewards, Terminated: map[string]bool{a: done, b: done}, Done: done}, nil
}
