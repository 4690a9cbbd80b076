package trialog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An environment service (docs/protocol.md, "An environment service"): the tick barrier
// around an Environment. Per trial it writes the observations of tick 0 on trial.started,
// collects one action per active actor, writes actor.timeout (and actor.left) for the
// actors silent past the trial's response timeout and applies them when it reads them
// back, steps, writes the rewards of the tick and the observations of the next, and
// environment.done at the end. Every decision is taken from the log, so a new owner of
// a partition rebuilds each live trial by re-stepping a fresh Environment through the
// logged actions and timeouts (catch-up), writing only what the log lacks.

// EnvTrial is what an environment knows of its trial.
type EnvTrial struct {
	Started *TrialStarted
	Config  map[string]any // the trial's environment_config (JSON object)
	Actors  []ActorSpec    // in the trial's order
}

// Step is what an environment's step returns.
type Step struct {
	Observations          map[string]any     // of the next tick, one per active actor, in the class's observation schema
	Rewards               map[string]float64 // receiver (a name, "*" or "class.*") → value, for the tick just stepped
	Terminated, Truncated map[string]bool    // actors whose part is over (their next observation is final)
	Done                  bool               // the trial is over
}

// Environment simulates one trial. It MUST be deterministic given the trial (its seed
// and config) and the actions: recovery and `trialog replay --verify` re-step it.
// Values are Avro generic values, as the Go library decodes them: a record is a
// map[string]any, an enum a string, a long an int64, a union map[string]any{"<branch>": v}.
type Environment interface {
	Start() (observations map[string]any, err error)
	Step(actions map[string]any) (Step, error) // one action per active actor
}

// ParametersReceiver is an optional hook: parameters.changed, applied before the step of its tick.
type ParametersReceiver interface{ SetParameters(map[string]any) }

// EnvironmentFactory builds the environment of one trial.
type EnvironmentFactory func(trial *EnvTrial) (Environment, error)

// EnvironmentConfig of an environment service: one implementation, one consumer group.
type EnvironmentConfig struct {
	Brokers        []string
	TopicPrefix    string // default "trialog."
	Implementation string // the spec's environment name; the group is <TopicPrefix>env.<Implementation>
	Store          *Store
	Keyring        *Keyring // the deployment's keyring (LoadKeyring): environment, orchestrator, the actors and seats masters
	NewEnvironment EnvironmentFactory
	Logger         *log.Logger
	Options        []kgo.Opt
}

// ActorTimeout: the environment applied the timeout policy to an actor at a tick.
type ActorTimeout struct {
	TrialID string `avro:"trial_id"`
	Tick    int64  `avro:"tick"`
	Actor   string `avro:"actor"`
	Policy  string `avro:"policy"`
}

// ActorLeft: an actor left the trial at a tick.
type ActorLeft struct {
	TrialID string `avro:"trial_id"`
	Tick    int64  `avro:"tick"`
	Actor   string `avro:"actor"`
	Reason  string `avro:"reason"`
}

// EnvironmentDone: the environment stopped stepping the trial after Tick.
type EnvironmentDone struct {
	TrialID string `avro:"trial_id"`
	Tick    int64  `avro:"tick"`
	Reason  string `avro:"reason"`
	Details string `avro:"details"`
}

// ParametersChanged: new parameters from Tick on.
type ParametersChanged struct {
	TrialID    string `avro:"trial_id"`
	Tick       int64  `avro:"tick"`
	Sender     string `avro:"sender"`
	Parameters string `avro:"parameters"`
}

type appliedAction struct {
	tick    int64
	payload []byte
}

type paramChange struct {
	tick   int64
	values map[string]any
}

type hosted struct {
	started      TrialStarted
	env          Environment
	partition    int32
	startOffset  int64
	classOf      map[string]string // actor → class
	keyOf        map[string]string // actor → the key id it writes with
	classes      map[string]classSchemas
	defaults     map[string]any // class → its default action, decoded; absent: none
	tick         int64
	active       map[string]bool
	actions      map[string]any
	applied      map[string]appliedAction
	observed     map[string]int64
	waitingSince time.Time
	timedOut     bool
	terminating  bool
	done         bool
	params       []paramChange
}

type envService struct {
	eventLog
	cfg    EnvironmentConfig
	trials map[string]*hosted
	ended  map[string]bool
}

// endedKept bounds the ended trials remembered (so that a repeated trial.started changes nothing).
const endedKept = 100_000

// coreWriters may write parameters.changed (and rewards and messages under other names).
var coreWriters = []string{"controller", "gateway", "learner", "orchestrator"}

