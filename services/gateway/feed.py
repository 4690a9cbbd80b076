"""The gateway's one window on the log: a tail of ``events`` shared by every socket,
a catch-up read per subscription, and the ``trials`` index kept in memory.

Nothing here is state of its own (I-7): the index is the compacted ``trials``
topic read from its start, and a subscription to a trial replays the trial's
events from its start offset before following the tail. That is why any gateway
instance can serve any seat, and why a reconnect — to this instance or another —
resumes from the log.

Ordering: a subscriber is registered on the tail *before* the partition's end is
measured for it; records below that end come from the catch-up, records at or
above it from the tail. Nothing is seen twice or missed.

Bounds (:class:`~trialog.services.gateway.door.Limits`): catch-up reads run a few at a time
per process, one per partition at a time on a reader kept while they queue, each
within :data:`CATCHUP_WITHIN_S`; a subscriber's queue of live
records is bounded, and a subscriber that falls further behind is dropped
(:class:`~trialog.services.gateway.door.Refused` with the ``SLOW`` close code) rather than
buffered without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from trialog.bus.base import Bus, Consumer, Record
from trialog.errors import TrialError
from trialog.protocol.events import TrialRecord
from trialog.protocol.topics import EVENTS, TRIALS
from trialog.services.gateway.door import LIMITED, SLOW, Limits, Refused
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

CAUGHT_UP = None  # marker a subscription yields once the trial's history has been read
CATCHUP_WITHIN_S = 30.0  # a catch-up read (a trial's history to one page) that takes longer is dropped
CATCHUP_TURN_EVERY = 64  # history records read between two turns the catch-up gives the event loop


def _keep_all(record: Record) -> bool:
    return False  # a subscriber that skips nothing


@dataclass(eq=False)
class _Subscriber:
    trial_id: str
    size: int  # the most live records kept waiting for this subscriber
    queue: asyncio.Queue = field(init=False)
    live_from: int | None = None  # tail records below this offset came through the catch-up
    skip: Callable[[Record], bool] = _keep_all  # true for records it has no use for: never queued
    overflowed: bool = False  # fell further behind than ``size``: dropped at its next read

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(self.size)

    def put(self, record: Record) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            self.overflowed = True
            self.queue = asyncio.Queue(1)  # what was waiting is dropped with the subscriber
            self.queue.put_nowait(None)  # wakes a reader waiting on the queue

    async def get(self) -> Record:
        record = await self.queue.get()
        if self.overflowed:
            raise Refused(f"this page fell more than {self.size} events behind the trial; reload it", SLOW)
        return record


class Feed:
    """Started once per gateway process (``async with Feed(bus)``)."""

    def __init__(self, bus: Bus, limits: Limits | None = None):
        self.bus = bus
        self.limits = limits or Limits()
        self._catchups = asyncio.Semaphore(self.limits.catchups)
        self._readers: dict[int, Consumer] = {}  # partition -> its catch-up reader (one catch-up at a time each)
        self._reader_locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._queued: dict[int, int] = defaultdict(int)  # partition -> catch-ups under way or waiting for its reader
        self.index: dict[str, TrialRecord] = {}
        self._index_changed = asyncio.Condition()
        self._subscribers: dict[str, set[_Subscriber]] = defaultdict(set)
        self._tail: Consumer | None = None
        self._tasks: list[asyncio.Task] = []
        self.index_ready = asyncio.Event()
        self.watchers: list[Callable[[Record], None]] = []  # see every tail record (the dashboard's tick count)

    async def __aenter__(self) -> Feed:
        await self.bus.start()
        self._tail = self.bus.consumer([EVENTS], from_start=False)
        await self._tail.start()
        self._tasks = [asyncio.create_task(self._follow_tail()), asyncio.create_task(self._follow_index())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for partition in list(self._readers):
            await self._drop_reader(partition)
        if self._tail is not None:
            await self._tail.stop()
        await self.bus.stop()

    # --- the trials index --------------------------------------------------------------
    async def _follow_index(self) -> None:
        consumer = self.bus.consumer([TRIALS])  # a few records a trial: each fetched as it comes (Bus.consumer)
        await consumer.start()
        try:
            ends = await consumer.end_offsets(consumer.assignment())
            behind = {rp for rp, end in ends.items() if end > 0}
            if not behind:
                self.index_ready.set()
            while True:
                records = await consumer.poll(timeout_ms=500)
                for record in records:
                    if record.value:
                        try:
                            self.index[record.trial_id] = self.bus.codec.decode(record.value, TrialRecord.KIND)
                        except Exception:  # the orchestrator owns dead letters; a reader skips
                            continue
                    if record.next_offset >= ends.get((record.role, record.partition), 0):
                        behind.discard((record.role, record.partition))
                if not behind:
                    self.index_ready.set()
                if records:
                    async with self._index_changed:
                        self._index_changed.notify_all()
        finally:
            await consumer.stop()

    async def trial(self, trial_id: str, timeout: float) -> TrialRecord:
        """The trial's index record, waiting up to ``timeout`` s for the orchestrator to
        write it (a join link can be opened before the start request is answered)."""

        def found() -> TrialRecord | None:
            record = self.index.get(trial_id)
            return record if record is not None and record.start_offset is not None else None

        async def wait() -> TrialRecord:
            async with self._index_changed:
                await self._index_changed.wait_for(found)
            return found()

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise TrialError(
                f"trial {trial_id} is not known (not started, or rejected) after {timeout:.0f} s", trial_id=trial_id
            ) from None

    # --- trial events -------------------------------------------------------------------
    async def _follow_tail(self) -> None:
        assert self._tail is not None
        while True:
            for record in await self._tail.poll(timeout_ms=1000):
                for watch in self.watchers:
                    watch(record)
                for sub in self._subscribers.get(record.trial_id, ()):
                    if (sub.live_from is None or record.offset >= sub.live_from) and not sub.skip(record):
                        sub.put(record)  # (before the catch-up ends: kept until it decides)

    async def _reader(self, partition: int) -> Consumer:
        """The catch-up reader of one ``events`` partition, kept while catch-ups of that
        partition queue for it: a crowd of sockets to one trial seeks one reader rather than
        paying for a new Kafka consumer (connections, metadata) each; stopped when none
        waits, since an idle consumer goes on fetching."""
        reader = self._readers.get(partition)
        if reader is None:
            reader = self.bus.consumer([EVENTS], partitions=[partition])
            await reader.start()
            self._readers[partition] = reader
        return reader

    async def _drop_reader(self, partition: int) -> None:
        reader = self._readers.pop(partition, None)
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.stop()

    @contextlib.asynccontextmanager
    async def subscribe(
        self, trial_id: str, *, timeout: float = 60, skip: Callable[[Record], bool] = _keep_all
    ) -> AsyncIterator[AsyncIterator[Record | None]]:
        """Every event of ``trial_id`` from its first, then live; :data:`CAUGHT_UP`
        (``None``) is yielded once between history and the live part. Records for which
        ``skip`` is true are left out before they are queued: a seat's page has no use for
        the other actors' observations and actions, most of a live trial's records."""
        indexed = await self.trial(trial_id, timeout)
        sub = _Subscriber(trial_id, self.limits.send_queue, skip=skip)
        self._subscribers[trial_id].add(sub)
        records = self._records(sub, indexed)
        try:
            yield records
        finally:
            # Close the reading now: a page that leaves mid-catch-up releases its reader here,
            # not whenever the abandoned generator is collected.
            with contextlib.suppress(Exception):
                await records.aclose()
            self._subscribers[trial_id].discard(sub)
            if not self._subscribers[trial_id]:
                del self._subscribers[trial_id]

    async def _records(self, sub: _Subscriber, indexed: TrialRecord) -> AsyncIterator[Record | None]:
        partition = indexed.partition
        # The history ends where the partition ends now, the subscriber being on the tail: measured
        # before the catch-up waits for its turn. What comes while it waits reaches the subscriber
        # through the tail; read by the catch-up too, a crowd of pages joining at once read every other
        # trial's ticks over and over (4.4 times the log in one run: docs/performance.md). Asked of the
        # broker, not taken from the tail's position: the tail lags the log, and a reloaded page then
        # missed its own last action in its history (tests/integration/test_gateway.py).
        end = (await self._tail.end_offsets([(EVENTS, partition)]))[(EVENTS, partition)]
        lock = self._reader_locks[partition]
        self._queued[partition] += 1
        try:
            await asyncio.wait_for(self._catchups.acquire(), self.limits.catchup_wait_s)
            try:
                await asyncio.wait_for(lock.acquire(), self.limits.catchup_wait_s)
            except BaseException:
                self._catchups.release()
                raise
        except TimeoutError:
            self._queued[partition] -= 1
            raise Refused(
                f"this gateway is busy reading other trials for other pages "
                f"(waited {self.limits.catchup_wait_s:g} s); try again",
                LIMITED,
            ) from None
        except BaseException:
            self._queued[partition] -= 1
            raise
        try:
            deadline = asyncio.get_running_loop().time() + CATCHUP_WITHIN_S
            reader = await self._reader(partition)
            reader.seek(EVENTS, partition, indexed.start_offset or 0)
            position = indexed.start_offset or 0
            while position < end:
                if asyncio.get_running_loop().time() > deadline:
                    raise Refused(
                        f"this page took over {CATCHUP_WITHIN_S:g} s to read the trial's history; reload it", SLOW
                    )
                # No more records than the history has left: aiokafka makes a record as it hands it out,
                # and what a fetch holds past the end (the tail's records) is not made for nothing.
                for i, record in enumerate(await reader.poll(timeout_ms=500, max_records=end - position), 1):
                    position = record.next_offset
                    if record.offset >= end:
                        break
                    if record.trial_id == sub.trial_id and not sub.skip(record):
                        yield record
                    if i % CATCHUP_TURN_EVERY == 0:
                        # A page's send seldom waits, so a poll's worth of history would go out
                        # in one stretch of the event loop: give the live seats a turn.
                        await asyncio.sleep(0)
                # Offsets with no record (compaction, control markers) count as read.
                position = max(position, reader.position_hint(EVENTS, partition) or 0)
        except (Refused, GeneratorExit, asyncio.CancelledError):
            raise
        except Exception:
            await self._drop_reader(partition)  # a fresh one for the next catch-up
            raise
        finally:
            self._queued[partition] -= 1
            if not self._queued[partition]:
                # No catch-up waits for this partition: an idle reader would go on fetching.
                await self._drop_reader(partition)
            lock.release()
            self._catchups.release()
        # From here on the tail: drop what it queued that the catch-up already gave.
        sub.live_from = end
        held, sub.queue = sub.queue, asyncio.Queue(sub.size)
        while not held.empty():
            record = held.get_nowait()
            if record is not None and record.offset >= end:
                sub.queue.put_nowait(record)
        yield CAUGHT_UP
        while True:
            yield await sub.get()
