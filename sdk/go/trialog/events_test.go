package trialog

import (
	"math"
	"strings"
	"testing"
)

// The rule of docs/protocol.md, "What counts": the same bounds and reach as trialog/protocol/rewards.py
// and trialog/protocol/trial.py.
func TestRewardBoundsAndReach(t *testing.T) {
	for _, c := range []struct {
		value, confidence float64
		problem           string
	}{
		{1e12, 1e6, ""}, {-1e12, 0, ""}, {0, 0, ""},
		{1e308, 1, "value 1e+308"}, {math.NaN(), 1, "value NaN"}, {math.Inf(-1), 1, "value -Inf"},
		{1, 2e6, "confidence 2e+06"}, {1, -1, "confidence -1"}, {1, math.NaN(), "confidence NaN"},
	} {
		got := RewardBoundsProblem(c.value, c.confidence)
		if (c.problem == "") != (got == "") || !strings.Contains(got, c.problem) {
			t.Errorf("RewardBoundsProblem(%v, %v) = %q, want %q", c.value, c.confidence, got, c.problem)
		}
	}
	if Reaches("*", "alice", "alice", "player") || Reaches("player.*", "alice", "alice", "player") || !Reaches("*", "alice", "bob", "player") {
		t.Error("a wildcard must reach every actor but its sender")
	}
	a := &Actor{Spec: ActorSpec{Name: "alice", ActorClass: "player"}}
	if err := a.Reward("bob", 0, 1e308, 1); err == nil || !strings.Contains(err.Error(), "1e+308") {
		t.Errorf("an out-of-bounds reward must be refused, got %v", err)
	}
	if err := a.Reward("alice", 0, 1, 1); err == nil || !strings.Contains(err.Error(), "itself") {
		t.Errorf("a reward to itself must be refused, got %v", err)
	}
}