// ServeEnvironment hosts every trial whose environment is cfg.Implementation until ctx is cancelled.
func ServeEnvironment(ctx context.Context, cfg EnvironmentConfig) error {
	if cfg.Implementation == "" || cfg.Store == nil || cfg.Keyring == nil || cfg.NewEnvironment == nil {
		return errors.New("trialog: EnvironmentConfig needs Implementation, Store, Keyring and NewEnvironment")
	}
	for _, id := range []string{"environment", "orchestrator", "actors"} {
		if cfg.Keyring.Key(id, "") == nil {
			return fmt.Errorf("trialog: the keyring (%s) lacks %s: an environment service holds the deployment's keyring", cfg.Keyring.Source, id)
		}
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "trialog."
	}
	s := &envService{cfg: cfg, trials: map[string]*hosted{}, ended: map[string]bool{}}
	s.eventLog = newEventLog(cfg.TopicPrefix, cfg.TopicPrefix+"env."+cfg.Implementation, "environment", cfg.Store, cfg.Logger, s)
	if err := s.connect(cfg.Brokers, 200*time.Millisecond, cfg.Options); err != nil {
		return err
	}
	defer s.client.Close()
	s.log.Printf("trialog: serving env.%s on %s", cfg.Implementation, s.events)
	s.serve(ctx, 250*time.Millisecond, s.timeouts) // timeouts are checked between polls
	return nil
}

// --- what the event log asks of the service ---

func (t *hosted) place() (int32, int64) { return t.partition, t.startOffset }

func (s *envService) safePoint(p int32, position int64) int64 {
	return safePointOf(s.trials, p, position)
}
func (s *envService) forget(p int32) { forgetOn(s.trials, p) }

func (s *envService) caughtUp(p int32, sent int) {
	for _, t := range s.trials {
		if t.partition == p {
			t.waitingSince, t.timedOut = time.Now(), false // the old owner's clock died with it
		}
	}
	s.log.Printf("trialog: partition %d caught up; writing %d events the previous owner did not", p, sent)
}

func (s *envService) live(t *hosted) bool {
	part := s.parts[t.partition]
	return part != nil && part.live
}

// --- records ---

func (s *envService) handle(r *kgo.Record, h map[string]string, trialID string) {
	kind := h[HeaderKind]
	if kind == "trial.started" {
		if s.trials[trialID] != nil || s.ended[trialID] {
			return // a repeated trial.started changes nothing
		}
		var started TrialStarted
		if _, err := s.cfg.Store.Decode(r.Value, &started); err != nil || started.TrialID != trialID || started.Environment != s.cfg.Implementation {
			return
		}
		if reason := s.cfg.Keyring.CheckAny(r, trialID, "orchestrator"); reason != "" {
			s.log.Printf("trialog: trial.started of %s refused: %s", trialID, reason) // the orchestrator's to dead-letter
			return
		}
		s.start(r, &started)
		return
	}
	t := s.trials[trialID]
	if t == nil {
		return
	}
	switch kind {
	case "observation":
		var obs Observation
		if s.cfg.Keyring.CheckAny(r, trialID, "environment") != "" {
			return
		}
		if _, err := s.cfg.Store.Decode(r.Value, &obs); err == nil && obs.TrialID == trialID {
			if last, ok := t.observed[obs.Actor]; !ok || obs.Tick > last {
				t.observed[obs.Actor] = obs.Tick
			}
		}
	case "action":
		s.onAction(r, h, t)
	case "actor.timeout":
		var to ActorTimeout
		if reason := s.cfg.Keyring.CheckAny(r, trialID, "environment"); reason != "" {
			s.deadLetter(r, "refused: actor.timeout: "+reason)
			return
		}
		if _, err := s.cfg.Store.Decode(r.Value, &to); err != nil || to.TrialID != trialID {
			s.deadLetter(r, fmt.Sprintf("actor.timeout does not decode as trialog.ActorTimeout of this trial: %v", err))
			return
		}
		s.onTimeout(t, &to)
	case "parameters.changed":
		var pc ParametersChanged
		if _, err := s.cfg.Store.Decode(r.Value, &pc); err != nil || pc.TrialID != trialID {
			s.deadLetter(r, fmt.Sprintf("parameters.changed does not decode as trialog.ParametersChanged of this trial: %v", err))
			return
		}
		writers := coreWriters
		if key, ok := t.keyOf[pc.Sender]; ok {
			writers = []string{key}
		}
		if reason := s.cfg.Keyring.CheckAny(r, trialID, writers...); reason != "" {
			s.deadLetter(r, "refused: parameters.changed: "+reason)
			return
		}
		var values map[string]any
		if err := json.Unmarshal([]byte(pc.Parameters), &values); err != nil || values == nil || pc.Tick < 0 {
			s.deadLetter(r, fmt.Sprintf("parameters.changed at tick %d must carry a JSON object for a tick >= 0", pc.Tick))
			return
		}
		if t.done {
			s.deadLetter(r, fmt.Sprintf("parameters.changed at tick %d: the trial is over in its environment", pc.Tick))
			return
		}
		t.params = append(t.params, paramChange{pc.Tick, values})
	case "trial.terminating":
		if s.cfg.Keyring.CheckAny(r, trialID, "orchestrator") == "" {
			t.terminating = true
		}
	case "trial.ended":
		if s.cfg.Keyring.CheckAny(r, trialID, "orchestrator") == "" {
			delete(s.trials, trialID)
			if len(s.ended) >= endedKept {
				s.ended = map[string]bool{} // bounded: a trial.started repeated this late is rare
			}
			s.ended[trialID] = true
		}
	}
}

