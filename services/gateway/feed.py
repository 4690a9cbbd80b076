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

Catch-ups are read in rounds, one partition's at a time: a round takes every catch-up
waiting for that partition and reads the partition once, from the oldest of their trials'
starts to the furthest of their ends, handing each subscriber its own trial's records.
Pages that come together — a crowd joining, or every page of a restarted gateway
reconnecting — cost one read of the partition, not one each (docs/humans.md#limits).

Bounds (:class:`~trialog.services.gateway.door.Limits`): rounds run a few at a time per
process on a reader kept per partition while catch-ups queue, each within
:data:`CATCHUP_WITHIN_S`; a page waits for its round at most ``catchup_wait_s``. A
subscriber's queues (history, then live records) are bounded: a round waits for a page to
take its history at most ``send_timeout_s``, and a subscriber that falls further behind the
tail is dropped (:class:`~trialog.services.gateway.door.Refused` with the ``SLOW`` close
code) rather than buffered without bound.
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
CATCHUP_WITHIN_S = 30.0  # a round of catch-ups (its pages' histories) that takes longer drops the pages left
CATCHUP_TURN_EVERY = 64  # history records read between two turns a round gives the event loop
_DONE = object()  # the end of a catch-up's history in its queue


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


@dataclass(eq=False)
class _Catchup:
    """One subscriber's history: its trial's records below ``end``, the partition's end when it
    subscribed. A round puts them in ``queue``, then :data:`_DONE` or what ended it."""

    sub: _Subscriber
    start: int
    end: int
    queue: asyncio.Queue
    started: asyncio.Event = field(default_factory=asyncio.Event)  # its round took it
    finished: bool = False  # its round put its last item
    gone: bool = False  # the page left: its round passes it over


class Feed:
    """Started once per gateway process (``async with Feed(bus)``)."""

    def __init__(self, bus: Bus, limits: Limits | None = None):
        self.bus = bus
        self.limits = limits or Limits()
        self._catchups = asyncio.Semaphore(self.limits.catchups)  # rounds reading at once
        self._readers: dict[int, Consumer] = {}  # partition -> its catch-up reader (one round at a time each)
        self._waiting: dict[int, list[_Catchup]] = defaultdict(list)  # partition -> catch-ups for its next round
        self._rounds: dict[int, asyncio.Task] = {}  # partition -> the task reading its rounds
        self.index: dict[str, TrialRecord] = {}
        self._index_changed = asyncio.Condition()
        self._subscribers: dict[str, set[_Subscriber]] = defaultdict(set)
        self._tail: Consumer | None = None
        self._ends: Consumer | None = None  # asks partitions' ends; reads nothing (see _records)
        self._tasks: list[asyncio.Task] = []
        self.index_ready = asyncio.Event()
        self.watchers: list[Callable[[Record], None]] = []  # see every tail record (the dashboard's tick count)

    async def __aenter__(self) -> Feed:
        await self.bus.start()
        self._tail = self.bus.consumer([EVENTS], from_start=False)
        await self._tail.start()
        self._ends = self.bus.consumer([EVENTS], partitions=[])
        await self._ends.start()
        self._tasks = [asyncio.create_task(self._follow_tail()), asyncio.create_task(self._follow_index())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [*self._tasks, *self._rounds.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for partition in list(self._readers):
            await self._drop_reader(partition)
        for consumer in (self._tail, self._ends):
            if consumer is not None:
                await consumer.stop()
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
        """The catch-up reader of one ``events`` partition, kept while its rounds follow one
        another rather than paying for a new Kafka consumer (connections, metadata) each;
        stopped when no catch-up waits, since an idle consumer goes on fetching."""
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
        partition, start = indexed.partition, indexed.start_offset or 0
        # The history ends where the partition ends now, the subscriber being on the tail: measured
        # before the catch-up waits for its round, so what comes meanwhile reaches it through the tail
        # only. Asked of the broker, not taken from the tail's position: the tail lags the log, and a
        # reloaded page then missed its own last action (tests/integration/test_gateway.py). Asked by a
        # consumer that fetches nothing: a broker answers a connection's requests in turn, and the
        # tail's fetch of a quiet partition is held up to its wait (500 ms) before the question.
        end = (await self._ends.end_offsets([(EVENTS, partition)]))[(EVENTS, partition)]
        if start < end:
            catchup = _Catchup(sub, start, end, asyncio.Queue(self.limits.send_queue))
            self._waiting[partition].append(catchup)
            if partition not in self._rounds:
                self._rounds[partition] = asyncio.create_task(self._read_rounds(partition))
            try:
                try:
                    await asyncio.wait_for(catchup.started.wait(), self.limits.catchup_wait_s)
                except TimeoutError:
                    if not catchup.started.is_set():
                        raise Refused(
                            f"this gateway is busy reading other trials for other pages "
                            f"(waited {self.limits.catchup_wait_s:g} s); try again",
                            LIMITED,
                        ) from None
                while (item := await catchup.queue.get()) is not _DONE:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                catchup.gone = True
                waiting = self._waiting.get(partition, [])  # (not made anew: its round may have taken it)
                if catchup in waiting:
                    waiting.remove(catchup)
                while not catchup.queue.empty():  # frees a round waiting for room in it
                    catchup.queue.get_nowait()
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

    async def _read_rounds(self, partition: int) -> None:
        """Read one partition's rounds of catch-ups until none waits: each round takes every
        catch-up waiting when it gets its turn among the process's ``catchups``."""
        try:
            while self._waiting.get(partition):
                async with self._catchups:
                    round_ = self._waiting.pop(partition, [])  # (a page that left took itself out)
                    for catchup in round_:
                        catchup.started.set()
                    if round_:
                        await self._read_round(partition, round_)
        finally:
            # No catch-up waits (nothing suspends between that check and this): an idle reader would go
            # on fetching. One that comes while it stops starts a task and a reader of its own.
            self._rounds.pop(partition, None)
            await self._drop_reader(partition)

    async def _read_round(self, partition: int, round_: list[_Catchup]) -> None:
        """Read the partition once for the round: each catch-up gets its trial's records below its
        end, in order, then :data:`_DONE` as soon as the read passes its end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCHUP_WITHIN_S
        left = sorted(round_, key=lambda c: c.end)  # finished from the front as the read passes their ends
        by_key: dict[bytes, list[_Catchup]] = defaultdict(list)
        for catchup in round_:
            by_key[catchup.sub.trial_id.encode()].append(catchup)
        position, end = min(c.start for c in round_), left[-1].end
        try:
            reader = await self._reader(partition)
            reader.seek(EVENTS, partition, position)
            while left:
                if loop.time() > deadline:
                    for catchup in left:
                        self._end(catchup, Refused(
                            f"this page's trial history took over {CATCHUP_WITHIN_S:g} s to read; reload it", SLOW
                        ))  # fmt: skip
                    return
                # No more records than the round has left to read: aiokafka makes a record as it hands it
                # out, and what a fetch holds past the end (the tail's records) is not made for nothing.
                for i, record in enumerate(await reader.poll(timeout_ms=500, max_records=end - position), 1):
                    position = record.next_offset
                    if record.offset >= end:
                        break
                    for catchup in by_key.get(record.key, ()):
                        if record.offset < catchup.end and not catchup.sub.skip(record):
                            await self._hand(catchup, record)  # (passes over a page that left)
                    if i % CATCHUP_TURN_EVERY == 0:
                        # A page's send seldom waits, so a poll's worth of history would go out
                        # in one stretch of the event loop: give the live seats a turn.
                        await asyncio.sleep(0)
                # Offsets with no record (compaction, control markers) count as read.
                position = max(position, reader.position_hint(EVENTS, partition) or 0)
                while left and left[0].end <= position:
                    await self._hand(left.pop(0), _DONE)
        except Exception as exc:
            await self._drop_reader(partition)  # a fresh one for the next round
            for catchup in left:
                self._end(catchup, exc)
        except asyncio.CancelledError:
            for catchup in left:
                self._end(catchup, Refused("this gateway is stopping; reconnect", LIMITED))
            raise

    async def _hand(self, catchup: _Catchup, item: object) -> None:
        """Put a history record (or :data:`_DONE`) in a catch-up's queue, waiting for room at
        most as long as a page's send may wait: the round reads for every page of it."""
        if catchup.gone or catchup.finished:
            return
        if catchup.queue.full():
            try:
                await asyncio.wait_for(catchup.queue.put(item), self.limits.send_timeout_s)
            except TimeoutError:
                self._end(
                    catchup,
                    Refused(f"this page did not read its trial's history for {self.limits.send_timeout_s:g} s", SLOW),
                )
                return
        else:
            catchup.queue.put_nowait(item)
        catchup.finished = item is _DONE

    @staticmethod
    def _end(catchup: _Catchup, failure: BaseException) -> None:
        """End a catch-up with ``failure``: what it had not read yet is dropped with it."""
        if catchup.gone or catchup.finished:
            return
        catchup.finished = True
        if catchup.queue.full():
            catchup.queue = asyncio.Queue(1)
        catchup.queue.put_nowait(failure)
