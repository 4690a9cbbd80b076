"""Where a tick's CPU goes: Trialog's own work per record, by service and record kind,
beside what the Kafka client spends to produce or consume the same record.

    python bench/budget.py [--trials N] [--ticks T] [--bootstrap-servers H:P] [--json PATH]

**Trialog alone.** The orchestrator, environment and actor services of
``bench/trivial.yaml`` run in this process on the in-memory bus — no Kafka client, no
broker — N trials at once, T ticks each. Each service loop's handling of a record it reads
(:meth:`ServiceLoop._process`: tag and header checks, decoding, the handler, and for the
actors the decision made for it), and the writing of each record (:meth:`ServiceLoop._send_out`:
encoding, tags) is timed on the process's CPU clock, by service and record kind.

**The Kafka client alone.** The records of those trials (same keys, values, headers) are
produced with the producer settings of :mod:`trialog.bus.kafka` and consumed back with
the consumer settings of :mod:`trialog.bus.kafka_consumer` on the broker, in this process:
aiokafka's CPU time per record to produce one and to consume one, the cost every service
pays per record on top of Trialog's (the broker's own CPU is in neither figure).

The table puts them side by side: per record read or written, Trialog's µs and the Kafka
client's, and per tick the total of each.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextvars
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: `bench` is importable
    sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402
from trialog.bus.base import Record  # noqa: E402
from trialog.bus.memory import MemoryBus  # noqa: E402
from trialog.commands.parts import run_async  # noqa: E402
from trialog.controller import Controller  # noqa: E402
from trialog.protocol.events import HEADER_KIND  # noqa: E402
from trialog.protocol.topics import EVENTS  # noqa: E402
from trialog.runtime.service import ServiceLoop  # noqa: E402
from trialog.services.actors.main import loops_for as actor_loops  # noqa: E402
from trialog.services.environment.main import loops_for as environment_loops  # noqa: E402
from trialog.services.orchestrator.main import loop_for as orchestrator_loop  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.spec import load_spec  # noqa: E402
from trialog.telemetry.logs import configure  # noqa: E402

SPEC = ROOT / "bench" / "trivial.yaml"
TICK_KINDS = ("observation", "action")  # the records of every tick; the others are per trial


class Meter:
    """CPU seconds and counts by (service, kind, what), on the process's clock."""

    def __init__(self, bus: MemoryBus):
        self.seconds: dict[tuple[str, str, str], float] = collections.defaultdict(float)
        self.counts: dict[tuple[str, str, str], int] = collections.defaultdict(int)
        self.service: contextvars.ContextVar[str] = contextvars.ContextVar("service", default="controller")
        to_record = bus.to_record

        def timed_to_record(role, event):  # encoding and tags, in whichever service writes
            t0 = time.process_time()
            try:
                return to_record(role, event)
            finally:
                self.add((self.service.get(), event.KIND, "written"), time.process_time() - t0)

        bus.to_record = timed_to_record

    def watch(self, loop: ServiceLoop, service: str) -> None:
        """Time a loop's handling of each record it reads, and attribute what it writes."""
        process, run = loop._process, loop.run  # noqa: SLF001 - what is measured

        def timed_process(record: Record) -> None:
            t0 = time.process_time()
            process(record)
            self.add((service, record.header(HEADER_KIND) or "?", "read"), time.process_time() - t0)

        async def run_as_service() -> None:
            self.service.set(service)  # the loop's tasks (its flushes) inherit it
            await run()

        loop._process = timed_process  # noqa: SLF001
        loop.run = run_as_service
        handler = loop.handler
        if hasattr(handler, "_decide_pending"):  # the actors decide after a poll, outside _process
            decide = handler._decide_pending  # noqa: SLF001

            def timed_decide(*args, **kwargs):
                t0 = time.process_time()
                try:
                    return decide(*args, **kwargs)
                finally:
                    self.add((service, "observation", "read"), time.process_time() - t0, count=0)

            handler._decide_pending = timed_decide  # noqa: SLF001

    def add(self, key: tuple[str, str, str], seconds: float, count: int = 1) -> None:
        self.seconds[key] += seconds
        self.counts[key] += count


async def trialog_alone(trials: int, ticks: int) -> tuple[Meter, float, int, list[Record]]:
    """The services on the in-memory bus: (meter, process CPU seconds, ticks, the events records)."""
    bus = MemoryBus(Settings.load({"partitions": 1}, environ={}))
    spec = load_spec(SPEC, bus.store)
    meter = Meter(bus)
    await bus.create_topics()
    async with bus:
        loops = {"orchestrator": [orchestrator_loop(bus, [spec])]}
        loops["environment"] = environment_loops(bus, spec)
        loops["actors"] = actor_loops(bus, spec)
        for service, group in loops.items():
            for loop in group:
                meter.watch(loop, service)
        every = [loop for group in loops.values() for loop in group]
        tasks = [asyncio.create_task(loop.run()) for loop in every]
        try:
            await asyncio.wait_for(asyncio.gather(*(loop.ready.wait() for loop in every)), 30)
            async with Controller(bus) as ctl:
                await _run(ctl, spec.name, 2, 10)  # warm-up
                meter.seconds.clear()
                meter.counts.clear()
                t0 = time.process_time()
                await _run(ctl, spec.name, trials, ticks)
                cpu = time.process_time() - t0
        finally:
            for loop in every:
                loop.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
    records = [r for r in bus.logs[EVENTS][0] if r.header(HEADER_KIND) in TICK_KINDS]
    return meter, cpu, trials * ticks, records