func (s *envService) start(r *kgo.Record, started *TrialStarted) {
	t := &hosted{started: *started, partition: r.Partition, startOffset: r.Offset, classOf: map[string]string{},
		keyOf: map[string]string{}, classes: map[string]classSchemas{}, defaults: map[string]any{}, active: map[string]bool{},
		actions: map[string]any{}, applied: map[string]appliedAction{}, observed: map[string]int64{}}
	s.trials[started.TrialID] = t
	for _, a := range started.Actors {
		t.classOf[a.Name] = a.ActorClass
		t.active[a.Name] = true
		if a.Client {
			t.keyOf[a.Name] = "seat." + a.Name
		} else {
			t.keyOf[a.Name] = "actors." + a.Implementation
		}
	}
	for _, c := range started.ActorClasses {
		obs, err1 := s.cfg.Store.Register(c.ObservationSchema)
		act, err2 := s.cfg.Store.Register(c.ActionSchema)
		if err := errors.Join(err1, err2); err != nil {
			s.fail(t, fmt.Sprintf("class %s: %v", c.Name, err))
			return
		}
		t.classes[c.Name] = classSchemas{obs, act}
		if c.DefaultAction != nil {
			value, err := FromJSON(act, *c.DefaultAction)
			if err != nil {
				s.fail(t, fmt.Sprintf("default action of class %s: %v", c.Name, err))
				return
			}
			t.defaults[c.Name] = value
		}
	}
	if started.TickIntervalMs != nil && *started.TickIntervalMs > 0 {
		s.fail(t, "real-time trials (tick_interval_ms) are not supported by the Go environment library")
		return
	}
	config := map[string]any{}
	if started.EnvironmentConfig != "" {
		if err := json.Unmarshal([]byte(started.EnvironmentConfig), &config); err != nil {
			s.fail(t, "environment_config is not a JSON object: "+err.Error())
			return
		}
	}
	var observations map[string]any
	err := guard(func() error {
		env, err := s.cfg.NewEnvironment(&EnvTrial{Started: &t.started, Config: config, Actors: started.Actors})
		if err != nil {
			return err
		}
		t.env = env
		observations, err = env.Start()
		return err
	})
	if err != nil {
		s.fail(t, "environment start failed: "+err.Error())
		return
	}
	if s.emitObservations(t, 0, observations, Step{}, false, nil, nil) {
		s.beginWait(t)
	}
}

// guard runs user code, turning a panic into an error.
func guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

