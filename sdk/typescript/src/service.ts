/**
 * An actor service on kafkajs: consume `events`, decode, answer observations, deliver
 * rewards and messages, commit the safe point, catch up after a crash or rebalance
 * without re-sending what the log holds (docs/protocol.md, "An actor service").
 */
import kafkajs from "kafkajs";
import SnappyCodec from "kafkajs-snappy";
import type { Consumer, Producer, Admin, KafkaMessage, Message as KafkaOut } from "kafkajs";
import { randomUUID } from "node:crypto";
import { encode, type Schema, Store } from "./avro.js";
import { ActorKey, type Headers, TO_ACTORS } from "./trust.js";

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = kafkajs;
// Trialog's records carry their partition explicitly; the default partitioner (murmur2,
// as Kafka's) only places dead letters, so its v2 migration notice does not apply.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = "1";
// Read snappy batches (Go's franz-go writes snappy by default); gzip is built in.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;

export interface ActorSpec { name: string; actor_class: string; implementation: string; config: string; client: boolean }
export interface ActorClassSpec { name: string; observation_schema: string; action_schema: string; default_action: { string: string } | null }
export interface TrialStarted { trial_id: string; spec: string; environment: string; seed: bigint; actors: ActorSpec[]; actor_classes: ActorClassSpec[]; response_timeout_ms: bigint; [field: string]: unknown }
/** `reward`: the environment's reward for `actor` at `tick` - 1 carried here rather than in a record
 * of its own (schema v2; null when none, absent from v1 records): see carriedReward. */
export interface Observation { trial_id: string; tick: bigint; actor: string; payload: Buffer; terminated: boolean; truncated: boolean; final: boolean; reward?: { double: number } | null }
export interface Reward { trial_id: string; tick: bigint; receiver: string; value: number; confidence: number; sender: string; user_data: { string: string } | null }
export interface Message { trial_id: string; tick: bigint; sender: string; receivers: string[]; message_id: string; payload: string }
export interface TrialEnded { trial_id: string; tick: bigint; reason: string; details: string }

/** An observation decoded with the actor class's schema (records as objects, longs as BigInt, unions as {branch: value}). */
export interface ObservationEvent { tick: bigint; value: any; terminated: boolean; truncated: boolean }

/**
 * Plays one actor in one trial. `decide` answers each non-final observation once, in
 * tick order, and MUST be deterministic given the seed and the observations so far:
 * a service taking over after a crash replays them.
 */
export interface Agent {
  decide(obs: ObservationEvent): unknown;
  onReward?(reward: Reward): void;
  onMessage?(message: Message): void;
  onEnd?(end: TrialEnded): void;
}

export type AgentFactory = (actor: Actor) => Agent;

/** What an agent knows of its trial, and how it writes rewards and messages. */
export class Actor {
  tick = -1n;
  private sent = 0;
  constructor(readonly trial: TrialStarted, readonly spec: ActorSpec, private svc: ActorService, readonly partition: number) {}

  /** A reward for `tick` (≤ the current tick; earlier is retroactive) to a name, "*" or "class.*"
   * ("*" and "class.*" leave this actor out). Throws, and writes nothing, for a reward that could
   * not count: out of bounds (rewardBoundsProblem) or naming this actor. */
  reward(receiver: string, tick: bigint, value: number, confidence = 1): void {
    const problem = rewardBoundsProblem(value, confidence) ?? (receiver === this.spec.name ? "nobody rewards itself" : null);
    if (problem !== null) throw new Error(`${this.spec.name} cannot send this reward: ${problem}`);
    const r: Reward = { trial_id: this.trial.trial_id, tick, receiver, value, confidence, sender: this.spec.name, user_data: null };
    this.svc.emit(this.partition, "reward", "trialog.Reward", tick, this.spec.name, receiver, "", r);
  }

  /** A JSON message to names, "*", "class.*" or "env". */
  message(receivers: string[], payload: unknown): void {
    this.sent += 1;
    this.send(receivers, payload, `${this.spec.name}-${this.tick}-${this.sent}`, this.tick);
  }

