"""Replay: the samples of a trial, read straight from the ``events`` topic.

.. code-block:: python

    async with connect(settings) as bus:
        async for sample in replay(bus, trial_id):
            print(sample.tick, sample.actor, sample.action, sample.reward)

The trial lives in one partition of ``events`` (I-1, I-2); replay seeks to the
trial's start offset from the ``trials`` index (or scans the partition from its
beginning when the index does not know the trial) and reads to the partition's
current end: retroactive rewards can be logged any time after ``trial.ended``,
so the index's end offset is where the trial stopped, not where its log does.

A finished trial's samples are yielded once the read is complete (a late reward
can still change any of them). With ``follow=True`` a live trial is tailed and
each sample is yielded as soon as it is complete — when the actor's next
observation (or the trial's end) is logged; rewards for a tick that arrive after
its sample was yielded are not reflected (replay it again, or read the archive).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

from trialog.bus.base import Bus, Record
from trialog.controller import Controller
from trialog.datalog.collector import full_collections_put_off
from trialog.datalog.samples import Sample, TrialFold
from trialog.errors import CodecError
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_TICK,
    Observation,
    ResolvedTrial,
    TrialEnded,
    TrialRecord,
    TrialStarted,
)
from trialog.protocol.in_place import ACTION, OBSERVATION, TickBodies
from trialog.protocol.owners import check_headers
from trialog.protocol.topics import EVENTS


async def partition_records(bus: Bus, partition: int, start: int, stop: int | None = None) -> AsyncIterator[Record]:
    """Every record of one ``events`` partition from ``start`` to its current end (or to
    ``stop``, excluded, if that comes first)."""
    async with contextlib.aclosing(partition_batches(bus, partition, start, stop)) as batches:
        async for batch in batches:
            for record in batch:
                yield record


# Records a reader takes from the consumer at a time. aiokafka makes a record's objects as it
# hands the record out; a poll of a whole fetch (thousands of records, megabytes) made them all
# before the first was read, and by then the first ones' headers and values were out of the
# processor's caches. Polls of 64 took a fifth less CPU on the benchmark's replay than polls of
# whole fetches (docs/performance.md); the services poll 32 for their own reason
# (trialog.runtime.service.RECORDS_PER_FLUSH).
READ_AT_ONCE = 64


async def partition_batches(
    bus: Bus, partition: int, start: int, stop: int | None = None
) -> AsyncIterator[list[Record]]:
    """:func:`partition_records`, as the polls return them: a reader of a whole partition
    pays a step of an async generator per poll rather than per record."""
    consumer = bus.consumer([EVENTS], partitions=[partition])
    await consumer.start()
    try:
        consumer.seek(EVENTS, partition, start)
        end = (await consumer.end_offsets([(EVENTS, partition)]))[(EVENTS, partition)]
        if stop is not None:
            end = min(end, stop)
        position = start
        while position < end:
            records = await consumer.poll(timeout_ms=500, max_records=READ_AT_ONCE)
            if records:
                if stop is not None and records[-1].offset >= end:
                    if before := list(itertools.takewhile(lambda r: r.offset < end, records)):
                        yield before
                    return
                position = records[-1].next_offset
                yield records
            # Offsets with no record (retention, compaction, control markers) still count as read.
            position = max(position, consumer.position_hint(EVENTS, partition) or 0)
    finally:
        await consumer.stop()


async def recall_start(
    bus: Bus, trial_id: str, partition: int, start: int, stop: int | None = None
) -> TrialStarted | None:
    """The genuine ``trial.started`` of a trial, read from ``start`` (the offset of its first
    resolved record, as the ``trials`` index has it) to ``stop``; None if the trial ended
    before it started. ``bus.trust`` learns its actors. What a service that took a
    partition after a trial ended needs to judge the trial's late records as it did
    before (I-7): who its actors are, and which keys tag their rewards. Records that are
    forged or do not decode are passed over, as every reader passes them over."""
    async with contextlib.aclosing(partition_records(bus, partition, start, stop)) as records:
        async for record in records:
            if record.trial_id != trial_id or record.header(HEADER_KIND) not in (TrialStarted.KIND, TrialEnded.KIND):
                continue
            event = _genuine(bus, record)
            if isinstance(event, TrialStarted):
                bus.trust.learn(event)
                return event
            if isinstance(event, TrialEnded):
                return None
    return None


async def recall_end(bus: Bus, trial_id: str, partition: int, end: int) -> TrialEnded | None:
    """The genuine ``trial.ended`` of a trial at offset ``end`` (as the ``trials`` index has it), or None."""
    async with contextlib.aclosing(partition_records(bus, partition, end, end + 1)) as records:
        async for record in records:
            event = _genuine(bus, record) if record.trial_id == trial_id else None
            return event if isinstance(event, TrialEnded) else None
    return None


def _genuine(bus: Bus, record: Record):
    """The record's event, if its tags and headers hold and it decodes; else None."""
    if bus.refusal(record) is not None:
        return None
    try:
        event = bus.codec.decode(record.value, record.header(HEADER_KIND))
        check_headers(record.key, record.headers, event)
    except CodecError:
        return None
    return event


