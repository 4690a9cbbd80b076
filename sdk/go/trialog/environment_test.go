package trialog

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The keyring of an environment service derives the keys of schemas/vectors/trust.json
// and tags as Python does.
func TestKeyringDerivesAndTagsAsTheVectors(t *testing.T) {
	v := readTrustVectors(t)
	file := filepath.Join(t.TempDir(), "keyring.json")
	doc, _ := json.Marshal(map[string]any{"trialog_keyring": 1, "keys": v.Keyring.Keys})
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKeyring(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range v.DerivedKeys {
		trial := ""
		if d.Master == "seats" && len(d.Parts) == 3 {
			trial = d.Parts[1]
		}
		if d.Master == "seats" && len(d.Parts) != 3 {
			continue // the join-token key: not an environment's business
		}
		if got := hex.EncodeToString(k.Key(d.KeyID, trial)); got != d.KeyHex {
			t.Fatalf("%s: %s, want %s", d.KeyID, got, d.KeyHex)
		}
	}
	files := map[string]string{}
	for _, m := range readManifest(t).Vectors {
		files[m.Name] = m.File
	}
	checked := 0
	for _, tv := range v.Tags {
		if _, ok := tv.Tags["mac.environment"]; !ok {
			continue
		}
		value, _ := os.ReadFile(filepath.Join(schemasDir, "vectors", files[tv.Vector]))
		r := &kgo.Record{Key: []byte(tv.RecordKey), Value: value}
		for name, text := range tv.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(text)})
		}
		var ids []string
		for header := range tv.Tags {
			ids = append(ids, strings.TrimPrefix(header, macPrefix))
		}
		if err := k.TagWith(r, tv.RecordKey, ids...); err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Headers {
			if want, ok := tv.Tags[h.Key]; ok && hex.EncodeToString(h.Value) != want {
				t.Fatalf("%s: %s is %x, want %s", tv.Vector, h.Key, h.Value, want)
			}
		}
		if reason := k.CheckAny(r, tv.RecordKey, "environment"); reason != "" {
			t.Fatal(reason)
		}
		r.Value = append([]byte{}, r.Value...)
		r.Value[len(r.Value)-1] ^= 1
		if k.CheckAny(r, tv.RecordKey, "environment") == "" {
			t.Fatal("an altered record passed the check")
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no vector tagged by the environment")
	}
}