  send(receivers: string[], payload: unknown, id: string, tick: bigint): void {
    const m: Message = { trial_id: this.trial.trial_id, tick, sender: this.spec.name, receivers, message_id: id, payload: JSON.stringify(payload, bigintsAsNumbers) };
    this.svc.emit(this.partition, "message", "trialog.Message", tick, this.spec.name, receivers.join(","), id, m);
  }

  newTick(tick: bigint): void {
    this.tick = tick;
    this.sent = 0;
  }
}

const bigintsAsNumbers = (_: string, v: unknown) => (typeof v === "bigint" ? Number(v) : v);

export interface Config {
  brokers: string[];
  topicPrefix?: string; // default "trialog."
  implementation: string; // the spec's implementation; the group is <prefix>actors.<implementation>
  store: Store; // Store.loadDir of Trialog's schemas/
  key: ActorKey; // loadActorKey; a seat's key (parseJoinToken)
  seat?: Seat; // set: play one client seat of one trial instead of an implementation
  newAgent: AgentFactory;
  log?: (line: string) => void;
}

interface Played { actor: Actor; observation: Schema; action: Schema; agent: Agent; lastTick: bigint; rewards: unknown[][]; messages: unknown[][]; seen: Set<string> }
interface Trial { started: TrialStarted; partition: number; startOffset: bigint; actors: Map<string, Played> }
interface Part { end: bigint; position: bigint; live: boolean; pending: Map<string, KafkaOut & { topic: string }> }

export const PROBE = "trialog.probe";

/** One client actor of one trial (docs/protocol.md, "Client actors (seats)"). */
export interface Seat { trial: string; actor: string; holder: string }

export const matches = (receiver: string, actor: string, actorClass: string) => receiver === actor || receiver === "*" || receiver === `${actorClass}.*`;
/** As matches, but nothing reaches its own sender: "*" and "class.*" leave it out (docs/protocol.md, "What counts"). */
export const reaches = (receiver: string, sender: string, actor: string, actorClass: string) => sender !== actor && matches(receiver, actor, actorClass);

/** The bounds of a reward that counts: |value| ≤ MAX_REWARD_VALUE, 0 ≤ confidence ≤ MAX_CONFIDENCE, both finite. */
export const MAX_REWARD_VALUE = 1e12;
export const MAX_CONFIDENCE = 1e6;
/** Why a reward's value and confidence cannot count (null: they can); false for NaN and the infinities too. */
export function rewardBoundsProblem(value: number, confidence: number): string | null {
  if (!(value >= -MAX_REWARD_VALUE && value <= MAX_REWARD_VALUE)) return `reward value ${value} is not a finite number between -1e+12 and 1e+12`;
  if (!(confidence >= 0 && confidence <= MAX_CONFIDENCE)) return `reward confidence ${confidence} is not a finite number between 0 and 1e+06`;
  return null;
}

/** The header that is "1" on an observation carrying a reward (Observation.reward) and absent from every other record. */
export const HEADER_REWARD = "reward";

/**
 * The reward an observation carries (null: none): the same event as a reward record from "env" to
 * its actor for the tick before, confidence 1, no user data, logged just before the observation —
 * so the service delivers it as that record, before the observation. An environment writes a
 * reward this way to save every reader a record a step.
 */
export function carriedReward(obs: Observation): Reward | null {
  if (obs.reward == null) return null;
  return { trial_id: obs.trial_id, tick: obs.tick - 1n, receiver: obs.actor, value: obs.reward.double, confidence: 1, sender: "env", user_data: null };
}

/**
 * Why an observation record cannot be read for the reward it carries or claims to (null: it can).
 * A carried reward is not at tick 0 (nothing happened before it) and counts as a reward's value
 * does (rewardBoundsProblem), else the body does not decode; and the record's reward header is "1"
 * if and only if the body carries one. Every reader refuses such a record alike, so none counts a
 * reward another dead-letters (docs/protocol.md, "A reward an observation carries").
 */
