package trialog

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An actor service without Kafka: records in through handle, records out in s.out, and
// what its agents were given, in order, in seen.
type actorHarness struct {
	t     *testing.T
	s     *Service
	keys  *Keyring
	store *Store
	obs   *Schema // rps.Observation, the class's observation schema
	seen  []string
}

// recorder plays rock and notes each call the service makes on it.
type recorder struct {
	name string
	h    *actorHarness
}

func (r *recorder) Decide(obs ObservationEvent) (any, error) {
	r.h.seen = append(r.h.seen, fmt.Sprintf("%s decide@%d", r.name, obs.Tick))
	return "ROCK", nil
}

func (r *recorder) OnReward(rw Reward) {
	r.h.seen = append(r.h.seen, fmt.Sprintf("%s reward@%d %s %g×%g", r.name, rw.Tick, rw.Sender, rw.Value, rw.Confidence))
}

func newActorHarness(t *testing.T) *actorHarness {
	store, k := testStoreAndKeyring(t)
	h := &actorHarness{t: t, keys: k, store: store}
	h.s = &Service{cfg: Config{Implementation: "go", Store: store, Key: ActorKey{"actors.go", k.Key("actors.go", "t1")},
		NewAgent: func(a *Actor) (Agent, error) { return &recorder{a.Spec.Name, h}, nil }}, trials: map[string]*trialState{}}
	h.s.eventLog = newEventLog("t.", "", "actors.go", store, testLogger(t), h.s)
	h.s.parts[0] = newPart(0) // live
	obsJSON, actJSON := rpsSchemas(t)
	var err error
	if h.obs, err = store.Register(obsJSON); err != nil {
		t.Fatal(err)
	}
	started := TrialStarted{TrialID: "t1", Spec: "rps", Environment: "rps", EnvironmentConfig: "{}",
		Actors:       []ActorSpec{{Name: "alice", ActorClass: "player", Implementation: "go", Config: "{}"}, {Name: "bob", ActorClass: "player", Implementation: "py", Config: "{}"}},
		ActorClasses: []ActorClassSpec{{Name: "player", ObservationSchema: obsJSON, ActionSchema: actJSON}},
		Seed:         1, ResponseTimeoutMs: 60_000, TimeoutPolicy: "default_action", Parameters: "{}"}
	h.in(h.record("trial.started", "trialog.TrialStarted", -1, "orchestrator", "", &started, nil))
	return h
}

// record is an event record as the core writes it to alice's implementation, with extra headers
// before the tag (the reward header is not under it: the body it must agree with is).
func (h *actorHarness) record(kind, schema string, tick int64, sender, receiver string, value any, extra map[string]string) *kgo.Record {
	sch, _ := h.store.ByName(schema)
	encoded, err := Encode(sch, value)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &kgo.Record{Topic: "t.events", Key: []byte("t1"), Value: encoded, Headers: eventHeaders(kind, tick, sender, receiver, schema, "")}
	for name, v := range extra {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(v)})
	}
	if err := h.keys.TagWith(r, "t1", "actors.go"); err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *actorHarness) in(r *kgo.Record) { h.s.handle(r, headers(r), "t1") }

// observation of alice at tick, carrying reward when not nil, with the given reward header ("": none).
func (h *actorHarness) observation(tick int64, reward *float64, header string) *kgo.Record {
	payload, err := Encode(h.obs, map[string]any{"round": tick, "my_score": int64(0), "their_score": int64(0), "their_last_move": nil})
	if err != nil {
		h.t.Fatal(err)
	}
	extra := map[string]string{}
	if header != "" {
		extra[HeaderReward] = header
	}
	obs := Observation{TrialID: "t1", Tick: tick, Actor: "alice", Payload: payload, Reward: reward}
	return h.record("observation", "trialog.Observation", tick, "env", "alice", &obs, extra)
}

// takeOut returns the kinds of what the service wrote since the last call ("dead-letter" for a letter).
func (h *actorHarness) takeOut() string {
	out := h.s.out
	h.s.out = nil
	return kinds(out)
}

func (h *actorHarness) takeSeen() string {
	seen := strings.Join(h.seen, ", ")
	h.seen = nil
	return seen
}

func float(v float64) *float64 { return &v }

