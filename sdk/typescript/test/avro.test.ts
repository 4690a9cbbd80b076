import assert from "node:assert/strict";
import { test } from "node:test";
import { encode, Store } from "../src/avro.js";

test("a long with attributes (CoGrid's action space) is a BigInt long with the fingerprint of long", () => {
  const store = new Store();
  const spaced = store.register({ type: "long", "trialog.space": { type: "Discrete", n: 7, start: 0 } });
  assert.ok(spaced.fingerprint.equals(new Store().register('"long"').fingerprint));
  const bytes = encode(spaced, 6n);
  assert.equal(store.decode(bytes), 6n);
});
