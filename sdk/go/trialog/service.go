package trialog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ObservationEvent is an observation decoded with the actor class's schema.
type ObservationEvent struct {
	Tick                  int64
	Value                 any // the decoded payload: map[string]any for a record, string for an enum, int64 for a long…
	Terminated, Truncated bool
}

// Agent plays one actor in one trial: Decide answers each non-final observation once,
// in tick order. Decide MUST be deterministic given the trial seed and the
// observations so far: a service that takes over after a crash replays them.
type Agent interface {
	Decide(obs ObservationEvent) (any, error)
}

// Optional hooks an Agent may implement.
type (
	RewardReceiver  interface{ OnReward(Reward) }
	MessageReceiver interface{ OnMessage(Message) }
	EndReceiver     interface{ OnEnd(TrialEnded) }
)

// AgentFactory makes the agent of one actor of one trial.
type AgentFactory func(actor *Actor) (Agent, error)

// Actor is what an agent knows of its trial and how it writes rewards and messages.
type Actor struct {
	Trial *TrialStarted
	Spec  ActorSpec
	svc   *Service
	part  int32
	tick  int64 // the latest observation's tick
	sent  int   // messages sent, for deterministic message IDs
}

// Reward gives receiver (a name, "*" or "class.*"; "*" and "class.*" leave this actor
// out) a reward for tick (≤ the current tick; earlier is a retroactive reward). It
// returns an error, and writes nothing, for a reward that could not count: out of bounds
// (RewardBoundsProblem) or naming this actor.
func (a *Actor) Reward(receiver string, tick int64, value, confidence float64) error {
	if problem := RewardBoundsProblem(value, confidence); problem != "" {
		return fmt.Errorf("%s cannot send this reward: %s", a.Spec.Name, problem)
	}
	if receiver == a.Spec.Name {
		return fmt.Errorf("%s cannot send this reward: nobody rewards itself", a.Spec.Name)
	}
	r := Reward{TrialID: a.Trial.TrialID, Tick: tick, Receiver: receiver, Value: value, Confidence: confidence, Sender: a.Spec.Name}
	return a.svc.emitEvent(a.part, "reward", "trialog.Reward", r.Tick, r.Sender, r.Receiver, "", r.TrialID, &r)
}

// Message sends a JSON payload to receivers (names, "*", "class.*" or "env").
func (a *Actor) Message(receivers []string, payload any) error {
	a.sent++
	return a.message(receivers, payload, fmt.Sprintf("%s-%d-%d", a.Spec.Name, a.tick, a.sent), a.tick)
}

func (a *Actor) message(receivers []string, payload any, id string, tick int64) error {
	text, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	m := Message{TrialID: a.Trial.TrialID, Tick: tick, Sender: a.Spec.Name, Receivers: receivers, MessageID: id, Payload: string(text)}
	return a.svc.emitEvent(a.part, "message", "trialog.Message", tick, m.Sender, strings.Join(receivers, ","), id, m.TrialID, &m)
}

// Config of an actor service: one implementation, one consumer group.
type Config struct {
	Brokers        []string
	TopicPrefix    string   // default "trialog."
	Implementation string   // the spec's implementation name; the group is <TopicPrefix>actors.<Implementation>
	Store          *Store   // Trialog's schemas (LoadDir of the repository's schemas/)
	Key            ActorKey // this implementation's key (LoadActorKey); a seat's key (ParseJoinToken)
	Seat           *Seat    // set: play one client seat of one trial instead of an implementation
	NewAgent       AgentFactory
	Logger         *log.Logger
	Options        []kgo.Opt // extra franz-go options (TLS, SASL, compression…)
}

// Service is a running actor service.
type Service struct {
	eventLog
	cfg    Config
	trials map[string]*trialState
}

type classSchemas struct{ observation, action *Schema }