async def trial_records(
    bus: Bus, trial_id: str, *, follow: bool = False, start: int | None = None
) -> AsyncIterator[Record]:
    """The records of one trial in log order, from ``start`` (default: from the index)
    to the partition's end — or, with ``follow``, until ``trial.ended`` is read and the
    partition's end at that moment is reached."""
    p = bus.partition_of(trial_id)
    if start is None:
        indexed = await Controller(bus).trial_record(trial_id)
        start = 0
        if indexed is not None and indexed.start_offset is not None:
            p, start = indexed.partition, indexed.start_offset
    if not follow:
        async for record in partition_records(bus, p, start):
            if record.trial_id == trial_id:
                yield record
        return
    consumer = bus.consumer([EVENTS], partitions=[p])
    await consumer.start()
    try:
        consumer.seek(EVENTS, p, start)
        position, ended = start, False
        while True:
            end = (await consumer.end_offsets([(EVENTS, p)]))[(EVENTS, p)]
            if ended and position >= end:
                return
            for record in await consumer.poll(timeout_ms=500):
                position = record.next_offset
                if record.trial_id != trial_id:
                    continue
                ended = ended or (record.header(HEADER_KIND) == TrialEnded.KIND and bus.refusal(record) is None)
                yield record
            position = max(position, consumer.position_hint(EVENTS, p) or 0)
    finally:
        await consumer.stop()


def feed(fold: TrialFold, bus: Bus, record: Record) -> None:
    """Decode one record into the fold (undecodable or forged ones become problems)."""
    refused = bus.refusal(record)
    if refused is not None:
        fold.bad_record(record.offset, f"refused: {refused}")
        return
    _decode_into(fold, bus, record)


def _decode_into(fold: TrialFold, bus: Bus, record: Record) -> bool:
    """:func:`feed` of a record whose tags hold: whether it was folded."""
    try:
        event = bus.codec.decode(record.value, record.header(HEADER_KIND))
        check_headers(record.key, record.headers, event)
    except CodecError as exc:
        fold.bad_record(record.offset, f"undecodable record: {exc}")
        return False
    if isinstance(event, ResolvedTrial):
        bus.trust.learn(event)  # who plays whom: what the trial's next records are checked against
    fold.add(event, record.headers)
    return True