func (s *envService) onAction(r *kgo.Record, h map[string]string, t *hosted) {
	trialID := t.started.TrialID
	var act Action
	if _, err := s.cfg.Store.Decode(r.Value, &act); err != nil || act.TrialID != trialID || act.Actor != h[HeaderSender] || h[HeaderTick] != fmt.Sprint(act.Tick) {
		s.deadLetter(r, fmt.Sprintf("action record does not decode as trialog.Action of this trial, or disagrees with its headers: %v", err))
		return
	}
	actor, tick := act.Actor, act.Tick
	key, ok := t.keyOf[actor]
	if !ok {
		s.deadLetter(r, fmt.Sprintf("action from %q, who is not an actor of this trial", actor))
		return
	}
	if reason := s.cfg.Keyring.CheckAny(r, trialID, key); reason != "" {
		s.deadLetter(r, fmt.Sprintf("refused: action at tick %d: %s", tick, reason))
		return
	}
	var value any
	if err := s.cfg.Store.DecodeAs(act.Payload, t.classes[t.classOf[actor]].action, &value); err != nil {
		s.deadLetter(r, fmt.Sprintf("action of %s at tick %d does not match its schema: %v", actor, tick, err))
		return
	}
	if last, ok := t.applied[actor]; ok && last.tick == tick && bytes.Equal(last.payload, act.Payload) {
		return // a repeat (I-8)
	}
	if observed, ok := t.observed[actor]; tick < 0 || tick > t.tick || !ok || observed < tick {
		s.deadLetter(r, fmt.Sprintf("action of %s at tick %d: an action answers the actor's observation of the current tick (%d) and is logged after it", actor, tick, t.tick))
		return
	}
	if _, has := t.actions[actor]; tick < t.tick || has {
		s.deadLetter(r, fmt.Sprintf("action of %s at tick %d: that tick already has the actor's action or timeout (current tick %d)", actor, tick, t.tick))
		return
	}
	if t.done {
		return // the answer to the last observation: nothing left to apply it to
	}
	if !t.active[actor] {
		s.deadLetter(r, fmt.Sprintf("action of %s at tick %d: the actor has left the trial", actor, tick))
		return
	}
	t.actions[actor] = value
	t.applied[actor] = appliedAction{tick, act.Payload}
	s.maybeStep(t)
}

func (s *envService) onTimeout(t *hosted, to *ActorTimeout) {
	if _, has := t.actions[to.Actor]; t.done || to.Tick != t.tick || !t.active[to.Actor] || has {
		return // the actor answered first: the log says so, and a replay reads it alike
	}
	if def, ok := t.defaults[t.classOf[to.Actor]]; ok && to.Policy == "default_action" {
		t.actions[to.Actor] = def
	} else {
		delete(t.active, to.Actor)
	}
	s.maybeStep(t)
}

// timeouts writes actor.timeout (and actor.left) for the actors of live trials silent
// past the response timeout; they are applied when read back.
func (s *envService) timeouts() {
	for _, id := range sortedKeys(s.trials) {
		t := s.trials[id]
		if t.done || t.timedOut || !s.live(t) || time.Since(t.waitingSince) < time.Duration(t.started.ResponseTimeoutMs)*time.Millisecond {
			continue
		}
		t.timedOut = true
		policy := t.started.TimeoutPolicy
		for _, actor := range sortedKeys(t.active) {
			if _, has := t.actions[actor]; has {
				continue
			}
			s.emit(t, "actor.timeout", "trialog.ActorTimeout", t.tick, actor, "", &ActorTimeout{t.started.TrialID, t.tick, actor, policy})
			if _, ok := t.defaults[t.classOf[actor]]; policy != "default_action" || !ok {
				s.emit(t, "actor.left", "trialog.ActorLeft", t.tick, actor, "", &ActorLeft{t.started.TrialID, t.tick, actor, "response timeout"})
			}
		}
	}
}

func (s *envService) beginWait(t *hosted) {
	t.waitingSince, t.timedOut = time.Now(), false
}

func (s *envService) maybeStep(t *hosted) {
	if t.done {
		return
	}
	for a := range t.active {
		if _, ok := t.actions[a]; !ok {
			return
		}
	}
	if len(t.active) == 0 {
		s.finish(t, t.tick, "environment", "every actor left the trial")
		return
	}
	tick := t.tick
	var later []paramChange
	for _, p := range t.params { // due at this tick (or late): applied before the step, as a replay does
		if p.tick > tick {
			later = append(later, p)
		} else if hook, ok := t.env.(ParametersReceiver); ok {
			hook.SetParameters(p.values)
		}
	}
	t.params = later
	actions := t.actions
	t.actions = map[string]any{}
	var step Step
	if err := guard(func() (err error) { step, err = t.env.Step(actions); return }); err != nil {
		s.fail(t, fmt.Sprintf("environment step failed at tick %d: %v", tick, err))
		return
	}
	receivers := sortedKeys(step.Rewards)
	for _, rc := range receivers {
		if problem := RewardBoundsProblem(step.Rewards[rc], 1); problem != "" {
			s.fail(t, fmt.Sprintf("environment reward at tick %d cannot count: %s", tick, problem))
			return
		}
	}
	// A reward to an actor by name rides in its observation of the next tick, one record fewer a
	// step (docs/protocol.md, "A reward an observation carries"); one to "*" or "class.*" is a
	// record of its own, written before the observations, as Python's environment runtime does.
	carried := map[string]float64{}
	for _, rc := range receivers {
		if t.active[rc] {
			carried[rc] = step.Rewards[rc]
		} else {
			s.emitReward(t, tick, rc, step.Rewards[rc])
		}
	}
	next := tick + 1
	t.tick = next
	endedNow := map[string]bool{}
	all := true
	for a := range t.active {
		if step.Terminated[a] || step.Truncated[a] {
			endedNow[a] = true
		} else {
			all = false
		}
	}
	reason := ""
	switch {
	case step.Done || all:
		reason = "environment"
	case t.started.MaxTicks != nil && next >= *t.started.MaxTicks:
		reason = "max_ticks"
	case t.terminating:
		reason = "terminated"
	}
	if !s.emitObservations(t, next, step.Observations, step, reason != "", endedNow, carried) {
		return
	}
	if reason != "" {
		s.finish(t, next, reason, "")
		return
	}
	for a := range endedNow {
		delete(t.active, a)
	}
	s.beginWait(t)
}

