package trialog

import (
	"fmt"
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
	// HeaderReward is "1" on an observation that carries a reward (Observation.Reward) and
	// absent from every other record: a reader that skips records by their headers sees the
	// reward without decoding.
	HeaderReward = "reward"
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
	// Reward is the environment's reward for Actor at Tick-1 carried here rather than in a
	// record of its own (schema v2; nil: none, and always nil in v1 records): see CarriedReward.
	Reward *float64 `avro:"reward"`
}

// CarriedReward is the reward the observation carries (nil: none): the same event as a Reward
// record from "env" to its actor for the tick before, confidence 1, no user data, logged just
// before the observation — so an actor service delivers it as that record, before the
// observation. An environment writes a reward this way to save every reader a record a step.
func (o *Observation) CarriedReward() *Reward {
	if o.Reward == nil {
		return nil
	}
	return &Reward{TrialID: o.TrialID, Tick: o.Tick - 1, Receiver: o.Actor, Value: *o.Reward, Confidence: 1, Sender: "env"}
}

// CarriedProblem says why an observation record cannot be read for the reward it carries or
// claims to ("": it can). A carried reward is not at tick 0 (nothing happened before it) and
// counts as a reward's value does (RewardBoundsProblem), else the body does not decode; and the
// record's reward header is "1" if and only if the body carries one. Every reader refuses such a
// record alike, so none counts a reward another dead-letters (docs/protocol.md, "A reward an
// observation carries").
func (o *Observation) CarriedProblem(h map[string]string) string {
	said, present := h[HeaderReward]
	if o.Reward != nil {
		if o.Tick < 1 {
			return "does not decode: an observation of tick 0 carries no reward (nothing happened before it)"
		}
		if problem := RewardBoundsProblem(*o.Reward, 1); problem != "" {
			return "does not decode: the reward it carries cannot count: " + problem
		}
	}
	switch {
	case o.Reward == nil && present:
		return fmt.Sprintf("headers do not match the body: reward header %q but the body carries none", said)
	case o.Reward != nil && !present:
		return "headers do not match the body: no reward header but the body carries a reward"
	case o.Reward != nil && said != "1":
		return fmt.Sprintf("headers do not match the body: reward header %q but the body carries a reward", said)
	}
	return ""
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