export function carriedProblem(obs: Observation, headers: Headers): string | null {
  const said = headers[HEADER_REWARD]?.toString();
  const carries = obs.reward != null;
  if (carries && obs.tick < 1n) return "does not decode: an observation of tick 0 carries no reward (nothing happened before it)";
  const bounds = carries ? rewardBoundsProblem(obs.reward!.double, 1) : null;
  if (bounds !== null) return `does not decode: the reward it carries cannot count: ${bounds}`;
  if (!carries && said !== undefined) return `headers do not match the body: reward header ${JSON.stringify(said)} but the body carries none`;
  if (carries && said === undefined) return "headers do not match the body: no reward header but the body carries a reward";
  if (carries && said !== "1") return `headers do not match the body: reward header ${JSON.stringify(said)} but the body carries a reward`;
  return null;
}

export class ActorService {
  private events: string;
  private trials = new Map<string, Trial>();
  private parts = new Map<number, Part>();
  private out: (KafkaOut & { topic: string })[] = [];
  private ready: Promise<void> = Promise.resolve();
  private lastCommit = Date.now();
  private consumer: Consumer;
  private producer: Producer;
  private admin: Admin;
  private log: (line: string) => void;

  constructor(private cfg: Config) {
    const prefix = cfg.topicPrefix ?? "trialog.";
    this.events = `${prefix}events`;
    this.log = cfg.log ?? ((line) => console.error(line));
    const kafka = new Kafka({ clientId: `trialog-actors-${cfg.implementation}`, brokers: cfg.brokers, logLevel: logLevel.WARN });
    this.consumer = kafka.consumer({
      // A seat reads alone from the start of the log and commits nothing: a group of its own.
      groupId: cfg.seat ? `${prefix}seat.${cfg.seat.trial}.${cfg.seat.actor}.${randomUUID()}` : `${prefix}actors.${cfg.implementation}`,
      sessionTimeout: 10_000, // a dead instance's trials move on within seconds
      heartbeatInterval: 1_000,
      rebalanceTimeout: 10_000,
      maxWaitTimeInMs: 500,
    });
    this.producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    this.admin = kafka.admin();
  }

  async run(signal: AbortSignal): Promise<void> {
    await Promise.all([this.consumer.connect(), this.producer.connect(), this.admin.connect()]);
    this.consumer.on(this.consumer.events.GROUP_JOIN, (e) => {
      // kafkajs resumes every assigned partition from its committed offset (the safe
      // point) after a join: rebuild from there, catching up to the current end.
      const assigned = (e.payload.memberAssignment[this.events] ?? []) as number[];
      this.trials.clear();
      this.parts.clear();
      this.ready = this.admin.fetchTopicOffsets(this.events).then((offsets) => {
        for (const p of assigned) {
          const end = BigInt(offsets.find((o) => o.partition === p)?.offset ?? "0");
          this.parts.set(p, { end, position: 0n, live: false, pending: new Map() });
          this.log(`trialog: partition ${p} assigned; catching up to offset ${end}`);
        }
      });
    });
    await this.consumer.subscribe({ topics: [this.events], fromBeginning: true }); // a new group reads the whole log
    await this.consumer.run({
      autoCommit: false, // we commit the safe point, not what was read
      eachBatch: async ({ batch }) => {
        await this.ready;
        for (const m of batch.messages) this.process(batch.partition, m);
        await this.flush();
        if (Date.now() - this.lastCommit > 1000) await this.commit();
      },
    });
    const seat = this.cfg.seat;
    this.log(seat ? `trialog: joining trial ${seat.trial} as ${seat.actor} (holder ${seat.holder})` : `trialog: serving actors.${this.cfg.implementation} on ${this.events}`);
    const crashed = new Promise<unknown>((resolve) => this.consumer.on(this.consumer.events.CRASH, (e) => !e.payload.restart && resolve(e.payload.error)));
    const stopped = new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    const error = await Promise.race([crashed, stopped]);
    if (error === undefined) await this.commit().catch((err) => this.log(`trialog: last commit skipped: ${err}`));
    await Promise.all([this.consumer.disconnect(), this.producer.disconnect(), this.admin.disconnect()]);
    if (error !== undefined) throw error; // the consumer stopped for good: the process exits, another instance takes over
  }

