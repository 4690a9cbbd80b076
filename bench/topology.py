"""The tick's shape in raw aiokafka: what reading every record costs, before any of Trialog's own work.

The throughput floor (:func:`bench.floor.produce_consume`) produces each record once and
consumes it once. A Trialog tick is more than that by design: every service reads every
record of ``events`` (I-3), and a tick crosses two hops (I-6) — the environment writes the
observations of tick t+1 only once it has read the actions of tick t. This runs the
**same records** of a Trialog run in that shape with raw aiokafka clients, each role a
process of its own as the services are deployed:

- ``environment``: writes each trial's records other than observations and actions at the
  start, then each trial's observations of tick 0, and those of tick t+1 once it has read
  every action of tick t;
- ``actors``: answers each observation with the logged action of its actor and tick;
- ``orchestrator``: reads every record, with the batched fetch settings of Trialog's
  orchestrator.

Each role reads every record, as Trialog's services do; none checks, decodes or keeps
anything beyond a count; records read in one poll are answered in one go and their
acknowledgements are not awaited before the next poll. The run ends when the environment
has read the last action and the orchestrator the last record. Unlike Trialog's service loop,
the roles fetch back what they wrote even when they read little: not a strict floor for one
trial's tick (docs/performance.md).

With ``--lean`` the environment and the actors write as Trialog's loop does when it can: fetches
held while their records are on their way, then the consumer moved past them if they are the
next in the log (:func:`_send_skipping`). That is the floor of a tick for Trialog's own work:
the design's shape, with nothing fetched back that need not be.

    python -m bench.topology ROLE --bootstrap-servers H:P --topic T --records FILE [--lean]

is one role (the benchmark starts them); :func:`tick_shape` runs all three.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench import floor
from trialog.bus import kafka_consumer
from trialog.bus.base import Record
from trialog.bus.kafka_consumer import BATCH_MIN_BYTES, BATCH_WAIT_MS
from trialog.protocol.events import HEADER_KIND, HEADER_RECEIVER, HEADER_SENDER, HEADER_TICK, Action, Observation
from trialog.runtime.process import run_async
from trialog.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("orchestrator", "actors", "environment")
READY, DONE = "ready", "done "  # the roles' lines to the benchmark on stdout
TIMEOUT_S = 600  # a role not ready or not done by then has failed (a lost record would leave it waiting)


def _plain(records: list[Record]) -> list[tuple]:
    """(key, value, headers, kind, tick, sender, receiver) of each record: what the roles need."""
    out = []
    for r in records:
        tick = r.header(HEADER_TICK)
        out.append(
            (r.key, r.value, list(r.headers), r.header(HEADER_KIND), int(tick) if tick else None,
             r.header(HEADER_SENDER), r.header(HEADER_RECEIVER))
        )  # fmt: skip
    return out


async def tick_shape(
    settings: Settings, name: str, records: list[Record], partitions: int, lean: bool = False
) -> tuple[float, float]:
    """Seconds for the three roles to carry these records in the tick's shape (module doc), and the
    median time (ms) between a trial's observations of tick t and of tick t+1, as the environment
    wrote them: the tick latency, when the records are one trial's."""
    topic = settings.topic(name)
    await floor.create_topic(settings, topic, partitions)
    with tempfile.NamedTemporaryFile(suffix=".pickle") as file:
        file.write(pickle.dumps(_plain(records)))
        file.flush()

        def start(role: str) -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, "-m", "bench.topology", role, "--bootstrap-servers", settings.bootstrap_servers,
                 "--topic", topic, "--records", file.name, "--partitions", str(partitions),
                 *(["--lean"] if lean else [])],
                cwd=ROOT, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip

        procs = {}
        try:
            loop = asyncio.get_running_loop()
            for role in ("orchestrator", "actors"):  # reading from the end before the environment writes
                procs[role] = start(role)
                line = await asyncio.wait_for(loop.run_in_executor(None, procs[role].stdout.readline), TIMEOUT_S)
                if line.strip() != READY:
                    raise RuntimeError(f"the raw {role} did not start: {line!r}")
            procs["environment"] = start("environment")
            ends = {}
            for role in ("environment", "orchestrator"):
                line = await asyncio.wait_for(loop.run_in_executor(None, procs[role].stdout.readline), TIMEOUT_S)
                if not line.startswith(DONE):
                    raise RuntimeError(f"the raw {role} did not finish: {line!r}")
                ends[role] = [float(x) for x in line[len(DONE) :].split()]
            began = ends["environment"][0]  # its first write
            return max(ends["environment"][1], ends["orchestrator"][0]) - began, ends["environment"][2]
        finally:
            for p in procs.values():
                p.kill()
                p.wait()


def _consumer(settings: Settings, batched: bool) -> AIOKafkaConsumer:
    if not batched:
        return floor.consumer(settings)
    return AIOKafkaConsumer(
        **settings.kafka_client_options(),
        enable_auto_commit=False,
        fetch_max_wait_ms=BATCH_WAIT_MS,
        fetch_min_bytes=BATCH_MIN_BYTES,
    )