type played struct {
	actor    *Actor
	class    classSchemas
	agent    Agent
	lastTick int64
	rewards  [][]any // [tick, sender, value] as received (for probes)
	messages [][]any // [tick, sender, message_id]
	seen     map[string]bool
}

type trialState struct {
	started     TrialStarted
	partition   int32
	startOffset int64
	actors      map[string]*played
}

// Run serves the implementation until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if (cfg.Implementation == "" && cfg.Seat == nil) || cfg.Store == nil || cfg.NewAgent == nil || len(cfg.Key.Secret) == 0 {
		return errors.New("trialog: Config needs Implementation (or Seat), Store, Key and NewAgent")
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "trialog."
	}
	group := "" // a seat has no group
	if cfg.Seat == nil {
		group = cfg.TopicPrefix + "actors." + cfg.Implementation // prefixed like the topics
	}
	s := &Service{cfg: cfg, trials: map[string]*trialState{}}
	s.eventLog = newEventLog(cfg.TopicPrefix, group, "actors."+cfg.Implementation, cfg.Store, cfg.Logger, s)
	if err := s.connect(cfg.Brokers, 500*time.Millisecond, cfg.Options); err != nil {
		return err
	}
	defer s.client.Close()
	if cfg.Seat != nil {
		// A seat reads every partition from the start (no group, nothing committed): the
		// log up to the current end is its catch-up, so a restart resumes the seat.
		ends, err := s.endOffsets(ctx, s.client)
		if err != nil {
			return fmt.Errorf("trialog: end offsets of %s: %w", s.events, err)
		}
		ends.Each(func(o kadm.ListedOffset) { s.parts[o.Partition] = newPart(o.Offset) })
		s.log.Printf("trialog: joining trial %s as %s (holder %s)", cfg.Seat.Trial, cfg.Seat.Actor, cfg.Seat.Holder)
	} else {
		s.log.Printf("trialog: serving actors.%s on %s", cfg.Implementation, s.events)
	}
	s.serve(ctx, 0, nil)
	return nil
}

// --- what the event log asks of the service ---

func (t *trialState) place() (int32, int64) { return t.partition, t.startOffset }

func (s *Service) safePoint(p int32, position int64) int64 { return safePointOf(s.trials, p, position) }
func (s *Service) forget(p int32)                          { forgetOn(s.trials, p) }

func (s *Service) caughtUp(p int32, sent int) {
	if sent > 0 {
		s.log.Printf("trialog: partition %d caught up; sending %d events the previous owner did not", p, sent)
	}
}

// --- records ---

