"""Fuzz: malformed records of every kind fired at live services beside honest trials.

Starts the orchestrator, environment and actor services of ``tools/fuzz.yaml`` as
processes on a real broker (its own topic prefix), runs honest trials undisturbed to
get their trajectories, then runs the same trials (same seeds) again while firing
records made from real ones: garbage and truncated bodies, forged or missing tags,
missing, unknown and non-UTF-8 kinds, headers that disagree with the body, actions
for impossible ticks or from strangers, NaN and negative confidences, observations carrying
a reward that cannot count or whose ``reward`` header says otherwise than their body, invalid JSON,
unknown trials, records on the wrong topic, near-limit sizes, byte-identical
duplicates — each batch uncompressed or compressed with gzip, snappy, lz4 or zstd.

Every malformed record must be dead-lettered exactly once (whoever owns its kind),
every duplicate must change nothing, no service may stop, and the honest trials
must replay exactly as undisturbed. It prints, per category and in total: tried,
dead-lettered once, lettered more than once, silently dropped (no letter), and the
verdicts; the exit code is 0 only if every target is met.

    python tools/fuzz.py                                              # the long run: 2000 records, 6 honest trials
    python tools/fuzz.py --records 120 --honest 2 --seed 12 --json fuzz.json   # what CI runs

The broker comes from ``TRIALOG_BOOTSTRAP_SERVERS`` (or ``--bootstrap-servers``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaProducer  # noqa: E402

from trialog.bus.base import Record  # noqa: E402
from trialog.bus.kafka import KafkaBus  # noqa: E402
from trialog.controller import Controller  # noqa: E402
from trialog.datalog.replay import partition_records, read_trial  # noqa: E402
from trialog.protocol.events import Action, DeadLetter, Message, Observation, ParametersChanged, Reward, TrialStarted
from trialog.protocol.topics import CONTROL, DEAD_LETTERS, EVENTS  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.tools.campaign import local_services  # noqa: E402

SPEC = ROOT / "tools" / "fuzz.yaml"
CODECS = (None, None, "gzip", "snappy", "lz4", "zstd")  # None twice: half the batches plain
NEAR_LIMIT = 900_000  # bytes: under the topics' 1 MB limit, over what any honest record weighs

LETTER = "dead-lettered once"
NO_OP = "changes nothing"


@dataclass
class Case:
    """One record fired, and the outcome it must have."""

    category: str
    role: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    expect: str = LETTER
    codec: str | None = None
    where: tuple[str, int, int] | None = None  # (topic, partition, offset) once written


@dataclass
class Report:
    tried: int = 0
    letters: Counter = field(default_factory=Counter)  # category -> records lettered once
    repeated: Counter = field(default_factory=Counter)  # category -> records lettered 2+ times
    dropped: Counter = field(default_factory=Counter)  # category -> records with no letter
    noop_ok: Counter = field(default_factory=Counter)
    by_category: Counter = field(default_factory=Counter)
    crashed: list[str] = field(default_factory=list)
    honest: int = 0
    identical: int = 0
    differences: list[str] = field(default_factory=list)
    reran_ended: list[str] = field(default_factory=list)
    examples: dict[str, str] = field(default_factory=dict)  # category -> a letter's reason or what went missing

    @property
    def ok(self) -> bool:
        return not (
            self.crashed
            or sum(self.repeated.values())
            or sum(self.dropped.values())
            or self.differences
            or self.reran_ended
        ) and (self.identical == self.honest)

    def table(self) -> str:
        width = max([len("category"), *map(len, self.by_category)])
        lines = [f"{'category':{width}} {'tried':>6} {'lettered':>8} {'twice+':>6} {'dropped':>7} {'no-op':>6}"]
        for cat in sorted(self.by_category):
            lines.append(
                f"{cat:{width}} {self.by_category[cat]:>6} {self.letters[cat]:>8} "
                f"{self.repeated[cat]:>6} {self.dropped[cat]:>7} {self.noop_ok[cat]:>6}"
            )
        lines.append("")
        lines.append(
            f"tried {self.tried}, dead-lettered {sum(self.letters.values())}, "
            f"lettered more than once {sum(self.repeated.values())}, "
            f"silently dropped {sum(self.dropped.values())}, crashed {len(self.crashed)}, "
            f"honest trials identical {self.identical}/{self.honest}"
        )
        for problem in (*self.crashed, *self.differences, *self.reran_ended):
            lines.append(f"  {problem}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "tried": self.tried,
            "dead_lettered": sum(self.letters.values()),
            "lettered_more_than_once": sum(self.repeated.values()),
            "silently_dropped": sum(self.dropped.values()),
            "crashed": len(self.crashed),
            "honest_trials": self.honest,
            "honest_identical": self.identical,
            "by_category": {
                c: {
                    "tried": self.by_category[c],
                    "lettered": self.letters[c],
                    "twice": self.repeated[c],
                    "dropped": self.dropped[c],
                    "noop": self.noop_ok[c],
                }
                for c in sorted(self.by_category)
            },
            "examples": self.examples,
            "problems": {
                "crashed": self.crashed,
                "honest_differences": self.differences,
                "ended_trials_changed": self.reran_ended,
            },
            "ok": self.ok,
        }


# --- honest trials ----------------------------------------------------------------------------


def signature(fold) -> list[tuple]:
    """What must not change: every (tick, actor) as logged, payload bytes included."""
    return [
        (
            s.tick,
            s.actor,
            s.observation_avro,
            s.action_avro,
            s.reward,
            tuple((r.sender, r.value, r.confidence) for r in s.reward_sources),
            s.final,
            s.timed_out,
        )
        for s in fold.samples()
    ]


def first_difference(before: list[tuple], after: list[tuple]) -> str:
    names = ("tick", "actor", "observation", "action", "reward", "reward sources", "final", "timed out")
    for a, b in zip(before, after):
        if a != b:
            what = [n for n, x, y in zip(names, a, b) if x != y]
            return f"tick {a[0]} {a[1]}: {', '.join(what)} ({dict(zip(what, (b[names.index(w)] for w in what)))})"[:300]
    return f"{len(before)} samples undisturbed, {len(after)} now"


async def run_honest(ctl: Controller, seeds: list[int]) -> dict[int, str]:
    ids = {seed: await ctl.start_trial("fuzz", seed=seed) for seed in seeds}
    return ids


# --- the generator ----------------------------------------------------------------------------


class Generator:
    """Malformed records made from real ones (templates read from the log)."""

    def __init__(
        self,
        rng: random.Random,
        bus: KafkaBus,
        templates: dict[str, list[Record]],
        live: list[str],
        ended: list[str],
        starts: dict[str, TrialStarted],
    ):
        self.rng = rng
        self.bus = bus
        self.templates = templates
        self.live = live
        self.ended = ended
        self.starts = starts
        self.unknown = 0

    def target(self) -> str:
        if self.rng.random() < 0.7 and self.live:
            return self.rng.choice(self.live)
        self.unknown += 1
        return f"fuzz-unknown-{self.unknown}"

    def template(self, kind: str | None = None) -> Record:
        kinds = [k for k in self.templates if kind is None or k == kind]
        return self.rng.choice(self.templates[self.rng.choice(kinds)])

    def tagged(self, trial: str, headers: list[tuple[str, bytes]], value: bytes | None) -> list[tuple[str, bytes]]:
        """Headers with valid tags (the fuzzer holds the whole keyring): such a record passes
        authentication and is refused, if at all, for what it says."""
        plain = [(k, v) for k, v in headers if not k.startswith("mac.")]
        try:
            return plain + self.bus.trust.tag(trial, plain, value or b"")
        except Exception:  # no key can tag it (e.g. a stranger sender): leave it untagged
            return plain

    def garbage(self, n: int | None = None) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, 200) if n is None else n)

    def event(self, role: str, event, category: str, expect: str = LETTER) -> Case:
        value = self.bus.codec.encode(event)
        return Case(
            category, role, event.trial_id.encode(), value, self.tagged(event.trial_id, event.headers(), value), expect
        )

    def cases(self, count: int) -> list[Case]:
        makers = [getattr(self, name) for name in dir(self) if name.startswith("make_")]
        return [self.rng.choice(makers)() for _ in range(count)]

    # Each make_* returns one case. Kinds come from real records of the honest trials.
    def make_garbage_body_tagged(self) -> Case:
        t = self.template()
        trial, value = self.target(), self.garbage()
        return Case(
            f"garbage body, tagged ({t.header('kind')})",
            EVENTS,
            trial.encode(),
            value,
            self.tagged(trial, list(t.headers), value),
        )

    def make_garbage_body_untagged(self) -> Case:
        t = self.template()
        return Case(
            f"garbage body, no tag ({t.header('kind')})",
            EVENTS,
            self.target().encode(),
            self.garbage(),
            [(k, v) for k, v in t.headers if not k.startswith("mac.")],
        )

    def make_truncated(self) -> Case:
        t = self.template()
        trial = self.target()
        value = (t.value or b"")[: self.rng.randint(0, max(0, len(t.value or b"") - 1))]
        return Case(
            f"truncated body ({t.header('kind')})",
            EVENTS,
            trial.encode(),
            value,
            self.tagged(trial, list(t.headers), value),
        )

    def make_unknown_fingerprint(self) -> Case:
        t = self.template()
        trial = self.target()
        value = b"\xc3\x01" + self.rng.randbytes(8) + (t.value or b"")[10:]
        return Case(
            "unknown schema fingerprint", EVENTS, trial.encode(), value, self.tagged(trial, list(t.headers), value)
        )

    def make_kind_header(self) -> Case:
        t = self.template()
        trial = self.target()
        variant = self.rng.choice(["missing", "unknown", "non-utf8", "empty"])
        headers = [(k, v) for k, v in t.headers if k != "kind" and not k.startswith("mac.")]
        if variant != "missing":
            headers.append(("kind", {"unknown": b"bogus.kind", "non-utf8": b"\xff\xfe\x00", "empty": b""}[variant]))
        return Case(f"kind header {variant}", EVENTS, trial.encode(), t.value, self.tagged(trial, headers, t.value))

    def make_headers_disagree(self) -> Case:
        t = self.template()
        trial = t.trial_id
        headers = [
            (k, (str(int(v or b"0") + self.rng.choice([1, 7, 1000])).encode() if k == "tick" else v))
            for k, v in t.headers
        ]
        return Case("headers disagree with the body", EVENTS, t.key, t.value, self.tagged(trial, headers, t.value))

    def _action(self, trial: str, **changes) -> Action:
        t = self.template("action")
        action = self.bus.codec.decode(t.value, "action")
        return dataclasses.replace(action, trial_id=trial, **changes)

    def make_action_impossible_tick(self) -> Case:
        trial = self.rng.choice(self.live) if self.live else self.target()
        tick = self.rng.choice([10**9, -5, -1, 2**62])
        return self.event(EVENTS, self._action(trial, tick=tick), "action for an impossible tick")

    def make_action_from_stranger(self) -> Case:
        trial = self.rng.choice(self.live) if self.live else self.target()
        case = self.event(EVENTS, self._action(trial, actor="mallory"), "action from a stranger")
        case.headers = [(k, v) for k, v in case.headers if not k.startswith("mac.")]
        return case

    def _observation(self, trial: str, **changes) -> Observation:
        t = self.template("observation")
        observation = self.bus.codec.decode(t.value, "observation")
        return dataclasses.replace(observation, trial_id=trial, **changes)

    def make_observation_bad_carried_reward(self) -> Case:
        """An observation carrying a reward that cannot count (not finite within bounds, or at tick
        0): no reader decodes it, nor counts the reward; its owner letters it."""
        trial = self.rng.choice(self.live) if self.live else self.target()
        tick, value = self.rng.choice([(1, math.nan), (2, math.inf), (1, -math.inf), (3, 2e12), (0, 1.0)])
        observation = self._observation(trial, tick=tick, reward=value)
        return self.event(EVENTS, observation, "observation carrying a reward that cannot count")

    def make_observation_reward_header_lies(self) -> Case:
        """A tagged observation whose ``reward`` header says otherwise than its body (believed, it
        would count a reward or lose one): the body decides, and its owner letters the record."""
        trial = self.rng.choice(self.live) if self.live else self.target()
        variant = self.rng.choice(["set, none carried", "left off", "not 1"])
        reward = None if variant == "set, none carried" else self.rng.choice([0.5, -1.0, 0.0])
        observation = self._observation(trial, tick=self.rng.randint(1, 3), reward=reward)
        value = self.bus.codec.encode(observation)
        headers = [(k, v) for k, v in observation.headers() if k != "reward"]
        if variant != "left off":
            headers.append(("reward", b"1" if reward is None else self.rng.choice([b"0", b"true", b""])))
        category = f"observation whose reward header lies ({variant})"
        return Case(category, EVENTS, trial.encode(), value, self.tagged(trial, headers, value))

    def make_reward_bad_number(self) -> Case:
        trial = self.rng.choice(self.live) if self.live else self.target()
        value, confidence = self.rng.choice(
            [(math.nan, 1.0), (math.inf, 1.0), (1.0, math.nan), (1.0, -1.0), (1.0, math.inf), (-math.inf, 0.5)]
        )
        reward = Reward(trial, tick=1, receiver="alice", value=value, confidence=confidence, sender="fuzz-judge")
        return self.event(EVENTS, reward, "reward with NaN/inf/negative numbers")

    def make_message_bad_json(self) -> Case:
        trial = self.rng.choice(self.live) if self.live else self.target()
        message = Message(
            trial,
            tick=1,
            sender="fuzz-judge",
            receivers=("alice",),
            message_id=uuid.uuid4().hex,
            payload=self.rng.choice(["{not json", "\x00", "[1,"]),
        )
        return self.event(EVENTS, message, "message with invalid JSON")

    def make_parameters_bad_json(self) -> Case:
        trial = self.rng.choice(self.live) if self.live else self.target()
        change = ParametersChanged(
            trial, tick=1, sender="fuzz-operator", parameters=self.rng.choice(["{oops", "", "\x00", "[1,", "[]", "42"])
        )
        return self.event(EVENTS, change, "parameters.changed with invalid or non-object JSON")

    def make_reward_unknown_trial(self) -> Case:
        self.unknown += 1
        reward = Reward(
            f"fuzz-unknown-{self.unknown}", tick=0, receiver="alice", value=1.0, confidence=1.0, sender="fuzz-judge"
        )
        return self.event(EVENTS, reward, "reward for an unknown trial")

    def make_wrong_topic(self) -> Case:
        t = self.template()
        return Case(f"{t.header('kind')} on the control topic", CONTROL, t.key, t.value, list(t.headers))

    def make_control_garbage(self) -> Case:
        trial = self.target()
        headers = [
            ("kind", b"trial.start"),
            ("tick", b"-1"),
            ("sender", b"fuzz"),
            ("receiver", b""),
            ("schema", b"trialog.StartRequest"),
        ]
        value = self.garbage()
        return Case("garbage start request", CONTROL, trial.encode(), value, self.tagged(trial, headers, value))

    def make_forged_start_bad_schema(self) -> Case:
        self.unknown += 1
        started = next(iter(self.starts.values()))
        bad = dataclasses.replace(started.actor_classes[0], observation_schema='{"type": "record", "name": "broken"')
        event = dataclasses.replace(started, trial_id=f"fuzz-unknown-{self.unknown}", actor_classes=(bad,))
        return self.event(EVENTS, event, "trial.started with an invalid schema")

    def make_near_limit(self) -> Case:
        trial = self.target()
        t = self.template("reward") if "reward" in self.templates else self.template()
        value = self.garbage(NEAR_LIMIT)
        return Case(
            "near-limit garbage (900 KB)", EVENTS, trial.encode(), value, self.tagged(trial, list(t.headers), value)
        )

    def make_inflated(self) -> Case:
        """5 MB of zeros: zstd makes the batch a few KB, so the broker takes it (its limit
        counts compressed bytes), and every reader gets a value five times the limit."""
        trial = self.target()
        t = self.template("reward") if "reward" in self.templates else self.template()
        value = bytes(5 * 1024 * 1024)
        case = Case(
            "5 MB value in a small zstd batch",
            EVENTS,
            trial.encode(),
            value,
            self.tagged(trial, list(t.headers), value),
        )
        case.codec = "zstd"
        return case

    def make_duplicate(self) -> Case:
        t = self.rng.choice([r for r in (r for rs in self.templates.values() for r in rs) if r.trial_id in self.ended])
        return Case(
            f"byte-identical duplicate ({t.header('kind')})", t.role, t.key, t.value, list(t.headers), expect=NO_OP
        )


# --- firing and judging -----------------------------------------------------------------------


async def fire(settings: Settings, cases: list[Case], rng: random.Random) -> None:
    """Write the cases in batches per compression codec (another client's producer)."""
    for case in cases:
        case.codec = case.codec or rng.choice(CODECS)
    by_codec: dict[str | None, list[Case]] = defaultdict(list)
    for case in cases:
        by_codec[case.codec].append(case)
    for codec, group in by_codec.items():
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            compression_type=codec,
            linger_ms=5,
            max_request_size=8 * 1024 * 1024,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(settings.topic(c.role), key=c.key, value=c.value, headers=c.headers) for c in group
            ]
            for case, meta in zip(group, await asyncio.gather(*futures)):
                case.where = (meta.topic, meta.partition, meta.offset)
        finally:
            await producer.stop()


