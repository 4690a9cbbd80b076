"""The benchmark's measurements of Trialog itself, on any bus (Kafka, or in memory for the smoke test).

Each function runs real trials through a controller (or reads them back) and
checks that the run was complete — every trial ended at its max_ticks, every
observation and action is in the log — before returning a figure: a fast run
that lost ticks is not a result.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Iterable
from dataclasses import dataclass, field

from trialog.bus.base import Bus, Record
from trialog.controller import Controller
from trialog.datalog.replay import read_trials
from trialog.protocol.events import HEADER_KIND, Action, Observation, StartRequest, TrialEnded, TrialStarted
from trialog.protocol.topics import CONTROL, EVENTS
from trialog.runtime.log_watch import LogWatch


class IncompleteRun(AssertionError):
    """A measured run did not complete correctly: its figure is not printed."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


@dataclass
class TrialsRun:
    trial_ids: list[str]
    ticks: int  # per trial
    seconds: float
    events: int = 0  # records on `events` for these trials
    event_bytes: int = 0
    records: list[Record] = field(default_factory=list)


async def run_trials(
    ctl: Controller, spec: str, count: int, ticks: int, *, timeout: float = 600, implementations=None
) -> TrialsRun:
    """Start ``count`` trials of ``ticks`` ticks at once and wait for all of them to end."""
    t0 = time.perf_counter()
    ids = await asyncio.gather(
        *(ctl.start_trial(spec, max_ticks=ticks, implementations=implementations) for _ in range(count))
    )
    ended = await asyncio.gather(*(ctl.wait_result(t, timeout=timeout) for t in ids))
    seconds = time.perf_counter() - t0
    bad = [(t, e.reason, e.tick) for t, e in zip(ids, ended) if e.reason != "max_ticks" or e.tick != ticks]
    if bad:
        raise IncompleteRun(f"{len(bad)} of {count} trials did not run {ticks} ticks: {bad[:3]}")
    return TrialsRun(list(ids), ticks, seconds)


async def read_records(bus: Bus, trial_ids: Iterable[str]) -> list[Record]:
    """Every record of these trials on ``events``, in log order per partition."""
    wanted = {t.encode() for t in trial_ids}
    consumer = bus.consumer([EVENTS])
    await consumer.start()
    try:
        ends = await consumer.end_offsets(consumer.assignment())
        done = {rp for rp, end in ends.items() if end == 0}
        out = []
        while len(done) < len(ends):
            for record in await consumer.poll(timeout_ms=500):
                if record.key in wanted:
                    out.append(record)
                if record.offset + 1 >= ends[(record.role, record.partition)]:
                    done.add((record.role, record.partition))
        return out
    finally:
        await consumer.stop()


def check_complete(run: TrialsRun, records: list[Record], actors: int = 2) -> None:
    """Every observation (ticks 0..T) and action (ticks 0..T-1) of every actor is logged."""
    per_trial: dict[bytes, list[int]] = {t.encode(): [0, 0] for t in run.trial_ids}
    for r in records:
        kind = r.header(HEADER_KIND)
        if kind == Observation.KIND:
            per_trial[r.key][0] += 1
        elif kind == Action.KIND:
            per_trial[r.key][1] += 1
    want = [actors * (run.ticks + 1), actors * run.ticks]
    bad = {k.decode(): v for k, v in per_trial.items() if v != want}
    if bad:
        raise IncompleteRun(
            f"{len(bad)} trials miss events (want {want} observations/actions): {dict(list(bad.items())[:3])}"
        )
    run.records = records
    run.events = len(records)
    run.event_bytes = sum(len(r.value or b"") for r in records)


def peak_live(records: list[Record]) -> int:
    """The most of these records' trials live at one time: started (``trial.started``)
    and not yet ended (``trial.ended``), by the records' log timestamps (ms; an end and
    a start in the same millisecond count the end first)."""
    steps = []
    for r in records:
        kind = r.header(HEADER_KIND)
        if kind == TrialStarted.KIND:
            steps.append((r.timestamp_ms, 1))
        elif kind == TrialEnded.KIND:
            steps.append((r.timestamp_ms, -1))
    live = peak = 0
    for _ms, step in sorted(steps):
        live += step
        peak = max(peak, live)
    return peak


def tick_latencies_ms(bus: Bus, records: list[Record], actor: str = "a") -> list[float]:
    """Per tick, the time between the environment's observations of t and t+1 (its own clock)."""
    stamps: dict[tuple[bytes, int], int] = {}
    for r in records:
        if r.header(HEADER_KIND) != Observation.KIND:
            continue
        obs = bus.codec.decode(r.value, Observation.KIND)
        if obs.actor == actor:
            stamps[(r.key, obs.tick)] = bus.store.decode(obs.payload)["t_ns"]
    return [(stamps[(k, t + 1)] - ns) / 1e6 for (k, t), ns in stamps.items() if (k, t + 1) in stamps]


async def timed_replay(bus: Bus, trial_ids: list[str] | None = None) -> tuple[float, int, int]:
    """Replay finished trials (default: every indexed trial) with the datalog's API (one
    read per partition, every event decoded into samples): (seconds, events, samples)."""
    wanted = None if trial_ids is None else set(trial_ids)
    events = samples = 0
    t0 = time.perf_counter()
    async for fold in read_trials(bus, lambda record: wanted is None or record.trial_id in wanted):
        events += fold.events
        samples += len(fold.samples())
    return time.perf_counter() - t0, events, samples


# --- orchestrator memory ------------------------------------------------------------------------


class _DiscardingLoop:
    """Stands in for the ServiceLoop: keeps what the handler emits only until it is fed back."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.emitted: list = []

    def emit(self, event, role=EVENTS) -> None:
        self.emitted.append((role, event))

    def is_live(self, role, partition) -> bool:
        return True

    log = LogWatch("orchestrator")  # never watched: the log never away here

    def dead_letter(self, record, reason) -> None:
        raise AssertionError(f"orchestrator dead-lettered a benchmark record: {reason}")


def _record(bus: Bus, role: str, event, offset: int) -> Record:
    key = event.trial_id.encode()
    return Record(
        role,
        bus.partition_of(event.trial_id),
        offset,
        key,
        bus.codec.encode(event),
        tuple(event.headers()),
        int(time.time() * 1000),
    )


def orchestrator_bytes_per_trial(bus: Bus, spec, trials: int) -> tuple[float, int]:
    """Bytes the orchestrator handler keeps per live trial: a tracemalloc diff around
    ``trials`` trials driven through start request → trial.started (records and
    emitted events are dropped before the second snapshot, so only the handler's
    own state is counted). Returns (bytes per trial, live trials)."""
    from trialog.services.orchestrator.handler import OrchestratorHandler

    handler = OrchestratorHandler({spec.name: spec})
    handler.loop = loop = _DiscardingLoop(bus)

    def start(i: int) -> None:
        tid = f"mem-{i:08d}"
        request = StartRequest(tid, spec=spec.name, requested_by="bench", parameters="{}")
        handler.handle(_record(bus, CONTROL, request, i), request)
        for role, event in loop.emitted:
            if role == EVENTS:
                handler.handle(_record(bus, EVENTS, event, i), event)
        loop.emitted.clear()

    start(-1)  # warm caches (schemas, layouts) outside the measurement
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(trials):
            start(i)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    live = sum(1 for t in handler.live_trials.values() if t.status == "running")
    if live != trials + 1:
        raise IncompleteRun(f"orchestrator holds {live} running trials, expected {trials + 1}")
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return grown / trials, live


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "n": len(values),
    }