func (s *Service) handle(r *kgo.Record, h map[string]string, trialID string) {
	kind := h[HeaderKind]
	if toActors[kind] && kind != "observation" && s.cfg.Key.Check(r) != "" {
		return // not written for us by the core: ignored (its owner dead-letters it)
	}
	if s.cfg.Seat != nil && trialID != s.cfg.Seat.Trial {
		return
	}
	if kind == "trial.pending" && s.cfg.Seat != nil {
		s.join(r, trialID)
		return
	}
	if kind == "trial.started" {
		if _, known := s.trials[trialID]; !known {
			var started TrialStarted
			if _, err := s.cfg.Store.Decode(r.Value, &started); err == nil && started.TrialID == trialID {
				s.start(r, &started)
			}
		}
		return
	}
	t := s.trials[trialID]
	if t == nil {
		return
	}
	switch kind {
	case "observation":
		if t.actors[h[HeaderReceiver]] == nil {
			return // another implementation's actor: not decoded
		}
		if reason := s.cfg.Key.Check(r); reason != "" {
			s.deadLetter(r, "observation: "+reason)
			return
		}
		var obs Observation
		if _, err := s.cfg.Store.Decode(r.Value, &obs); err != nil || obs.TrialID != trialID || t.actors[obs.Actor] == nil || h[HeaderTick] != fmt.Sprint(obs.Tick) {
			s.deadLetter(r, fmt.Sprintf("observation record does not decode as trialog.Observation of this trial: %v", err))
			return
		}
		if problem := obs.CarriedProblem(h); problem != "" { // the record is refused whole: its reward with it
			s.deadLetter(r, fmt.Sprintf("observation of %s at tick %d: %s", obs.Actor, obs.Tick, problem))
			return
		}
		if rw := obs.CarriedReward(); rw != nil {
			s.reward(t, rw) // first: the record it stands for would have come just before the observation
		}
		s.observe(r, t, t.actors[obs.Actor], &obs)
	case "reward":
		var rw Reward
		if _, err := s.cfg.Store.Decode(r.Value, &rw); err != nil || rw.TrialID != trialID {
			return // the orchestrator owns rewards' dead letters
		}
		s.reward(t, &rw)
	case "message":
		var m Message
		if _, err := s.cfg.Store.Decode(r.Value, &m); err != nil || m.TrialID != trialID {
			return // the orchestrator owns messages' dead letters
		}
		for _, a := range t.sortedActors() {
			if m.Sender != a.actor.Spec.Name && addressed(m.Receivers, a.actor.Spec) && a.once("m\x00"+m.Sender+"\x00"+m.MessageID) {
				s.deliverMessage(a, &m)
			}
		}
	case "trial.ended":
		var end TrialEnded
		if _, err := s.cfg.Store.Decode(r.Value, &end); err != nil || end.TrialID != trialID {
			return
		}
		for _, a := range t.sortedActors() {
			if hook, ok := a.agent.(EndReceiver); ok {
				hook.OnEnd(end)
			}
		}
		delete(s.trials, trialID)
	}
}

// reward gives a reward — a record's, or the one an observation carries, alike — to each actor
// played here that it reaches, once (a repeat of the same tick and sender changes nothing).
func (s *Service) reward(t *trialState, rw *Reward) {
	if RewardBoundsProblem(rw.Value, rw.Confidence) != "" || rw.Receiver == rw.Sender {
		return // dead-lettered by the orchestrator: it counts for nothing
	}
	for _, a := range t.sortedActors() {
		if Reaches(rw.Receiver, rw.Sender, a.actor.Spec.Name, a.actor.Spec.ActorClass) && a.once(fmt.Sprintf("r\x00%d\x00%s", rw.Tick, rw.Sender)) {
			a.rewards = append(a.rewards, []any{rw.Tick, rw.Sender, rw.Value})
			if hook, ok := a.agent.(RewardReceiver); ok {
				hook.OnReward(*rw)
			}
		}
	}
}

func (s *Service) start(r *kgo.Record, started *TrialStarted) {
	classes := map[string]classSchemas{}
	for _, c := range started.ActorClasses {
		obs, err1 := s.cfg.Store.Register(c.ObservationSchema)
		act, err2 := s.cfg.Store.Register(c.ActionSchema)
		if err := errors.Join(err1, err2); err != nil {
			s.log.Printf("trialog: trial %s: class %s: %v", started.TrialID, c.Name, err)
			return
		}
		classes[c.Name] = classSchemas{obs, act}
	}
	t := &trialState{started: *started, partition: r.Partition, startOffset: r.Offset, actors: map[string]*played{}}
	for _, spec := range started.Actors {
		if !s.plays(spec) {
			continue
		}
		actor := &Actor{Trial: &t.started, Spec: spec, svc: s, part: r.Partition}
		agent, err := s.cfg.NewAgent(actor)
		if err != nil {
			s.log.Printf("trialog: trial %s: actor %s did not start: %v", started.TrialID, spec.Name, err)
			continue
		}
		t.actors[spec.Name] = &played{actor: actor, class: classes[spec.ActorClass], agent: agent, lastTick: -1, seen: map[string]bool{}}
	}
	if len(t.actors) > 0 {
		s.trials[started.TrialID] = t
	}
}

