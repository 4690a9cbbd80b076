#!/usr/bin/env node
/**
 * Serves actor implementations of a Trialog spec from TypeScript:
 *
 *   trialog-actors --schemas schemas --serve ts=rps-counter --serve ts_cook=overcooked-cook
 *   TRIALOG_JOIN_TOKEN=tl1.… trialog-actors --schemas schemas --seat rps-counter
 *
 * Each --serve IMPL=AGENT plays the spec's (external) implementation IMPL with an example
 * agent, as the consumer group <prefix>actors.IMPL. Connection: --brokers or
 * TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX; key: --keyring,
 * TRIALOG_KEY_ACTORS_<IMPL>, or the development keyring for a local broker.
 */
import { parseArgs } from "node:util";
import { Store } from "../avro.js";
import { AGENTS } from "../examples.js";
import { ActorService } from "../service.js";
import { loadActorKey, parseJoinToken } from "../trust.js";

const { values } = parseArgs({
  options: {
    brokers: { type: "string", default: process.env.TRIALOG_BOOTSTRAP_SERVERS ?? "127.0.0.1:9092" },
    "topic-prefix": { type: "string", default: process.env.TRIALOG_TOPIC_PREFIX ?? "trialog." },
    schemas: { type: "string", default: "schemas" },
    keyring: { type: "string", default: process.env.TRIALOG_KEYRING ?? "" },
    serve: { type: "string", multiple: true, default: [] },
    seat: { type: "string", default: "" },
    holder: { type: "string", default: process.env.TRIALOG_HOLDER ?? `ts-${process.pid}` },
  },
});

const agents = Object.keys(AGENTS).sort().join(", ");
if (values.serve.length === 0 && !values.seat) {
  console.error(`trialog-actors: nothing to serve: pass --serve IMPL=AGENT or --seat AGENT (agents: ${agents})`);
  process.exit(2);
}
const brokers = values.brokers.split(",");
const store = Store.loadDir(values.schemas);
const stop = new AbortController();
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => stop.abort());

if (values.seat) {
  if (!AGENTS[values.seat]) {
    console.error(`trialog-actors: --seat ${values.seat}: AGENT is one of ${agents}`);
    process.exit(2);
  }
  // The seat of the join token in TRIALOG_JOIN_TOKEN; the same holder resumes it after a restart.
  const { seat, key } = parseJoinToken(process.env.TRIALOG_JOIN_TOKEN ?? "", values.holder);
  values.serve = [];
  await new ActorService({ brokers, topicPrefix: values["topic-prefix"], implementation: "", seat, store, key, newAgent: AGENTS[values.seat] }).run(stop.signal);
}
const services = values.serve.map((s) => {
  const [impl, agent] = s.split("=");
  if (!impl || !AGENTS[agent]) {
    console.error(`trialog-actors: --serve ${s}: want IMPL=AGENT with AGENT one of ${agents}`);
    process.exit(2);
  }
  const key = loadActorKey(impl, values.keyring, brokers);
  return new ActorService({ brokers, topicPrefix: values["topic-prefix"], implementation: impl, store, key, newAgent: AGENTS[agent] });
});
await Promise.all(services.map((s) => s.run(stop.signal)));