async def letters(bus: KafkaBus, settle_s: float, max_wait_s: float) -> list[DeadLetter]:
    """Every dead letter, once no new one has come for ``settle_s`` seconds."""
    consumer = bus.consumer([DEAD_LETTERS])
    await consumer.start()
    out: list[DeadLetter] = []
    try:
        deadline = time.monotonic() + max_wait_s
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle_s and time.monotonic() < deadline:
            records = await consumer.poll(timeout_ms=500)
            if records:
                quiet_since = time.monotonic()
            out.extend(DeadLetter(**bus.store.decode(r.value, DeadLetter.SCHEMA)) for r in records)
        return out
    finally:
        await consumer.stop()


async def templates_of(bus: KafkaBus, trial_ids: list[str]) -> dict[str, list[Record]]:
    """Real records of the honest trials, by kind: what the generator mutates."""
    out: dict[str, list[Record]] = defaultdict(list)
    wanted = set(trial_ids)
    for partition in sorted({bus.partition_of(t) for t in trial_ids}):
        async for record in partition_records(bus, partition, 0):
            if record.trial_id in wanted and record.header("kind"):
                out[record.header("kind")].append(record)
    return dict(out)


async def run(settings: Settings, *, records: int, honest: int, seed: int, log_dir: str | None = None) -> Report:
    rng = random.Random(seed)
    bus = KafkaBus(settings)
    await bus.create_topics()
    report = Report(honest=honest)
    seeds = [seed * 1000 + i for i in range(honest)]
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    with local_services(settings, str(SPEC), log_dir=log_dir) as procs:
        async with bus, Controller(bus, name="fuzz") as ctl:
            # 1. undisturbed
            baseline_ids = await run_honest(ctl, seeds)
            for tid in baseline_ids.values():
                await ctl.wait_ended(tid, timeout=120)
            baseline = {s: signature(await read_trial(bus, tid)) for s, tid in baseline_ids.items()}
            templates = await templates_of(bus, list(baseline_ids.values()))
            ended_counts = {tid: len(signature(await read_trial(bus, tid))) for tid in baseline_ids.values()}
            # 2. the same trials again, with the fuzz fired while they run
            live_ids = await run_honest(ctl, seeds)
            starts = {tid: await ctl.wait_started(tid, timeout=60) for tid in live_ids.values()}
            for started in starts.values():
                bus.trust.learn(started)
            gen = Generator(rng, bus, templates, list(live_ids.values()), list(baseline_ids.values()), starts)
            cases = gen.cases(records)
            await fire(settings, cases, rng)
            for tid in live_ids.values():
                await ctl.wait_ended(tid, timeout=180)
        # 3. judge
        all_letters = await letters(bus, settle_s=6.0, max_wait_s=120.0)
        report.crashed = [
            f"service {name} exited with code {p.returncode}" for name, p in procs.items() if p.poll() is not None
        ]
    async with bus:
        for s, tid in live_ids.items():
            now = signature(await read_trial(bus, tid))
            if now == baseline[s]:
                report.identical += 1
            else:
                report.differences.append(
                    f"honest trial {tid} (seed {s}) differs from its undisturbed run: "
                    f"{first_difference(baseline[s], now)}"
                )
        for tid, count in ended_counts.items():
            after = len(signature(await read_trial(bus, tid)))
            if after != count:
                report.reran_ended.append(f"ended trial {tid} changed after duplicates: {count} samples, now {after}")
    judge(report, cases, all_letters)
    return report