func (s *Service) observe(r *kgo.Record, t *trialState, a *played, obs *Observation) {
	if obs.Tick <= a.lastTick {
		return // a duplicate (or an old tick): each observation is answered once
	}
	var value any
	if err := s.cfg.Store.DecodeAs(obs.Payload, a.class.observation, &value); err != nil {
		s.deadLetter(r, fmt.Sprintf("observation of %s at tick %d does not match its class's schema: %v", obs.Actor, obs.Tick, err))
		return
	}
	a.lastTick, a.actor.tick, a.actor.sent = obs.Tick, obs.Tick, 0
	if obs.Final {
		return // the actor's part is over: no action
	}
	action, err := a.agent.Decide(ObservationEvent{Tick: obs.Tick, Value: value, Terminated: obs.Terminated, Truncated: obs.Truncated})
	if err == nil {
		var payload []byte
		if payload, err = Encode(a.class.action, action); err == nil {
			act := Action{TrialID: obs.TrialID, Tick: obs.Tick, Actor: obs.Actor, Payload: payload}
			err = s.emitEvent(r.Partition, "action", "trialog.Action", act.Tick, act.Actor, "", "", act.TrialID, &act)
		}
	}
	if err != nil { // the agent's bug: no action; the environment's timeout policy takes over
		s.log.Printf("trialog: trial %s: actor %s produced no valid action at tick %d: %v", obs.TrialID, obs.Actor, obs.Tick, err)
	}
}

// ProbeKey marks a conformance probe message (docs/protocol.md, "Conformance").
const ProbeKey = "trialog.probe"

func (s *Service) deliverMessage(a *played, m *Message) {
	var payload map[string]any
	_ = json.Unmarshal([]byte(m.Payload), &payload)
	if id, ok := payload[ProbeKey].(string); ok {
		ack := map[string]any{ProbeKey + ".ack": id, "rewards": nonNil(a.rewards), "messages": nonNil(a.messages)}
		if err := a.actor.message([]string{m.Sender}, ack, "probe-"+id, m.Tick); err != nil {
			s.log.Printf("trialog: probe answer: %v", err)
		}
		return
	}
	a.messages = append(a.messages, []any{m.Tick, m.Sender, m.MessageID})
	if hook, ok := a.agent.(MessageReceiver); ok {
		hook.OnMessage(*m)
	}
}

func nonNil(v [][]any) [][]any {
	if v == nil {
		return [][]any{}
	}
	return v
}

func (p *played) once(key string) bool {
	if p.seen[key] {
		return false
	}
	p.seen[key] = true
	return true
}

func (t *trialState) sortedActors() []*played {
	names := sortedKeys(t.actors)
	out := make([]*played, len(names))
	for i, n := range names {
		out[i] = t.actors[n]
	}
	return out
}

func addressed(receivers []string, spec ActorSpec) bool {
	for _, r := range receivers {
		if Matches(r, spec.Name, spec.ActorClass) {
			return true
		}
	}
	return false
}

// --- writing ---

// emitEvent encodes an event and sends it with the flush after this batch — or, while
// its partition catches up, sets it aside until the log shows it or catch-up ends.
func (s *Service) emitEvent(partition int32, kind, schema string, tick int64, sender, receiver, id, trialID string, value any) error {
	rec, err := s.encodeEvent(partition, kind, schema, tick, sender, receiver, id, trialID, value)
	if err != nil {
		return err
	}
	if s.cfg.Seat != nil { // every record of a seat names its holder, under the tag
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "holder", Value: []byte(s.cfg.Seat.Holder)})
	}
	s.cfg.Key.Tag(rec)
	s.write(rec, trialID)
	return nil
}

func (s *Service) deadLetter(r *kgo.Record, reason string) {
	if s.cfg.Seat != nil {
		s.log.Printf("trialog: skipped: %s", reason) // a seat's observations are the orchestrator's to judge
		return
	}
	s.eventLog.deadLetter(r, reason)
}