class Feeder:
    """:func:`feed`, with the tick's records — observations and actions, nearly every record
    of a trial — read straight into the fold: their bodies read in place
    (:class:`~trialog.protocol.in_place.TickBodies`) and folded without building the events
    (:meth:`TrialFold.observe`, :meth:`TrialFold.act`). On a replay of the benchmark's
    trials, decoding a body into an event and checking its headers cost twice the record's
    tag check; read this way, less than half of it.

    The fold gets the same fields :func:`feed` would give it. Any other record (an older
    schema, a header that does not match, bytes that do not decode) takes :func:`feed`'s way,
    which says what is wrong with it. Tags are checked first, for every record, as
    :func:`feed` does. The learner service folds its trials' observations and actions with
    one too."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.bodies = TickBodies(bus.store)

    def __call__(self, fold: TrialFold, record: Record) -> dict[str, bytes] | None:
        """Fold the record as :func:`feed` does. If it was folded (its tags hold and it decodes),
        its headers as they were read (the last of a name counts); else None."""
        h = dict(record.headers)  # as the tag check and check_headers read them: the last of a name counts
        refused = self.bus.refusal(record, h)
        if refused is not None:
            fold.bad_record(record.offset, f"refused: {refused}")
            return None
        value = record.value
        if type(value) is bytes:
            kind = h.get(HEADER_KIND)
            if kind == OBSERVATION:
                read = self.bodies.observation(record.key, h, value)
                if read is not None:
                    fold.observe(*read)
                    return h
            elif kind == ACTION:
                read = self.bodies.action(record.key, h, value)
                if read is not None:
                    fold.act(*read, record.headers)
                    return h
        return h if _decode_into(fold, self.bus, record) else None


async def read_trial(bus: Bus, trial_id: str) -> TrialFold:
    """The whole fold of a trial as logged so far (samples, trial.started/ended, problems)."""
    fold, fast_feed = TrialFold(trial_id, bus.store), Feeder(bus)
    async for record in trial_records(bus, trial_id):
        fast_feed(fold, record)
    return fold


async def read_trials(bus: Bus, select: Callable[[TrialRecord], bool]) -> AsyncIterator[TrialFold]:
    """The folds of every indexed trial that ``select`` keeps, reading the ``trials``
    index once and each ``events`` partition once, from its oldest selected trial to
    its end — the way to replay many trials (per-trial :func:`replay` reads a partition
    per trial). Folds are yielded partition by partition, once complete. While a partition
    is read, the garbage collector's full collections are put off, process-wide
    (:mod:`trialog.datalog.collector`)."""
    selected: dict[int, dict[str, TrialFold]] = {}
    starts: dict[int, int] = {}
    for record in await Controller(bus).list_trials():
        if record.start_offset is None or not select(record):
            continue
        selected.setdefault(record.partition, {})[record.trial_id] = TrialFold(record.trial_id, bus.store)
        starts[record.partition] = min(starts.get(record.partition, record.start_offset), record.start_offset)
    fast_feed = Feeder(bus)
    for partition, folds in sorted(selected.items()):
        # By the key's bytes: no trial ID decoded per record. A key that is not a selected
        # trial's is decoded as before (a trial ID of U+FFFD could be an invalid key's).
        by_key = {trial_id.encode(): fold for trial_id, fold in folds.items()}
        async with contextlib.aclosing(partition_batches(bus, partition, starts[partition])) as batches:
            with full_collections_put_off():  # the folds grow until the partition is read
                async for batch in batches:
                    for r in batch:
                        fold = by_key.get(r.key)
                        if fold is not None:
                            fast_feed(fold, r)
                        elif (fold := folds.get(r.trial_id)) is not None:
                            feed(fold, bus, r)
        for fold in folds.values():
            yield fold


async def replay(bus: Bus, trial_id: str, *, follow: bool = False) -> AsyncIterator[Sample]:
    """The samples of a trial from the topic (see the module's doc for ``follow``)."""
    fold, fast_feed = TrialFold(trial_id, bus.store), Feeder(bus)
    if not follow:
        async for record in trial_records(bus, trial_id):
            fast_feed(fold, record)
        for sample in fold.samples():
            yield sample
        return
    sent: set[tuple[int, str]] = set()
    async for record in trial_records(bus, trial_id, follow=True):
        fast_feed(fold, record)
        if record.header(HEADER_KIND) != Observation.KIND or fold.ended is not None:
            continue
        # The actor's observation for tick t completes its sample of tick t-1.
        actor, tick = record.header(HEADER_RECEIVER) or "", int(record.header(HEADER_TICK) or 0)
        done = fold.sample(tick - 1, actor)
        if done is not None and (done.tick, actor) not in sent:
            sent.add((done.tick, actor))
            yield done
    for sample in fold.samples():
        if (sample.tick, sample.actor) not in sent:
            yield sample