def judge(report: Report, cases: list[Case], all_letters: list[DeadLetter]) -> None:
    per_record: dict[tuple[str, int, int], list[DeadLetter]] = defaultdict(list)
    for letter in all_letters:
        per_record[(letter.topic, letter.partition, letter.offset)].append(letter)
    report.tried = len(cases)
    for case in cases:
        report.by_category[case.category] += 1
        found = per_record.get(case.where, [])
        if case.expect == NO_OP:
            report.noop_ok[case.category] += 1  # judged by the honest and ended trials staying as they were
            if found:
                report.letters[case.category] += 1  # a letter for a duplicate: a defined outcome too
            continue
        if len(found) == 1:
            report.letters[case.category] += 1
            report.examples.setdefault(case.category, found[0].reason[:200])
        elif len(found) > 1:
            report.repeated[case.category] += 1
            report.examples[case.category] = "lettered by " + ", ".join(sorted(x.service for x in found))
        else:
            report.dropped[case.category] += 1
            report.examples[case.category] = "no letter"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=2000, help="malformed records to fire (default 2000)")
    p.add_argument("--honest", type=int, default=6, help="honest trials beside them (default 6)")
    p.add_argument("--seed", type=int, default=1, help="the generator's seed: the same seed fires the same records")
    p.add_argument("--bootstrap-servers", default=os.environ.get("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument(
        "--topic-prefix",
        default=f"fuzz-{uuid.uuid4().hex[:8]}.",
        help="its own topics (deleted at the end); default a fresh one",
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--log-dir", help="where the services' logs go (default: a temporary folder)")
    args = p.parse_args(argv)
    settings = Settings.load(
        {"bootstrap_servers": args.bootstrap_servers, "topic_prefix": args.topic_prefix, "partitions": 4}
    )
    print(
        f"fuzzing {args.records} records beside {args.honest} honest trials "
        f"(seed {args.seed}, topics {settings.topic_prefix}*)",
        file=sys.stderr,
    )
    try:
        report = asyncio.run(
            run(settings, records=args.records, honest=args.honest, seed=args.seed, log_dir=args.log_dir)
        )
    finally:
        asyncio.run(KafkaBus(settings).delete_topics())
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
