import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorKey, derive, parseJoinToken } from "../src/trust.js";

// The key and tag of a fixed record as Python's trialog.trust computes them
// (derive(master, "actors", "go"), compute_tag(key, mac_input(...))).
test("tags match trialog.trust", () => {
  const key = new ActorKey("actors.go", derive(Buffer.from("0123456789abcdef0123456789abcdef"), "actors", "go"));
  assert.equal(key.secret.toString("hex"), "cf350bd079e6bfc8d5d6dff9eaed11e22efc54638c74e94eebe12e078f54588d");
  const headers = { kind: "action", tick: "3", sender: "bob", receiver: "", schema: "trialog.Action" };
  const h = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)]));
  const [name, tag] = key.tag(Buffer.from("trial-1"), h, Buffer.from("value"));
  assert.equal(name, "mac.actors.go");
  assert.equal(tag.toString("hex"), "42a7a91b9f8706045a9cf32e47b8e51c58872efdbe42f24b49294b15b55b5c32");
  assert.equal(key.check(Buffer.from("trial-1"), { ...h, [name]: tag }, Buffer.from("value")), "");
  assert.match(key.check(Buffer.from("trial-1"), { ...h, [name]: tag }, Buffer.from("altered")), /does not match/);
});

// A join token minted by Python's trialog.trust.join_tokens.mint_join_token (seats master below,
// trial-1, bob): its seat key is derive(seats, "seat", trial, actor).
test("a join token gives the seat and its key", () => {
  const token = "tl1.eyJhY3RvciI6ImJvYiIsImV4cCI6MTcwMDAwMzYwMCwic2VhdF9rZXkiOiJoZUE1RXRmdlVwWVMzRG1aaWpJbjZJU3hhdVE0bHlTV2JaMkZkRGFuOGNjIiwidHJpYWwiOiJ0cmlhbC0xIn0.LAABZ9-uz1firJ8LofJjIFsD132jUDvmMf9vSm8YwTQ";
  const { seat, key } = parseJoinToken(token, "holder-1");
  assert.deepEqual(seat, { trial: "trial-1", actor: "bob", holder: "holder-1" });
  assert.equal(key.id, "seat.bob");
  assert.ok(key.secret.equals(derive(Buffer.from("0123456789abcdef0123456789abcdef"), "seat", "trial-1", "bob")));
  assert.throws(() => parseJoinToken("tl2.x.y", "h"), /not a Trialog join token/);
});