  // --- safe points -----------------------------------------------------------------------------
  private async commit(): Promise<void> {
    this.lastCommit = Date.now();
    if (this.cfg.seat) return; // a seat rebuilds from the start of the log
    if (this.out.length > 0) return; // outputs not yet acknowledged: committing could lose them in a crash
    const offsets = [];
    for (const [p, part] of this.parts) {
      if (!part.live) continue;
      let safe = part.position;
      for (const t of this.trials.values()) if (t.partition === p && t.startOffset < safe) safe = t.startOffset;
      offsets.push({ topic: this.events, partition: p, offset: safe.toString() });
    }
    if (offsets.length > 0) await this.consumer.commitOffsets(offsets);
  }

  // --- records ---------------------------------------------------------------------------------
  private process(partition: number, m: KafkaMessage): void {
    const part = this.parts.get(partition);
    if (!part) return;
    const headers: Headers = {};
    for (const [k, v] of Object.entries(m.headers ?? {})) if (v !== undefined) headers[k] = Buffer.isBuffer(v) ? v : Buffer.from(String(v));
    const key = m.key ?? Buffer.alloc(0);
    const trialId = key.toString();
    if (!part.live && part.pending.size > 0) part.pending.delete(identity(trialId, headers)); // the log holds it: never send it again
    try {
      this.handle(partition, BigInt(m.offset), key, headers, m.value ?? Buffer.alloc(0), trialId, m);
    } catch (err) {
      this.log(`trialog: record at ${partition}/${m.offset} not handled: ${err}`);
    }
    part.position = BigInt(m.offset) + 1n;
    if (!part.live && part.position >= part.end) this.goLive(partition, part);
  }

  private goLive(p: number, part: Part): void {
    part.live = true;
    if (part.pending.size > 0) this.log(`trialog: partition ${p} caught up; sending ${part.pending.size} events the previous owner did not`);
    this.out.push(...part.pending.values());
    part.pending.clear();
  }

  private handle(partition: number, offset: bigint, key: Buffer, headers: Headers, value: Buffer, trialId: string, m: KafkaMessage): void {
    const kind = headers.kind?.toString() ?? "";
    if (TO_ACTORS.has(kind) && kind !== "observation" && this.cfg.key.check(key, headers, value) !== "") return; // not for us from the core
    const store = this.cfg.store;
    if (this.cfg.seat && trialId !== this.cfg.seat.trial) return;
    if (kind === "trial.pending" && this.cfg.seat) return this.join(partition, store.decode(value) as TrialStarted);
    if (kind === "trial.started") {
      if (this.trials.has(trialId)) return;
      const started = store.decode(value) as TrialStarted;
      if (started.trial_id === trialId) this.start(partition, offset, started);
      return;
    }
    const t = this.trials.get(trialId);
    if (!t) return;
    if (kind === "observation") {
      if (!t.actors.has(headers.receiver?.toString() ?? "")) return; // another implementation's actor
      const refused = this.cfg.key.check(key, headers, value);
      if (refused) return this.deadLetter(partition, offset, m, `observation: ${refused}`);
      let obs: Observation;
      try {
        obs = store.decode(value) as Observation;
        if (obs.trial_id !== trialId || !t.actors.has(obs.actor) || headers.tick?.toString() !== String(obs.tick)) throw new Error("value and headers disagree");
      } catch (err) {
        return this.deadLetter(partition, offset, m, `observation record does not decode as trialog.Observation of this trial: ${err}`);
      }
      const problem = carriedProblem(obs, headers); // the record is refused whole: its reward with it
      if (problem !== null) return this.deadLetter(partition, offset, m, `observation of ${obs.actor} at tick ${obs.tick}: ${problem}`);
      const carried = carriedReward(obs);
      if (carried) this.reward(t, carried); // first: the record it stands for would have come just before the observation
      return this.observe(partition, offset, m, t.actors.get(obs.actor)!, obs);
    }
    if (kind === "reward") {
      const r = store.decode(value) as Reward;
      if (r.trial_id === trialId) this.reward(t, r);
    } else if (kind === "message") {
      const msg = store.decode(value) as Message;
      if (msg.trial_id !== trialId) return;
      for (const a of sorted(t.actors)) {
        const addressed = msg.receivers.some((r) => matches(r, a.actor.spec.name, a.actor.spec.actor_class));
        if (addressed && msg.sender !== a.actor.spec.name && once(a, `m\0${msg.sender}\0${msg.message_id}`)) this.deliver(a, msg);
      }
    } else if (kind === "trial.ended") {
      const end = store.decode(value) as TrialEnded;
      if (end.trial_id !== trialId) return;
      for (const a of sorted(t.actors)) a.agent.onEnd?.(end);
      this.trials.delete(trialId);
    }
  }

