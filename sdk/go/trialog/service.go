package trialog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sort"
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
	cfg        Config
	events     string
	client     *kgo.Client
	trials     map[string]*trialState
	parts      map[int32]*partState
	out        []*kgo.Record
	log        *log.Logger
	lastCommit time.Time
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

type partState struct {
	end      int64 // the end offset when assigned: catching up until the position reaches it
	position int64
	live     bool
	pending  map[string]*kgo.Record // what catch-up would send, by event identity
	order    []string
}

// Run serves the implementation until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if (cfg.Implementation == "" && cfg.Seat == nil) || cfg.Store == nil || cfg.NewAgent == nil || len(cfg.Key.Secret) == 0 {
		return errors.New("trialog: Config needs Implementation (or Seat), Store, Key and NewAgent")
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "trialog."
	}
	s := &Service{cfg: cfg, events: cfg.TopicPrefix + "events", trials: map[string]*trialState{}, parts: map[int32]*partState{}, log: cfg.Logger}
	if s.log == nil {
		s.log = log.Default()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(s.events),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group (or a seat) reads the whole log
		kgo.RecordPartitioner(partitioner{events: s.events}),
		kgo.FetchMaxWait(500 * time.Millisecond),
		// The producer keeps franz-go's defaults: idempotent, acks=all, snappy compression.
	}
	if cfg.Seat == nil {
		opts = append(opts,
			kgo.ConsumerGroup(cfg.TopicPrefix+"actors."+cfg.Implementation), // prefixed like the topics
			kgo.SessionTimeout(10*time.Second),                              // a dead instance's trials move on within seconds
			kgo.HeartbeatInterval(time.Second),
			kgo.RebalanceTimeout(10*time.Second),
			kgo.DisableAutoCommit(),    // we commit the safe point, not what was read
			kgo.BlockRebalanceOnPoll(), // assignments change between polls only
			kgo.OnPartitionsAssigned(s.assigned),
			kgo.OnPartitionsRevoked(s.revoked),
			kgo.OnPartitionsLost(s.lost),
		)
	}
	client, err := kgo.NewClient(append(opts, cfg.Options...)...)
	if err != nil {
		return err
	}
	s.client = client
	defer client.Close()
	if cfg.Seat != nil {
		// A seat reads every partition from the start (no group, nothing committed): the
		// log up to the current end is its catch-up, so a restart resumes the seat.
		ends, err := kadm.NewClient(client).ListEndOffsets(ctx, s.events)
		if err != nil {
			return fmt.Errorf("trialog: end offsets of %s: %w", s.events, err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			s.parts[o.Partition] = &partState{end: o.Offset, pending: map[string]*kgo.Record{}}
		})
		for p, part := range s.parts {
			if part.end == 0 {
				s.goLive(p, part)
			}
		}
		s.log.Printf("trialog: joining trial %s as %s (holder %s)", cfg.Seat.Trial, cfg.Seat.Actor, cfg.Seat.Holder)
	} else {
		s.log.Printf("trialog: serving actors.%s on %s", cfg.Implementation, s.events)
	}
	for ctx.Err() == nil {
		fetches := client.PollRecords(ctx, 256)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Printf("trialog: fetch %s[%d]: %v", t, p, err)
			}
		})
		fetches.EachRecord(s.process)
		if err := s.flush(ctx); err != nil && ctx.Err() == nil {
			s.log.Printf("trialog: produce failed (the next owner redoes the work): %v", err)
		}
		if time.Since(s.lastCommit) > time.Second {
			s.commit(ctx, nil)
		}
		client.AllowRebalance()
	}
	s.commit(context.Background(), nil)
	return nil
}

// --- partitions: catch-up and safe points (docs/protocol.md, "Consuming and committing") ---

func (s *Service) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, s.events)
	for _, p := range assigned[s.events] {
		end := int64(0)
		if err == nil {
			if o, ok := ends.Lookup(s.events, p); ok {
				end = o.Offset
			}
		}
		s.parts[p] = &partState{end: end, pending: map[string]*kgo.Record{}}
		s.log.Printf("trialog: partition %d assigned; catching up to offset %d", p, end)
	}
}

func (s *Service) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.commit(ctx, revoked[s.events])
	s.lost(ctx, nil, revoked)
}

func (s *Service) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	for _, p := range lost[s.events] {
		delete(s.parts, p)
		for id, t := range s.trials {
			if t.partition == p {
				delete(s.trials, id)
			}
		}
	}
}

// commit writes, per live partition, the safe point: the start of its oldest live
// trial, else the position. With only, just those partitions.
func (s *Service) commit(ctx context.Context, only []int32) {
	if s.cfg.Seat != nil {
		return // a seat has no group: it rebuilds from the start of the log
	}
	offsets := map[int32]kgo.EpochOffset{}
	for p, part := range s.parts {
		if !part.live || (only != nil && !contains(only, p)) {
			continue
		}
		safe := part.position
		for _, t := range s.trials {
			if t.partition == p && t.startOffset < safe {
				safe = t.startOffset
			}
		}
		offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: safe}
	}
	s.lastCommit = time.Now()
	if len(offsets) == 0 || len(s.out) > 0 {
		return // outputs not yet acknowledged: committing now could lose them in a crash
	}
	s.client.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{s.events: offsets}, nil)
}

