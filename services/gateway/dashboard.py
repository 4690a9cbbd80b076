"""The live dashboard's data: trials, ticks/s, returns per pairing, dead letters — all read
from the log, like everything the gateway shows.

* trials: the ``trials`` index the feed keeps (:mod:`trialog.services.gateway.feed`);
* ticks/s: counted from the observations on the feed's shared tail of ``events``
  (authenticated records only), sampled every second;
* returns: the analytics jobs' compacted topics (``analytics.trials``,
  ``analytics.returns-by-pairing``, ``analytics.environments``; docs/analytics.md),
  followed from their start — they appear once ``trialog serve analytics`` runs;
* dead letters: the ``dead-letters`` topic, followed from its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable

import orjson

from trialog.bus.base import Bus, Record
from trialog.datalog.deadletters import letter_json
from trialog.errors import TopicMissingError
from trialog.protocol.events import HEADER_KIND, HEADER_TICK, DeadLetter, Observation, TrialEnded, TrialRecord
from trialog.protocol.topics import DEAD_LETTERS
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

RESULTS = ("trials", "returns-by-pairing", "environments")
POINTS_PER_PAIRING = 300  # the newest trial returns per pairing sent to the page
RATE_WINDOW_S = 5.0


class Dashboard:
    """Started with the gateway (``async with``); :meth:`snapshot` is what ``/api/dashboard`` answers."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.results: dict[str, dict[str, dict]] = {job: {} for job in RESULTS}
        self.letters: deque[dict] = deque(maxlen=20)
        self.letter_counts: Counter[str] = Counter()
        self._last_tick: dict[str, int] = {}
        self._ticks = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=int(RATE_WINDOW_S) + 2)
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> Dashboard:
        follow = [(f"analytics.{job}", self._result(job)) for job in RESULTS] + [(DEAD_LETTERS, self._letter)]
        self._tasks = [asyncio.create_task(self._follow(role, apply)) for role, apply in follow]
        self._tasks.append(asyncio.create_task(self._sample()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- inputs -----------------------------------------------------------------------------------
    def on_record(self, record: Record) -> None:
        """Every record of the feed's tail: a trial's first observation of a tick is a tick."""
        kind = record.header(HEADER_KIND)
        if kind == Observation.KIND:
            try:
                tick = int(record.header(HEADER_TICK) or 0)
            except ValueError:
                return
            if tick > self._last_tick.get(record.trial_id, 0) and self.bus.refusal(record) is None:
                self._last_tick[record.trial_id] = tick
                self._ticks += 1
        elif kind == TrialEnded.KIND:
            self._last_tick.pop(record.trial_id, None)

    def _result(self, job: str) -> Callable[[Record], None]:
        def apply(record: Record) -> None:
            if not record.value:
                self.results[job].pop(record.trial_id, None)
                return
            with contextlib.suppress(orjson.JSONDecodeError):
                self.results[job][record.trial_id] = orjson.loads(record.value)

        return apply

    def _letter(self, record: Record) -> None:
        try:
            letter = letter_json(DeadLetter(**self.bus.store.decode(record.value, DeadLetter.SCHEMA)), record.offset)
        except Exception:
            letter = {
                "service": "?",
                "kind": "",
                "trial_id": record.trial_id,
                "reason": "not a dead letter",
                "category": "not a dead letter",
            }
        self.letters.append(
            {k: letter.get(k) for k in ("time", "service", "kind", "trial_id", "reason", "explanation")}
        )
        self.letter_counts[letter["category"]] += 1

    async def _follow(self, role: str, apply: Callable[[Record], None]) -> None:
        """Read a topic from its start and keep following it; wait for it if it does not exist yet."""
        while True:
            consumer = self.bus.consumer([role])  # a few records a trial: each fetched as it comes (Bus.consumer)
            try:
                await consumer.start()
            except TopicMissingError:
                await asyncio.sleep(3)  # e.g. the analytics jobs have not run yet
                continue
            try:
                while True:
                    for record in await consumer.poll(timeout_ms=1000):
                        apply(record)
            finally:
                await consumer.stop()

    async def _sample(self) -> None:
        while True:
            self._samples.append((time.monotonic(), self._ticks))
            await asyncio.sleep(1.0)

    # --- output -------------------------------------------------------------------------------------
    def ticks_per_s(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._samples[0], (time.monotonic(), self._ticks)
        return (n1 - n0) / max(t1 - t0, 1e-6)

    def snapshot(self, index: dict[str, TrialRecord]) -> dict:
        statuses = Counter(r.status for r in index.values())
        recent = sorted(index.values(), key=lambda r: -r.updated_ms)[:12]
        returns: dict[str, list] = {}
        for result in sorted(self.results["trials"].values(), key=lambda r: (r["ended_ms"], r["trial_id"])):
            returns.setdefault(result["pairing"], []).append([result["ended_ms"], result["total"], result["returns"]])
        return {
            "trials": {
                "running": statuses["running"],
                "pending": statuses["pending"],
                "ended": statuses["ended"],
                "rejected": statuses["rejected"],
                "recent": [
                    {
                        "trial": r.trial_id,
                        "spec": r.spec,
                        "status": r.status,
                        "ticks": r.ticks,
                        "reason": r.reason,
                        "pairing": " + ".join(r.implementations.values()),
                    }
                    for r in recent
                ],
            },
            "ticks_per_s": round(self.ticks_per_s(), 1),
            "analytics": bool(self.results["returns-by-pairing"]),
            "pairings": sorted(self.results["returns-by-pairing"].values(), key=lambda p: p["key"]),
            "returns": {pairing: points[-POINTS_PER_PAIRING:] for pairing, points in returns.items()},
            "environments": sorted(self.results["environments"].values(), key=lambda e: e["key"]),
            "dead_letters": {
                "total": sum(self.letter_counts.values()),
                "by_reason": dict(self.letter_counts.most_common(8)),
                "recent": list(self.letters)[::-1],
            },
        }