// A reward an observation carries reaches the agent as the reward record it stands for would
// (from env, for the tick before, confidence 1), before the observation; a repeat of either form
// changes nothing.
func TestACarriedRewardIsDeliveredBeforeItsObservation(t *testing.T) {
	h := newActorHarness(t)
	h.in(h.observation(0, nil, ""))
	if got := h.takeSeen(); got != "alice decide@0" {
		t.Fatalf("tick 0: %s", got)
	}
	carrying := h.observation(1, float(-1.5), "1")
	h.in(carrying)
	if got := h.takeSeen(); got != "alice reward@0 env -1.5×1, alice decide@1" {
		t.Fatalf("tick 1: %s", got)
	}
	if got := h.takeOut(); got != "action@0> action@1>" {
		t.Fatalf("written: %s", got)
	}
	h.in(carrying) // read again (a duplicate, or after a restart)
	h.in(h.record("reward", "trialog.Reward", 0, "env", "alice", &Reward{TrialID: "t1", Tick: 0, Receiver: "alice", Value: -1.5, Confidence: 1, Sender: "env"}, nil))
	if got := h.takeSeen() + h.takeOut(); got != "" {
		t.Fatalf("a repeat changed something: %s", got)
	}
	if got := fmt.Sprint(h.s.trials["t1"].actors["alice"].rewards); got != "[[0 env -1.5]]" {
		t.Fatalf("rewards a probe lists: %s", got)
	}
	// A record from env still counts as before, and rewards of later ticks ride in later observations.
	h.in(h.record("reward", "trialog.Reward", 1, "judge", "alice", &Reward{TrialID: "t1", Tick: 1, Receiver: "alice", Value: 2, Confidence: 0.5, Sender: "judge"}, nil))
	h.in(h.observation(2, float(0), "1"))
	if got := h.takeSeen(); got != "alice reward@1 judge 2×0.5, alice reward@1 env 0×1, alice decide@2" {
		t.Fatalf("tick 2: %s", got)
	}
}

// An observation whose reward header and body disagree, or whose carried reward could not count,
// is refused whole: dead-lettered, its reward not delivered, no action.
func TestAnObservationWithABadCarriedRewardIsRefusedWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		tick   int64
		reward *float64
		header string
		reason string
	}{
		{"no header", 1, float(1), "", "no reward header but the body carries a reward"},
		{"a header, no reward", 1, nil, "1", `reward header "1" but the body carries none`},
		{"another header value", 1, float(1), "true", `reward header "true" but the body carries a reward`},
		{"tick 0", 0, float(1), "1", "an observation of tick 0 carries no reward"},
		{"NaN", 1, float(math.NaN()), "1", "reward value NaN"},
		{"out of bounds", 1, float(-2e12), "1", "reward value -2e+12"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newActorHarness(t)
			h.in(h.observation(c.tick, c.reward, c.header))
			out := h.s.out
			if got := h.takeSeen(); got != "" {
				t.Fatalf("delivered: %s", got)
			}
			if len(out) != 1 || out[0].Topic != "t.dead-letters" {
				t.Fatalf("written: %s", kinds(out))
			}
			var letter DeadLetter
			if _, err := h.store.Decode(out[0].Value, &letter); err != nil || !strings.Contains(letter.Reason, c.reason) {
				t.Fatalf("dead letter %q (%v), want it to say %q", letter.Reason, err, c.reason)
			}
		})
	}
}

// Observations decode from v2 records (with or without a reward) and from v1 records (written
// before the field existed: none), as the vectors hold them; their headers agree with them.
func TestObservationsOfEitherSchemaVersionDecode(t *testing.T) {
	store, err := LoadDir(schemasDir)
	if err != nil {
		t.Fatal(err)
	}
	kafka := map[string]map[string]string{}
	for _, v := range readManifest(t).Vectors {
		if len(v.Kafka) > 0 {
			var k struct {
				Headers map[string]string `json:"headers"`
			}
			if err := json.Unmarshal(v.Kafka, &k); err != nil {
				t.Fatal(err)
			}
			kafka[v.Name] = k.Headers
		}
	}
	for _, c := range []struct {
		vector string
		reward *float64
	}{
		{"event.observation", nil}, {"event.observation.2", float(-1.5)}, {"evolution.observation.v1-to-v2", nil},
	} {
		value, err := os.ReadFile(filepath.Join(schemasDir, "vectors", c.vector+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		var obs Observation
		if _, err := store.Decode(value, &obs); err != nil {
			t.Fatalf("%s: %v", c.vector, err)
		}
		if fmt.Sprint(obs.Reward != nil) != fmt.Sprint(c.reward != nil) || (c.reward != nil && *obs.Reward != *c.reward) {
			t.Fatalf("%s: reward %v, want %v", c.vector, obs.Reward, c.reward)
		}
		if problem := obs.CarriedProblem(kafka[c.vector]); problem != "" {
			t.Fatalf("%s: %s", c.vector, problem)
		}
		if rw := obs.CarriedReward(); c.reward != nil && *rw != (Reward{TrialID: obs.TrialID, Tick: obs.Tick - 1, Receiver: "alice", Value: *c.reward, Confidence: 1, Sender: "env"}) {
			t.Fatalf("%s: carried reward %+v", c.vector, *rw)
		}
	}
}