  /** A reward — a record's, or the one an observation carries, alike — to each actor played here
   * that it reaches, once (a repeat of the same tick and sender changes nothing). */
  private reward(t: Trial, r: Reward): void {
    if (rewardBoundsProblem(r.value, r.confidence) !== null || r.receiver === r.sender) return; // dead-lettered by the orchestrator: counts for nothing
    for (const a of sorted(t.actors)) {
      if (reaches(r.receiver, r.sender, a.actor.spec.name, a.actor.spec.actor_class) && once(a, `r\0${r.tick}\0${r.sender}`)) {
        a.rewards.push([r.tick, r.sender, r.value]);
        a.agent.onReward?.(r);
      }
    }
  }

  private start(partition: number, offset: bigint, started: TrialStarted): void {
    const classes = new Map(started.actor_classes.map((c) => [c.name, { observation: this.cfg.store.register(c.observation_schema), action: this.cfg.store.register(c.action_schema) }]));
    const t: Trial = { started, partition, startOffset: offset, actors: new Map() };
    for (const spec of started.actors) {
      if (!this.plays(spec)) continue;
      const actor = new Actor(started, spec, this, partition);
      try {
        const agent = this.cfg.newAgent(actor);
        const c = classes.get(spec.actor_class)!;
        t.actors.set(spec.name, { actor, agent, observation: c.observation, action: c.action, lastTick: -1n, rewards: [], messages: [], seen: new Set() });
      } catch (err) {
        this.log(`trialog: trial ${started.trial_id}: actor ${spec.name} did not start: ${err}`);
      }
    }
    if (t.actors.size > 0) this.trials.set(started.trial_id, t);
  }

  /** Does this service play an actor of a trial? */
  private plays(spec: ActorSpec): boolean {
    return this.cfg.seat ? spec.client && spec.name === this.cfg.seat.actor : spec.implementation === this.cfg.implementation && !spec.client;
  }

  /** Answer the seat's trial.pending with actor.joined (a repeat is crossed off during catch-up). */
  private join(partition: number, pending: TrialStarted): void {
    const spec = pending.actors.find((a) => this.plays(a));
    if (!spec) return this.log(`trialog: trial ${pending.trial_id} has no client actor ${this.cfg.seat!.actor}`);
    const joined = { trial_id: pending.trial_id, actor: spec.name, implementation: spec.implementation };
    this.emit(partition, "actor.joined", "trialog.ActorJoined", -1n, spec.name, "", "", joined);
  }

  private observe(partition: number, offset: bigint, m: KafkaMessage, a: Played, obs: Observation): void {
    if (obs.tick <= a.lastTick) return; // a repeat (or an old tick): each observation is answered once
    let value;
    try {
      value = this.cfg.store.decode(obs.payload, a.observation);
    } catch (err) {
      return this.deadLetter(partition, offset, m, `observation of ${obs.actor} at tick ${obs.tick} does not match its class's schema: ${err}`);
    }
    a.lastTick = obs.tick;
    a.actor.newTick(obs.tick);
    if (obs.final) return; // the actor's part is over: no action
    try {
      const action = a.agent.decide({ tick: obs.tick, value, terminated: obs.terminated, truncated: obs.truncated });
      const payload = encode(a.action, action);
      this.emit(partition, "action", "trialog.Action", obs.tick, obs.actor, "", "", { trial_id: obs.trial_id, tick: obs.tick, actor: obs.actor, payload });
    } catch (err) {
      // the agent's bug: no action; the environment's timeout policy takes over
      this.log(`trialog: trial ${obs.trial_id}: actor ${obs.actor} produced no valid action at tick ${obs.tick}: ${err}`);
    }
  }