async def _run(ctl: Controller, spec: str, trials: int, ticks: int) -> None:
    ids = await asyncio.gather(*(ctl.start_trial(spec, max_ticks=ticks) for _ in range(trials)))
    ended = await asyncio.gather(*(ctl.wait_ended(t, timeout=600) for t in ids))
    wrong = [e for e in ended if e.reason != "max_ticks" or e.tick != ticks]
    if wrong:
        raise SystemExit(f"{len(wrong)} of {trials} trials did not run {ticks} ticks ({wrong[0].reason})")


async def kafka_alone(settings: Settings, records: list[Record]) -> tuple[float, float]:
    """aiokafka's CPU µs per record to produce these records and to consume them back."""
    topic = settings.topic("budget")
    await floor.create_topic(settings, topic, 1)
    producer, consumer = floor.producer(settings), floor.consumer(settings)
    await producer.start()
    await consumer.start()
    try:
        (tp,) = await floor._at_end(consumer, topic, 1)  # noqa: SLF001 - the floor's own set-up
        t0 = time.process_time()
        futures = [
            await producer.send(topic, r.value, key=r.key, headers=list(r.headers), partition=0) for r in records
        ]
        await asyncio.gather(*futures)
        produce = (time.process_time() - t0) / len(records)
        t0 = time.process_time()
        seen = 0
        while seen < len(records):
            # A poll's worth at a time, as a service reads (trialog.runtime.service.RECORDS_PER_FLUSH).
            seen += sum(len(m) for m in (await consumer.getmany(tp, timeout_ms=1000, max_records=32)).values())
        consume = (time.process_time() - t0) / len(records)
    finally:
        await producer.stop()
        await consumer.stop()
    return produce * 1e6, consume * 1e6


def table(meter: Meter, cpu: float, ticks: int, produce_us: float, consume_us: float) -> tuple[str, dict]:
    rows, figures = [], {"rows": [], "ticks": ticks}
    tick_trialog = tick_kafka = 0.0
    for (service, kind, what), seconds in sorted(meter.seconds.items()):
        count = meter.counts[(service, kind, what)]
        if kind not in TICK_KINDS or not count:
            continue
        us = seconds / count * 1e6
        kafka = produce_us if what == "written" else consume_us
        per_tick = count / ticks
        tick_trialog += us * per_tick
        tick_kafka += kafka * per_tick
        rows.append((service, kind, what, f"{per_tick:.1f}", f"{us:.1f}", f"{kafka:.1f}", f"{us / kafka:.1f}×"))
        figures["rows"].append(
            {"service": service, "kind": kind, "what": what, "per_tick": per_tick, "trialog_us": us, "kafka_us": kafka}
        )
    figures.update(
        trialog_us_per_tick=tick_trialog,
        kafka_us_per_tick=tick_kafka,
        process_us_per_tick=cpu / ticks * 1e6,
        produce_us=produce_us,
        consume_us=consume_us,
    )
    head = ("service", "record", "", "per tick", "Trialog µs", "Kafka client µs", "ratio")
    rows.append(("every service", "tick", "", "", f"{tick_trialog:.0f}", f"{tick_kafka:.0f}", ""))
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in [head, *rows]]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines.append(
        f"\nThe whole in-memory deployment (event loop, in-memory bus and controller included): "
        f"{cpu / ticks * 1e6:.0f} µs of CPU per tick."
    )
    return "\n".join(lines), figures


async def main_async(args) -> dict:
    meter, cpu, ticks, records = await trialog_alone(args.trials, args.ticks)
    settings = Settings.load(
        {
            "bootstrap_servers": args.bootstrap_servers,
            "partitions": 1,
            "topic_prefix": f"budget-{uuid.uuid4().hex[:8]}.",
        },
        environ={},
    )
    produce_us, consume_us = await kafka_alone(settings, records)
    text, figures = table(meter, cpu, ticks, produce_us, consume_us)
    print(f"{args.trials} trials x {args.ticks} ticks of {SPEC.name}, {len(records)} tick records\n")
    print(text)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--ticks", type=int, default=100)
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args(argv)
    configure(level="warning")  # the services' per-trial lines would bury the table
    figures = run_async(main_async(args))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