// emitObservations writes one observation per active actor, each carrying its reward of carried
// (actor → the reward of the tick before); false when the trial failed, and then those rewards
// are written as records of their own first: every reward is logged.
func (s *envService) emitObservations(t *hosted, tick int64, observations map[string]any, step Step, final bool, ended map[string]bool, carried map[string]float64) bool {
	failed := func(details string) bool {
		for _, rc := range sortedKeys(carried) {
			s.emitReward(t, tick-1, rc, carried[rc])
		}
		s.fail(t, details)
		return false
	}
	var missing []string
	for _, a := range sortedKeys(t.active) {
		if _, ok := observations[a]; !ok {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return failed(fmt.Sprintf("environment returned no observation at tick %d for %s", tick, strings.Join(missing, ", ")))
	}
	out := make([]*Observation, 0, len(t.active))
	for _, a := range sortedKeys(t.active) {
		payload, err := Encode(t.classes[t.classOf[a]].observation, observations[a])
		if err != nil {
			return failed(fmt.Sprintf("observation for %s at tick %d does not match its schema: %v", a, tick, err))
		}
		o := &Observation{TrialID: t.started.TrialID, Tick: tick, Actor: a, Payload: payload,
			Terminated: step.Terminated[a], Truncated: step.Truncated[a], Final: final || ended[a]}
		if v, ok := carried[a]; ok {
			o.Reward = &v
		}
		out = append(out, o)
	}
	for _, o := range out {
		s.emit(t, "observation", "trialog.Observation", tick, o.Actor, "", o)
	}
	return true
}

// emitReward writes the environment's reward of tick to receiver as a record of its own.
func (s *envService) emitReward(t *hosted, tick int64, receiver string, value float64) {
	s.emit(t, "reward", "trialog.Reward", tick, receiver, "", &Reward{TrialID: t.started.TrialID, Tick: tick, Receiver: receiver, Value: value, Confidence: 1, Sender: "env"})
}

func (s *envService) finish(t *hosted, tick int64, reason, details string) {
	t.done = true
	s.emit(t, "environment.done", "trialog.EnvironmentDone", tick, "", "", &EnvironmentDone{t.started.TrialID, tick, reason, details})
}

func (s *envService) fail(t *hosted, details string) {
	s.log.Printf("trialog: trial %s failed in its environment: %s", t.started.TrialID, details)
	s.finish(t, t.tick, "error", details)
}

// --- writing ---

// audience is the key ids of the actors a record is addressed to (docs/protocol.md, "Tags").
func (t *hosted) audience(receiver string) []string {
	var out []string
	for _, address := range strings.Split(receiver, ",") {
		for _, a := range sortedKeys(t.keyOf) {
			if Matches(address, a, t.classOf[a]) {
				out = append(out, t.keyOf[a])
			}
		}
	}
	sort.Strings(out)
	return out
}

// emit encodes an event of the environment (sender env) and writes it with the next
// flush, tagged with the environment's key and each receiving actor's — or, while the
// partition catches up, sets it aside until the log shows it or catch-up ends.
func (s *envService) emit(t *hosted, kind, schema string, tick int64, receiver, id string, value any) {
	trialID := t.started.TrialID
	rec, err := s.encodeEvent(t.partition, kind, schema, tick, "env", receiver, id, trialID, value)
	if err != nil {
		s.log.Printf("trialog: %s of %s: %v", kind, trialID, err)
		return
	}
	ids := []string{"environment"}
	if kind != "environment.done" && kind != "view" {
		ids = append(ids, t.audience(receiver)...)
	}
	if err := s.cfg.Keyring.TagWith(rec, trialID, ids...); err != nil {
		s.log.Printf("trialog: %s of %s not written: %v", kind, trialID, err)
		return
	}
	s.write(rec, trialID)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