async def _role(
    role: str, settings: Settings, topic: str, records: list[tuple], partitions: int, lean: bool = False
) -> None:
    consumer = _consumer(settings, batched=role == "orchestrator")
    producer = floor.producer(settings)
    await consumer.start()
    await producer.start()
    await floor._at_end(consumer, topic, partitions)  # noqa: SLF001
    pending = []  # acknowledgements, awaited at the end

    async def send(items) -> None:
        if lean and items:
            await _send_skipping(consumer, producer, topic, items)
            return
        for key, value, headers, *_ in items:
            pending.append(await producer.send(topic, value, key=key, headers=headers))

    try:
        if role == "orchestrator":
            print(READY, flush=True)
            seen = 0
            while seen < len(records):
                seen += sum(len(m) for m in (await consumer.getmany(timeout_ms=200)).values())
            print(f"{DONE}{time.time()}", flush=True)
        elif role == "actors":
            answers = _answers(records)
            print(READY, flush=True)
            left = len(answers)
            while left:
                out = [
                    answer
                    for messages in (await consumer.getmany(timeout_ms=200)).values()
                    for m in messages
                    if (answer := _answer(answers, m)) is not None
                ]
                left -= len(out)
                await send(out)
        else:
            await _environment(consumer, send, records, time.time)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
        await consumer.stop()


async def _send_skipping(consumer: AIOKafkaConsumer, producer, topic: str, items) -> None:
    """Write ``items`` without fetching them back, as Trialog's service loop does when it can
    (``ServiceLoop._read_own``): fetches held while they are on their way, then the consumer moved
    past them if they are the next records of their partition (the same hold and release as
    Trialog's Kafka consumer). Not while a fetch is on its way (its answer brings them back anyway)."""
    held = kafka_consumer.hold(consumer)
    futures = [await producer.send(topic, value, key=key, headers=headers) for key, value, headers, *_ in items]
    written = await asyncio.gather(*futures)
    if not held:
        return
    by_partition: dict[int, list[int]] = defaultdict(list)
    for meta in written:
        by_partition[meta.partition].append(meta.offset)
    for partition, offsets in by_partition.items():
        tp = TopicPartition(topic, partition)
        first, last = min(offsets), max(offsets)
        if (
            not kafka_consumer.fetching(consumer)
            and last - first + 1 == len(offsets)
            and await consumer.position(tp) == first
        ):
            consumer.seek(tp, last + 1)
    kafka_consumer.release(consumer)


def _answers(records: list[tuple]) -> dict[tuple, tuple]:
    """(trial, actor, tick) → that actor's logged action of that tick."""
    return {(r[0], r[5], r[4]): r for r in records if r[3] == Action.KIND}


def _answer(answers: dict[tuple, tuple], message) -> tuple | None:
    """The action answering this record, if it is an observation: headers only, as Trialog's
    actor service looks at a record before decoding it."""
    h = dict(message.headers)
    if h.get(HEADER_KIND) != Observation.KIND.encode():
        return None
    return answers.get((message.key, h[HEADER_RECEIVER].decode(), int(h[HEADER_TICK])))


async def _environment(consumer: AIOKafkaConsumer, send, records: list[tuple], clock) -> None:
    observations: dict[tuple, list[tuple]] = defaultdict(list)  # (trial, tick) → its observations
    actions_due: dict[tuple, int] = defaultdict(int)  # (trial, tick) → actions of that tick
    others = []
    for r in records:
        if r[3] == Observation.KIND:
            observations[(r[0], r[4])].append(r)
        elif r[3] == Action.KIND:
            actions_due[(r[0], r[4])] += 1
        else:
            others.append(r)
    started = clock()
    await send(others)
    await send([r for (trial, tick), obs in observations.items() if tick == 0 for r in obs])
    written = dict.fromkeys({trial for trial, _ in observations}, started)  # trial → its last tick's write
    ticks_ms = []
    left = sum(actions_due.values())
    while left:
        out = []
        for messages in (await consumer.getmany(timeout_ms=200)).values():
            for m in messages:
                h = dict(m.headers)
                if h.get(HEADER_KIND) != Action.KIND.encode():
                    continue
                left -= 1
                at = (m.key, int(h[HEADER_TICK]))
                actions_due[at] -= 1
                if actions_due[at] == 0:
                    out.extend(observations.get((m.key, at[1] + 1), ()))
                    now = clock()
                    ticks_ms.append((now - written[m.key]) * 1000)
                    written[m.key] = now
        await send(out)
    print(f"{DONE}{started} {clock()} {statistics.median(ticks_ms)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=ROLES)
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--records", required=True, type=Path)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--lean", action="store_true", help="write without fetching back, as Trialog's loop does")
    args = p.parse_args(argv)
    records = pickle.loads(args.records.read_bytes())
    settings = Settings(bootstrap_servers=args.bootstrap_servers)
    run_async(_role(args.role, settings, args.topic, records, args.partitions, args.lean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
