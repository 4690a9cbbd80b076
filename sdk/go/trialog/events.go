package trialog

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names (docs/protocol.md, "Headers").
const (
	HeaderKind     = "kind"
	HeaderTick     = "tick"
	HeaderSender   = "sender"
	HeaderReceiver = "receiver"
	HeaderSchema   = "schema"
	HeaderID       = "id"
)

// ActorSpec is one actor of a trial, as resolved by the orchestrator.
type ActorSpec struct {
	Name           string `avro:"name"`
	ActorClass     string `avro:"actor_class"`
	Implementation string `avro:"implementation"`
	Config         string `avro:"config"` // JSON object
	Client         bool   `avro:"client"`
}

// ActorClassSpec carries an actor class's schemas (self-contained Avro JSON).
type ActorClassSpec struct {
	Name              string  `avro:"name"`
	ObservationSchema string  `avro:"observation_schema"`
	ActionSchema      string  `avro:"action_schema"`
	DefaultAction     *string `avro:"default_action"` // JSON, or nil
}

// TrialStarted is the fully resolved trial (kinds trial.started and trial.pending).
type TrialStarted struct {
	TrialID           string           `avro:"trial_id"`
	Spec              string           `avro:"spec"`
	Environment       string           `avro:"environment"`
	EnvironmentEntry  string           `avro:"environment_entry"`
	EnvironmentConfig string           `avro:"environment_config"`
	Actors            []ActorSpec      `avro:"actors"`
	ActorClasses      []ActorClassSpec `avro:"actor_classes"`
	Seed              int64            `avro:"seed"`
	MaxTicks          *int64           `avro:"max_ticks"`
	ResponseTimeoutMs int64            `avro:"response_timeout_ms"`
	TimeoutPolicy     string           `avro:"timeout_policy"`
	Parameters        string           `avro:"parameters"`
	TickIntervalMs    *int64           `avro:"tick_interval_ms"` // real time (schema v3); nil: step when every action is in
}

// Observation is the environment's observation of one actor at one tick.
type Observation struct {
	TrialID    string `avro:"trial_id"`
	Tick       int64  `avro:"tick"`
	Actor      string `avro:"actor"`
	Payload    []byte `avro:"payload"`
	Terminated bool   `avro:"terminated"`
	Truncated  bool   `avro:"truncated"`
	Final      bool   `avro:"final"`
}

// Action answers the observation of Tick.
type Action struct {
	TrialID string `avro:"trial_id"`
	Tick    int64  `avro:"tick"`
	Actor   string `avro:"actor"`
	Payload []byte `avro:"payload"`
}

// Reward is one reward from one sender to Receiver (a name, "*" or "class.*") for Tick.
type Reward struct {
	TrialID    string  `avro:"trial_id"`
	Tick       int64   `avro:"tick"`
	Receiver   string  `avro:"receiver"`
	Value      float64 `avro:"value"`
	Confidence float64 `avro:"confidence"`
	Sender     string  `avro:"sender"`
	UserData   *string `avro:"user_data"` // JSON, or nil
}

// Message is a free JSON payload from Sender to Receivers.
type Message struct {
	TrialID   string   `avro:"trial_id"`
	Tick      int64    `avro:"tick"`
	Sender    string   `avro:"sender"`
	Receivers []string `avro:"receivers"`
	MessageID string   `avro:"message_id"`
	Payload   string   `avro:"payload"` // JSON
}

// TrialEnded is the orchestrator's end of a trial.
type TrialEnded struct {
	TrialID string `avro:"trial_id"`
	Tick    int64  `avro:"tick"`
	Reason  string `avro:"reason"`
	Details string `avro:"details"`
}

// DeadLetter parks a record that could not be used, with the reason.
type DeadLetter struct {
	Topic       string            `avro:"topic"`
	Partition   int32             `avro:"partition"`
	Offset      int64             `avro:"offset"`
	Key         *[]byte           `avro:"key"`
	Value       *[]byte           `avro:"value"`
	Headers     map[string][]byte `avro:"headers"`
	Reason      string            `avro:"reason"`
	Service     string            `avro:"service"`
	TimestampMs int64             `avro:"timestamp_ms"`
}

// Matches says whether an address (a name, "*" or "class.*") names an actor.
func Matches(receiver, actor, actorClass string) bool {
	return receiver == actor || receiver == "*" || receiver == actorClass+".*"
}

// Reaches says whether a reward or message from sender to receiver reaches an actor:
// as Matches, but nothing reaches its own sender ("*" and "class.*" leave it out).
func Reaches(receiver, sender, actor, actorClass string) bool {
	return sender != actor && Matches(receiver, actor, actorClass)
}

// The bounds of a reward that counts (docs/protocol.md, "What counts").
const (
	MaxRewardValue = 1e12 // |value| ≤ MaxRewardValue
	MaxConfidence  = 1e6  // 0 ≤ confidence ≤ MaxConfidence
)

// RewardBoundsProblem says why a reward's value and confidence cannot count ("": they can).
// The comparisons are false for NaN and the infinities too.
func RewardBoundsProblem(value, confidence float64) string {
	if !(value >= -MaxRewardValue && value <= MaxRewardValue) {
		return "reward value " + strconv.FormatFloat(value, 'g', -1, 64) + " is not a finite number between -1e+12 and 1e+12"
	}
	if !(confidence >= 0 && confidence <= MaxConfidence) {
		return "reward confidence " + strconv.FormatFloat(confidence, 'g', -1, 64) + " is not a finite number between 0 and 1e+06"
	}
	return ""
}

// headers returns a record's headers as strings (the last value of a repeated name).
func headers(r *kgo.Record) map[string]string {
	out := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}

// identity is an event's identity from its headers: (trial, kind, tick, sender,
// receiver, id) — two records with equal identities are the same event.
func identity(trialID string, h map[string]string) string {
	return strings.Join([]string{trialID, h[HeaderKind], h[HeaderTick], h[HeaderSender], h[HeaderReceiver], h[HeaderID]}, "\x00")
}

// eventHeaders builds the headers of an event Trialog expects on every record.
func eventHeaders(kind string, tick int64, sender, receiver, schema, id string) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		{Key: HeaderKind, Value: []byte(kind)},
		{Key: HeaderTick, Value: []byte(strconv.FormatInt(tick, 10))},
		{Key: HeaderSender, Value: []byte(sender)},
		{Key: HeaderReceiver, Value: []byte(receiver)},
		{Key: HeaderSchema, Value: []byte(schema)},
	}
	if id != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderID, Value: []byte(id)})
	}
	return hs
}
