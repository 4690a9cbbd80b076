"""The analytics benchmark: the shipped stream jobs' events/s beside a raw consume of the
same topic, measured in the same run on the same broker.

    python bench/analytics.py [--short] [--bootstrap-servers H:P] [--json PATH]

It writes a datalog of finished rock-paper-scissors-like trials to a fresh topic prefix
(trial.started, then per tick two observations and two actions, each observation carrying
its actor's reward for the tick before as Trialog's environments write it, the final
observations, then trial.ended; tagged like real records), then measures

* **floor**: a raw consume of the whole ``events`` topic with confluent-kafka (the
  client Quix Streams runs on), no decoding — what any job on this broker is bounded by;
* **analytics**: ``trialog serve analytics``'s jobs (``services/analytics/app.py``,
  exactly-once) from their first record until every event they read is processed and
  every trial's result is written — decoding, authenticating, state in RocksDB,
  transactions, the second stage included.

``--short`` writes a tenth of the events (CI runs it). docs/analytics.md has a run's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runnable as `python bench/analytics.py` from anywhere

from trialog.analytics import quix_connection, read_results  # noqa: E402
from trialog.bus.kafka import KafkaBus  # noqa: E402
from trialog.protocol.events import Action, ActorClassSpec, ActorSpec, Observation, TrialEnded, TrialStarted  # noqa: E402
from trialog.protocol.topics import EVENTS  # noqa: E402
from trialog.services.analytics.app import build  # noqa: E402
from trialog.services.analytics.jobs import KINDS  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.telemetry import metrics  # noqa: E402


def trial_events(trial_id: str, ticks: int, seed: int) -> list:
    """A finished two-player trial as its log holds it."""
    actors = (ActorSpec("alice", "player", "random"), ActorSpec("bob", "player", "counter"))
    classes = (ActorClassSpec("player", '{"type": "int"}', '{"type": "int"}'),)
    out = [
        TrialStarted(
            trial_id,
            spec="bench",
            environment="rps",
            environment_entry="bench:rps",
            environment_config="{}",
            actors=actors,
            actor_classes=classes,
            seed=seed,
        )
    ]
    for t in range(ticks + 1):
        if t == 0:
            rewards = [None] * len(actors)  # nothing happened before the first observations
        else:
            winner = (seed + t - 1) % 3  # of tick t - 1: 0 alice, 1 bob, 2 a draw
            rewards = [0.0 if winner == 2 else (1.0 if i == winner else -1.0) for i in range(len(actors))]
        out += [
            Observation(trial_id, tick=t, actor=a.name, payload=b"\x02", final=t == ticks, reward=r)
            for a, r in zip(actors, rewards, strict=True)
        ]
        if t < ticks:
            out += [Action(trial_id, tick=t, actor=a.name, payload=b"\x02") for a in actors]
    out.append(TrialEnded(trial_id, tick=ticks, reason="max_ticks"))
    return out


async def write_datalog(settings: Settings, trials: int, ticks: int) -> tuple[int, int]:
    """(events written, events the jobs read) — the jobs skip actions by their kind header."""
    bus = KafkaBus(settings)
    await bus.create_topics()
    written = wanted = 0
    async with bus:
        for i in range(trials):
            events = trial_events(f"bench-{i:06d}", ticks, seed=i)
            await bus.publish_all(EVENTS, events)
            written += len(events)
            wanted += sum(1 for e in events if e.KIND in KINDS)
    return written, wanted


def raw_consume(settings: Settings, expected: int) -> float:
    """Seconds to consume the whole events topic with confluent-kafka, no decoding."""
    from confluent_kafka import Consumer

    conf = quix_connection(settings).as_librdkafka_dict()  # the jobs' own connection settings
    consumer = Consumer(
        {
            **conf,
            "group.id": f"{settings.topic_prefix}bench-floor-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([settings.topic(EVENTS)])
    seen, start = 0, None
    try:
        while seen < expected:
            batch = consumer.consume(num_messages=1000, timeout=1.0)
            if batch and start is None:
                start = time.perf_counter()
            seen += sum(1 for m in batch if m.error() is None)
        return time.perf_counter() - start
    finally:
        consumer.close()


def run_jobs(settings: Settings, wanted: int, trials: int) -> float:
    """Seconds from the jobs' first record to every wanted event processed and every trial's result written."""
    first: list[float] = []
    counted = metrics.ANALYTICS_RECORDS.labels(settings.topic(EVENTS))
    base = counted._value.get()  # noqa: SLF001 - the counter the jobs increment per record

    with tempfile.TemporaryDirectory(prefix="trialog-bench-analytics-") as state:
        app = build(settings, state_dir=state, window=20)

        def watch() -> None:
            while counted._value.get() == base:  # noqa: SLF001
                time.sleep(0.001)
            first.append(time.perf_counter())
            while counted._value.get() - base < wanted:  # noqa: SLF001
                time.sleep(0.01)
            while len(asyncio.run(_results(settings))) < trials:
                time.sleep(0.2)
            first.append(time.perf_counter())
            app.stop()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        app.run()
        watcher.join()
    return first[1] - first[0]


async def _results(settings: Settings) -> dict:
    async with KafkaBus(settings) as bus:
        return await read_results(bus, "trials")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="a tenth of the events (CI)")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    trials, ticks = (100, 40) if args.short else (1000, 40)
    settings = Settings.load(
        {
            "bootstrap_servers": args.bootstrap_servers,
            "topic_prefix": f"bench-analytics-{uuid.uuid4().hex[:8]}.",
            "partitions": 4,
        }
    )
    print(f"writing {trials} trials of {ticks} ticks to {settings.topic(EVENTS)}…", file=sys.stderr)
    written, wanted = asyncio.run(write_datalog(settings, trials, ticks))
    floor_s = raw_consume(settings, written)
    jobs_s = run_jobs(settings, wanted, trials)
    floor_eps, jobs_eps = written / floor_s, written / jobs_s
    row = {
        "events": written,
        "trials": trials,
        "analytics_events_per_s": round(jobs_eps),
        "raw_consume_events_per_s": round(floor_eps),
        "ratio": round(jobs_eps / floor_eps, 3),
    }
    print(
        "| figure | Trialog | floor (same run) | ratio |\n|---|---|---|---|\n"
        f"| analytics jobs, events/s ({written:,} events, {trials} trials) | {jobs_eps:,.0f} | "
        f"{floor_eps:,.0f} (raw consume, confluent-kafka) | {jobs_eps / floor_eps:.3f}× |"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