func contains(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// --- records ---

func (s *Service) process(r *kgo.Record) {
	part := s.parts[r.Partition]
	if part == nil {
		return
	}
	h := headers(r)
	trialID := string(r.Key)
	if !part.live && len(part.pending) > 0 {
		delete(part.pending, identity(trialID, h)) // the log already holds it: never send it again
	}
	s.handle(r, h, trialID)
	part.position = r.Offset + 1
	if !part.live && part.position >= part.end {
		s.goLive(r.Partition, part)
	}
}

func (s *Service) goLive(p int32, part *partState) {
	part.live = true
	sent := 0
	for _, id := range part.order {
		if rec, ok := part.pending[id]; ok {
			s.out = append(s.out, rec)
			sent++
		}
	}
	part.pending, part.order = map[string]*kgo.Record{}, nil
	if sent > 0 {
		s.log.Printf("trialog: partition %d caught up; sending %d events the previous owner did not", p, sent)
	}
}

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
		s.observe(r, t, t.actors[obs.Actor], &obs)
	case "reward":
		var rw Reward
		if _, err := s.cfg.Store.Decode(r.Value, &rw); err != nil || rw.TrialID != trialID {
			return // the orchestrator owns rewards' dead letters
		}
		if RewardBoundsProblem(rw.Value, rw.Confidence) != "" || rw.Receiver == rw.Sender {
			return // dead-lettered by the orchestrator: it counts for nothing
		}
		for _, a := range t.sortedActors() {
			if Reaches(rw.Receiver, rw.Sender, a.actor.Spec.Name, a.actor.Spec.ActorClass) && a.once(fmt.Sprintf("r\x00%d\x00%s", rw.Tick, rw.Sender)) {
				a.rewards = append(a.rewards, []any{rw.Tick, rw.Sender, rw.Value})
				if hook, ok := a.agent.(RewardReceiver); ok {
					hook.OnReward(rw)
				}
			}
		}
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
	names := make([]string, 0, len(t.actors))
	for n := range t.actors {
		names = append(names, n)
	}
	sort.Strings(names)
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
	sch, ok := s.cfg.Store.ByName(schema)
	if !ok {
		return fmt.Errorf("schema %s missing from the store", schema)
	}
	encoded, err := Encode(sch, value)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: s.events, Partition: partition, Key: []byte(trialID), Value: encoded, Headers: eventHeaders(kind, tick, sender, receiver, schema, id)}
	if s.cfg.Seat != nil { // every record of a seat names its holder, under the tag
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "holder", Value: []byte(s.cfg.Seat.Holder)})
	}
	s.cfg.Key.Tag(rec)
	part := s.parts[partition]
	if part != nil && !part.live {
		key := identity(trialID, headers(rec))
		if _, dup := part.pending[key]; !dup {
			part.pending[key] = rec
			part.order = append(part.order, key)
		}
		return nil
	}
	s.out = append(s.out, rec)
	return nil
}

func (s *Service) deadLetter(r *kgo.Record, reason string) {
	if s.cfg.Seat != nil {
		s.log.Printf("trialog: skipped: %s", reason) // a seat's observations are the orchestrator's to judge
		return
	}
	if part := s.parts[r.Partition]; part != nil && !part.live {
		return // reported when it was first read
	}
	hs := map[string][]byte{}
	for _, h := range r.Headers {
		hs[h.Key] = h.Value
	}
	key, value := r.Key, r.Value
	letter := DeadLetter{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: &key, Value: &value, Headers: hs, Reason: reason, Service: "actors." + s.cfg.Implementation, TimestampMs: r.Timestamp.UnixMilli()}
	sch, _ := s.cfg.Store.ByName("trialog.DeadLetter")
	encoded, err := Encode(sch, &letter)
	if err != nil {
		s.log.Printf("trialog: cannot write a dead letter: %v", err)
		return
	}
	s.log.Printf("trialog: dead letter: %s", reason)
	s.out = append(s.out, &kgo.Record{Topic: s.cfg.TopicPrefix + "dead-letters", Key: r.Key, Value: encoded,
		Headers: []kgo.RecordHeader{{Key: HeaderKind, Value: []byte("dead-letter")}, {Key: HeaderSchema, Value: []byte("trialog.DeadLetter")}}})
}

func (s *Service) flush(ctx context.Context) error {
	if len(s.out) == 0 {
		return nil
	}
	out := s.out
	err := s.client.ProduceSync(ctx, out...).FirstErr()
	s.out = nil
	return err
}

// partitioner writes events to the partition the trial was read from (set on the
// record) and everything else by key, as Kafka's default partitioner does (murmur2).
type partitioner struct{ events string }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.events {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return kgo.StickyKeyPartitioner(nil).ForTopic(topic)
}
