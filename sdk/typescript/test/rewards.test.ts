import assert from "node:assert/strict";
import { test } from "node:test";
import { Actor, reaches, rewardBoundsProblem, type TrialStarted } from "../src/service.js";

// The rule of docs/protocol.md, "What counts": the same bounds and reach as trialog/protocol/rewards.py
// and trialog/protocol/trial.py.
test("rewards keep their bounds and never reach their sender", () => {
  for (const [value, confidence] of [[1e12, 1e6], [-1e12, 0], [0, 0]]) assert.equal(rewardBoundsProblem(value, confidence), null);
  assert.match(rewardBoundsProblem(1e308, 1)!, /value 1e\+308/);
  assert.match(rewardBoundsProblem(NaN, 1)!, /value NaN/);
  assert.match(rewardBoundsProblem(1, 2e6)!, /confidence 2000000/);
  assert.match(rewardBoundsProblem(1, -1)!, /confidence -1/);
  assert.ok(!reaches("*", "alice", "alice", "player") && !reaches("player.*", "alice", "alice", "player") && reaches("*", "alice", "bob", "player"));
  const actor = new Actor({ trial_id: "t" } as TrialStarted, { name: "alice", actor_class: "player", implementation: "ts", config: "{}", client: false }, undefined as never, 0);
  assert.throws(() => actor.reward("bob", 0n, 1e308), /cannot send this reward: reward value 1e\+308/);
  assert.throws(() => actor.reward("alice", 0n, 1), /nobody rewards itself/);
});