func rpsSchemas(t *testing.T) (string, string) {
	raw, err := os.ReadFile(filepath.Join(schemasDir, "..", "examples", "rps", "observation.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw), `{"type": "enum", "name": "rps.Move", "symbols": ["ROCK", "PAPER", "SCISSORS"]}`
}

func TestFromJSONGivesDecodedValues(t *testing.T) {
	store := NewStore()
	obsJSON, actJSON := rpsSchemas(t)
	obs, _ := store.Register(obsJSON)
	act, _ := store.Register(actJSON)
	if v, err := FromJSON(act, `"PAPER"`); err != nil || v != "PAPER" {
		t.Fatalf("enum: %v %v", v, err)
	}
	v, err := FromJSON(obs, `{"round": 3, "my_score": 1, "their_score": 2, "their_last_move": "ROCK"}`)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["round"] != int64(3) || m["their_last_move"].(map[string]any)["rps.Move"] != "ROCK" {
		t.Fatalf("record: %#v", m)
	}
	if v, err := FromJSON(obs, `{"round": 0, "my_score": 0, "their_score": 0, "their_last_move": null}`); err != nil || v.(map[string]any)["their_last_move"] != nil {
		t.Fatalf("null branch: %v %v", v, err)
	}
	for _, bad := range []string{`"LIZARD"`, `3`, `not json`} {
		if _, err := FromJSON(act, bad); err == nil {
			t.Fatalf("%s accepted as an rps.Move", bad)
		}
	}
}

// An environment service without Kafka: records in through handle, records out in s.out.
type harness struct {
	t     *testing.T
	s     *envService
	keys  *Keyring
	store *Store
}

// testStoreAndKeyring is the repository's schemas and a keyring of fresh random keys for the roles.
func testStoreAndKeyring(t *testing.T) (*Store, *Keyring) {
	store, err := LoadDir(schemasDir)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]byte{}
	for _, id := range []string{"orchestrator", "environment", "actors", "seats"} {
		keys[id] = make([]byte, 32)
		rand.Read(keys[id])
	}
	return store, NewKeyring(keys, "test")
}

func newHarness(t *testing.T, policy string, timeoutMs int64) (*harness, string) {
	store, k := testStoreAndKeyring(t)
	s := &envService{cfg: EnvironmentConfig{Implementation: "go_rps", Store: store, Keyring: k, NewEnvironment: func(tr *EnvTrial) (Environment, error) {
		return newTestRps(tr)
	}}, trials: map[string]*hosted{}, ended: map[string]bool{}}
	s.eventLog = newEventLog("t.", "", "environment", store, testLogger(t), s)
	s.parts[0] = newPart(0) // live
	h := &harness{t, s, k, store}
	obsJSON, actJSON := rpsSchemas(t)
	def := `"ROCK"`
	maxTicks := int64(50)
	started := TrialStarted{TrialID: "t1", Spec: "rps", Environment: "go_rps", EnvironmentConfig: `{"target_score": 2}`,
		Actors:       []ActorSpec{{Name: "alice", ActorClass: "player", Implementation: "py", Config: "{}"}, {Name: "bob", ActorClass: "player", Implementation: "go", Config: "{}"}},
		ActorClasses: []ActorClassSpec{{Name: "player", ObservationSchema: obsJSON, ActionSchema: actJSON, DefaultAction: &def}},
		Seed:         1, MaxTicks: &maxTicks, ResponseTimeoutMs: timeoutMs, TimeoutPolicy: policy, Parameters: "{}"}
	h.in("trial.started", "trialog.TrialStarted", -1, "orchestrator", "", &started, "orchestrator")
	return h, "t1"
}

// newTestRps builds a tiny game on rps's schemas (the example game lives in package examples).
func newTestRps(tr *EnvTrial) (Environment, error) { return &echo{actors: tr.Actors}, nil }

// echo observes the round and the opponent's last move; each round pays the player with ROCK +1.
type echo struct {
	actors  []ActorSpec
	round   int64
	last    map[string]any
	missing string // an actor whose observation Step leaves out (a broken environment)
}

func (e *echo) obs() map[string]any {
	out := map[string]any{}
	for i, a := range e.actors {
		var last any
		if m, ok := e.last[e.actors[1-i].Name].(string); ok {
			last = map[string]any{"rps.Move": m}
		}
		out[a.Name] = map[string]any{"round": e.round, "my_score": int64(0), "their_score": int64(0), "their_last_move": last}
	}
	return out
}
func (e *echo) Start() (map[string]any, error) { return e.obs(), nil }
func (e *echo) Step(actions map[string]any) (Step, error) {
	e.round++
	e.last = actions
	rewards := map[string]float64{}
	for a, m := range actions {
		if m == "ROCK" {
			rewards[a] = 1
		}
	}
	observations := e.obs()
	delete(observations, e.missing)
	return Step{Observations: observations, Rewards: rewards}, nil
}

func (h *harness) record(kind, schema string, tick int64, sender, receiver string, value any, tagIDs ...string) *kgo.Record {
	sch, _ := h.store.ByName(schema)
	encoded, err := Encode(sch, value)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &kgo.Record{Topic: "t.events", Key: []byte("t1"), Value: encoded, Headers: eventHeaders(kind, tick, sender, receiver, schema, "")}
	if err := h.keys.TagWith(r, "t1", tagIDs...); err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) in(kind, schema string, tick int64, sender, receiver string, value any, tagIDs ...string) {
	r := h.record(kind, schema, tick, sender, receiver, value, tagIDs...)
	h.s.handle(r, headers(r), "t1")
}

// takeOut returns what the service wrote since the last call, and reads it back (as from the log).
func (h *harness) takeOut() []*kgo.Record {
	var all []*kgo.Record
	for len(h.s.out) > 0 {
		out := h.s.out
		h.s.out = nil
		all = append(all, out...)
		for _, r := range out {
			if r.Topic == "t.events" {
				h.s.handle(r, headers(r), "t1")
			}
		}
	}
	return all
}

func (h *harness) action(actor string, tick int64, move string, keyID string) {
	act, _ := h.store.Register(`{"type": "enum", "name": "rps.Move", "symbols": ["ROCK", "PAPER", "SCISSORS"]}`)
	payload, _ := Encode(act, move)
	h.in("action", "trialog.Action", tick, actor, "", &Action{TrialID: "t1", Tick: tick, Actor: actor, Payload: payload}, keyID)
}

func kinds(rs []*kgo.Record) string {
	var out []string
	for _, r := range rs {
		h := headers(r)
		k := h[HeaderKind] + "@" + h[HeaderTick] + ">" + h[HeaderReceiver]
		if h[HeaderReward] == "1" {
			k += "+reward" // an observation carrying its actor's reward of the tick before
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}

func TestEnvironmentStepsTimesOutAndDeadLetters(t *testing.T) {
	h, _ := newHarness(t, "default_action", 60_000)
	if got := kinds(h.takeOut()); got != "observation@0>alice observation@0>bob" {
		t.Fatalf("tick 0: %s", got)
	}
	h.action("alice", 0, "ROCK", "actors.py")
	h.action("alice", 0, "ROCK", "actors.py") // a repeat: nothing
	if out := h.takeOut(); len(out) != 0 {
		t.Fatalf("stepped before every action was in: %s", kinds(out))
	}
	h.action("bob", 0, "PAPER", "actors.py") // tagged with another implementation's key: refused
	if out := h.takeOut(); len(out) != 1 || !strings.HasSuffix(out[0].Topic, "dead-letters") {
		t.Fatalf("a forged action: %s", kinds(out))
	}
	h.action("bob", 0, "PAPER", "actors.go")
	out := h.takeOut()
	if got := kinds(out); got != "observation@1>alice+reward observation@1>bob" {
		t.Fatalf("tick 0 stepped: %s", got)
	}
	for _, r := range out {
		hs := headers(r)
		want := map[string]string{"alice": "actors.py", "bob": "actors.go"}[hs[HeaderReceiver]]
		if reason := h.keys.CheckAny(r, "t1", "environment"); reason != "" {
			t.Fatal(reason)
		}
		if reason := h.keys.CheckAny(r, "t1", want); reason != "" {
			t.Fatalf("%s to %s: %s", hs[HeaderKind], hs[HeaderReceiver], reason)
		}
		if hs[HeaderKind] == "observation" { // the current schema (v2): alice's carries her reward for ROCK
			var obs Observation
			writer, err := h.store.Decode(r.Value, &obs)
			carries := obs.Reward != nil && *obs.Reward == 1 && obs.CarriedReward().Tick == 0
			if current, _ := h.store.ByName("trialog.Observation"); err != nil || writer != current || carries != (obs.Actor == "alice") || obs.CarriedProblem(hs) != "" {
				t.Fatalf("observation to %s: %v, reward %v, headers %v", obs.Actor, err, obs.Reward, hs)
			}
		}
	}
	// Tick 1: bob is silent past the response timeout.
	h.action("alice", 1, "PAPER", "actors.py") // bob gets ROCK, the default action, which pays
	h.s.trials["t1"].waitingSince = time.Now().Add(-2 * time.Minute)
	h.s.timeouts()
	h.s.timeouts() // once per tick
	if got := kinds(h.takeOut()); got != "actor.timeout@1>bob observation@2>alice observation@2>bob+reward" {
		t.Fatalf("timeout applied when read back: %s", got)
	}
	h.action("bob", 1, "SCISSORS", "actors.go") // late: dead-lettered, nothing stepped
	if out := h.takeOut(); len(out) != 1 || !strings.HasSuffix(out[0].Topic, "dead-letters") {
		t.Fatalf("a late action: %s", kinds(out))
	}
}

func TestEnvironmentDropPolicyAndMaxTicks(t *testing.T) {
	h, _ := newHarness(t, "drop", 60_000)
	h.takeOut()
	h.action("alice", 0, "ROCK", "actors.py")
	h.s.trials["t1"].waitingSince = time.Now().Add(-2 * time.Minute)
	h.s.timeouts()
	if got := kinds(h.takeOut()); got != "actor.timeout@0>bob actor.left@0>bob observation@1>alice+reward" {
		t.Fatalf("drop: %s", got)
	}
	max := int64(3)
	h.s.trials["t1"].started.MaxTicks = &max
	h.action("alice", 1, "ROCK", "actors.py")
	h.takeOut()
	h.action("alice", 2, "ROCK", "actors.py")
	out := h.takeOut()
	if got := kinds(out); got != "observation@3>alice+reward environment.done@3>" {
		t.Fatalf("max ticks: %s", got)
	}
	var obs Observation
	h.store.Decode(out[0].Value, &obs)
	var done EnvironmentDone
	h.store.Decode(out[1].Value, &done)
	if !obs.Final || obs.Reward == nil || done.Reason != "max_ticks" {
		t.Fatalf("final %v, reason %q", obs.Final, done.Reason)
	}
}

func TestEnvironmentWritesCarriedRewardsAsRecordsWhenItsObservationsFail(t *testing.T) {
	h, _ := newHarness(t, "default_action", 60_000)
	h.takeOut()
	h.s.trials["t1"].env.(*echo).missing = "bob"
	h.action("alice", 0, "ROCK", "actors.py")
	h.action("bob", 0, "ROCK", "actors.go")
	out := h.takeOut()
	if got := kinds(out); got != "reward@0>alice reward@0>bob environment.done@1>" {
		t.Fatalf("no observation for bob: %s", got)
	}
	var done EnvironmentDone
	h.store.Decode(out[2].Value, &done)
	if done.Reason != "error" || !strings.Contains(done.Details, "no observation at tick 1 for bob") {
		t.Fatalf("done: %+v", done)
	}
}

func testLogger(t *testing.T) *log.Logger { return log.New(testWriter{t}, "", 0) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
