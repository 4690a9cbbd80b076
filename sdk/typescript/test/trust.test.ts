import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ActorKey, derive, loadActorKey, parseJoinToken } from "../src/trust.js";

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

// The order of Trialog's own services: a keyring file given wins over the variable, which is
// read only when no file is given; no key at all for a remote cluster is an error.
test("a keyring file wins over the variable, as in Trialog's services", () => {
  const dir = mkdtempSync(join(tmpdir(), "trialog-keys-"));
  const file = join(dir, "keyring.json");
  const master = Buffer.alloc(32, 7);
  writeFileSync(file, JSON.stringify({ trialog_keyring: 1, keys: { actors: master.toString("base64url") } }));
  const env = { TRIALOG_KEY_ACTORS_TS: Buffer.alloc(32, 9).toString("base64url") };
  const fromFile = loadActorKey("ts", file, ["kafka.example:9092"], env);
  assert.ok(fromFile.secret.equals(derive(master, "actors", "ts")));
  const fromVariable = loadActorKey("ts", "", ["kafka.example:9092"], env);
  assert.ok(fromVariable.secret.equals(Buffer.alloc(32, 9)));
  assert.throws(() => loadActorKey("ts", "", ["kafka.example:9092"], {}), /no key for actors.ts/);
});