  private deliver(a: Played, msg: Message): void {
    let payload: any;
    try {
      payload = JSON.parse(msg.payload);
    } catch {
      payload = undefined;
    }
    const probe = payload?.[PROBE];
    if (typeof probe === "string") {
      const ack = { [`${PROBE}.ack`]: probe, rewards: a.rewards, messages: a.messages };
      a.actor.send([msg.sender], ack, `probe-${probe}`, msg.tick);
      return;
    }
    a.messages.push([msg.tick, msg.sender, msg.message_id]);
    a.agent.onMessage?.(msg);
  }

  // --- writing -------------------------------------------------------------------------------------
  /** Encode, tag and send an event after this batch — or, while its partition catches up, set it aside. */
  emit(partition: number, kind: string, schema: string, tick: bigint, sender: string, receiver: string, id: string, value: object): void {
    const encoded = encode(this.cfg.store.byFullName(schema)!, value);
    const key = Buffer.from((value as { trial_id: string }).trial_id);
    const headers: Headers = { kind: Buffer.from(kind), tick: Buffer.from(String(tick)), sender: Buffer.from(sender), receiver: Buffer.from(receiver), schema: Buffer.from(schema) };
    if (id) headers.id = Buffer.from(id);
    if (this.cfg.seat) headers.holder = Buffer.from(this.cfg.seat.holder); // every record of a seat names its holder, under the tag
    const [tagName, tag] = this.cfg.key.tag(key, headers, encoded);
    headers[tagName] = tag;
    const record = { topic: this.events, partition, key, value: encoded, headers };
    const part = this.parts.get(partition);
    if (part && !part.live) {
      const ident = identity(key.toString(), headers);
      if (!part.pending.has(ident)) part.pending.set(ident, record);
      return;
    }
    this.out.push(record);
  }

  private deadLetter(partition: number, offset: bigint, m: KafkaMessage, reason: string): void {
    if (this.cfg.seat) return this.log(`trialog: skipped: ${reason}`); // a seat's observations are the orchestrator's to judge
    if (!this.parts.get(partition)?.live) return; // reported when it was first read
    const headers: Record<string, Buffer> = {};
    for (const [k, v] of Object.entries(m.headers ?? {})) if (v !== undefined) headers[k] = Buffer.isBuffer(v) ? v : Buffer.from(String(v));
    const letter = {
      topic: this.events, partition, offset, key: m.key ? { bytes: m.key } : null, value: m.value ? { bytes: m.value } : null,
      headers, reason, service: `actors.${this.cfg.implementation}`, timestamp_ms: BigInt(m.timestamp),
    };
    this.log(`trialog: dead letter: ${reason}`);
    const prefix = this.events.slice(0, -"events".length);
    this.out.push({ topic: `${prefix}dead-letters`, key: m.key ?? null, value: encode(this.cfg.store.byFullName("trialog.DeadLetter")!, letter), headers: { kind: Buffer.from("dead-letter"), schema: Buffer.from("trialog.DeadLetter") } });
  }

  private async flush(): Promise<void> {
    if (this.out.length === 0) return;
    const out = this.out;
    const byTopic = new Map<string, KafkaOut[]>();
    for (const { topic, ...message } of out) byTopic.set(topic, [...(byTopic.get(topic) ?? []), message]);
    try {
      // gzip: the codec kafkajs carries without a plugin (snappy, lz4, zstd need one).
      await this.producer.sendBatch({ topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })), compression: CompressionTypes.GZIP, acks: -1 });
    } catch (err) {
      this.log(`trialog: produce failed (the next owner redoes the work): ${err}`);
    }
    this.out = [];
  }
}

/** An event's identity from its headers: (trial, kind, tick, sender, receiver, id). */
function identity(trialId: string, h: Headers): string {
  return [trialId, h.kind, h.tick, h.sender, h.receiver, h.id].map((x) => (x === undefined ? "" : x.toString())).join("\0");
}

function once(a: Played, key: string): boolean {
  if (a.seen.has(key)) return false;
  a.seen.add(key);
  return true;
}

function sorted(actors: Map<string, Played>): Played[] {
  return [...actors.keys()].sort().map((n) => actors.get(n)!);
}
