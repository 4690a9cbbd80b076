/**
 * The reward an observation carries (docs/protocol.md, "A reward an observation carries"): the
 * service delivers it as the reward record it stands for, before the observation, and refuses a
 * record whose reward header and body disagree or whose carried reward could not count.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { encode, Store } from "../src/avro.js";
import { ActorService, carriedProblem, carriedReward, type Observation, type Reward } from "../src/service.js";
import { ActorKey, type Headers } from "../src/trust.js";

const SCHEMAS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "schemas");
const VECTORS = join(SCHEMAS, "vectors");
const manifest = JSON.parse(readFileSync(join(VECTORS, "manifest.json"), "utf8")) as { vectors: any[] };
const vector = (name: string) => manifest.vectors.find((v) => v.name === name)!;
const bytes = (name: string) => readFileSync(join(VECTORS, vector(name).file));
const headersOf = (name: string): Headers => Object.fromEntries(Object.entries(vector(name).kafka.headers as Record<string, string>).map(([k, v]) => [k, Buffer.from(v)]));

/** An actor service without Kafka, playing the vectors' trial (alice, implementation "scripted"):
 * records in through handle, records out in `out`, what its agent was given in `seen`. */
function harness() {
  const store = Store.loadDir(SCHEMAS);
  const key = new ActorKey("actors.scripted", Buffer.alloc(32, 1));
  const seen: string[] = [];
  const agent = {
    decide: (obs: { tick: bigint }) => (seen.push(`decide@${obs.tick}`), { dx: 0, dy: 0, say: null }),
    onReward: (r: Reward) => seen.push(`reward@${r.tick} ${r.sender} ${r.value}×${r.confidence}`),
  };
  const svc = new ActorService({ brokers: ["127.0.0.1:9092"], implementation: "scripted", store, key, newAgent: () => agent, log: () => {} }) as any;
  svc.parts.set(0, { end: 0n, position: 0n, live: true, pending: new Map() });
  let offset = 0;
  const send = (value: Buffer, headers: Headers) => {
    const k = Buffer.from(vector("event.trial.started").kafka.key);
    const [name, tag] = key.tag(k, headers, value);
    const all = { ...headers, [name]: tag };
    const m = { key: k, value, headers: all, timestamp: "0", offset: String(offset++), attributes: 0 };
    svc.handle(0, BigInt(m.offset), k, all, value, k.toString(), m);
  };
  send(bytes("event.trial.started"), headersOf("event.trial.started"));
  const take = () => {
    const out = svc.out.map((r: any) => (r.topic.endsWith("dead-letters") ? "dead-letter" : `${r.headers.kind}@${r.headers.tick}`));
    svc.out = [];
    return [...seen.splice(0), ...out].join(", ");
  };
  /** An observation of alice, carrying `reward` (null: none), with the reward header `header` (undefined: none). */
  const observation = (tick: bigint, reward: number | null, header?: string) => {
    const obs: Observation = { trial_id: vector("event.trial.started").kafka.key, tick, actor: "alice", payload: bytes("payload.observation.full"), terminated: false, truncated: false, final: false, reward: reward === null ? null : { double: reward } };
    const headers: Headers = { ...headersOf("event.observation"), tick: Buffer.from(String(tick)) };
    delete headers.reward;
    if (header !== undefined) headers.reward = Buffer.from(header);
    send(encode(store.byFullName("trialog.Observation")!, obs), headers);
  };
  return { svc, send, take, observation };
}

test("a carried reward reaches the agent as its reward record would, before the observation", () => {
  const h = harness();
  h.send(bytes("event.observation.2"), headersOf("event.observation.2")); // tick 2, carrying -1.5
  assert.equal(h.take(), "reward@1 env -1.5×1, decide@2, action@2");
  h.send(bytes("event.observation.2"), headersOf("event.observation.2")); // read again
  const record = { trial_id: vector("event.trial.started").kafka.key, tick: 1n, receiver: "alice", value: -1.5, confidence: 1, sender: "env", user_data: null };
  h.send(encode(Store.loadDir(SCHEMAS).byFullName("trialog.Reward")!, record), { kind: Buffer.from("reward"), tick: Buffer.from("1"), sender: Buffer.from("env"), receiver: Buffer.from("alice"), schema: Buffer.from("trialog.Reward") });
  assert.equal(h.take(), "", "the same reward again, in either form, changes nothing");
  h.observation(3n, 0.25, "1");
  assert.equal(h.take(), "reward@2 env 0.25×1, decide@3, action@3");
  assert.deepEqual(h.svc.trials.values().next().value.actors.get("alice").rewards, [[1n, "env", -1.5], [2n, "env", 0.25]]);
});

test("an observation whose reward header and body disagree, or whose carried reward cannot count, is refused whole", () => {
  for (const [tick, reward, header, reason] of [
    [1n, 1, undefined, /no reward header but the body carries a reward/],
    [1n, null, "1", /reward header "1" but the body carries none/],
    [1n, 1, "true", /reward header "true" but the body carries a reward/],
    [0n, 1, "1", /tick 0 carries no reward/],
    [1n, NaN, "1", /reward value NaN/],
    [1n, 2e12, "1", /reward value 2000000000000/],
  ] as const) {
    const h = harness();
    const letters: string[] = [];
    h.svc.log = (line: string) => letters.push(line);
    h.observation(tick, reward, header);
    assert.equal(h.take(), "dead-letter", `${tick} ${reward} ${header}`);
    assert.match(letters.join("\n"), reason);
  }
});

test("observations of either schema version read, their headers agreeing with them", () => {
  const store = Store.loadDir(SCHEMAS);
  for (const [name, reward] of [["event.observation", null], ["event.observation.2", -1.5], ["evolution.observation.v1-to-v2", null]] as const) {
    const obs = store.decode(bytes(name)) as Observation;
    assert.equal(obs.reward?.double ?? null, reward, name);
    assert.equal(carriedProblem(obs, vector(name).kafka ? headersOf(name) : {}), null, name);
    const carried = carriedReward(obs);
    if (reward === null) assert.equal(carried, null, name);
    else assert.deepEqual(carried, { trial_id: obs.trial_id, tick: obs.tick - 1n, receiver: "alice", value: reward, confidence: 1, sender: "env", user_data: null });
  }
});
