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
import dataclasses
import itertools
import struct
from collections.abc import AsyncIterator, Callable

from trialog.bus.base import Bus, Record
from trialog.controller import Controller
from trialog.datalog.collector import full_collections_put_off
from trialog.datalog.samples import Sample, TrialFold
from trialog.errors import CodecError
from trialog.protocol.codec import Schema
from trialog.protocol.codec_flat import read_varint, varint
from trialog.protocol.events import (
    HEADER_ID,
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    Observation,
    ResolvedTrial,
    TrialEnded,
    TrialRecord,
    TrialStarted,
)
from trialog.protocol.owners import check_headers
from trialog.protocol.rewards import reward_bounds_problem
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
    of a trial — read straight into the fold: their Avro bodies compared with what their key
    and headers say and their other fields read in place, and folded without building the
    events (:meth:`TrialFold.observe`, :meth:`TrialFold.act`). On a replay of the benchmark's
    trials, decoding a body into an event and checking its headers cost twice the record's
    tag check; read this way, less than half of it.

    A record is read this way only if it is what :func:`feed` would decode and accept — the
    current schema's fingerprint, its key, tick and actor header encoded in the body as Avro
    writes them, every other field well formed and nothing after them — and the fold gets
    the same fields :func:`feed` would give it. Any other record (an older schema, a header
    that does not match, bytes that do not decode) takes :func:`feed`'s way, which says
    what is wrong with it. Tags are checked first, for every record, as :func:`feed` does.
    The learner service folds its trials' observations and actions with one too."""

    CACHED = 100_000  # entries per cache below: keys and headers are untrusted input

    def __init__(self, bus: Bus):
        self.bus = bus
        self.observation = _tick_schema(bus, Observation, _OBSERVATION_FIELDS)
        self.action = _tick_schema(bus, Action, _ACTION_FIELDS)
        # Per schema read here (observations', actions'): key -> the schema header + the key as an Avro string
        self._heads: dict[bytes, dict[bytes | None, bytes | None]] = {
            schema.header: {} for schema in (self.observation, self.action) if schema is not None
        }
        self._ticks: dict[bytes | None, tuple[int, bytes] | None] = {}  # tick header -> (tick, as an Avro long)
        self._names: dict[bytes | None, tuple[str, bytes] | None] = {}  # name header -> (name, as an Avro string)

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
            if kind == _OBSERVATION and self.observation is not None:
                if self._observation(fold, record.key, h, value):
                    return h
            elif kind == _ACTION and self.action is not None and self._action(fold, record, h, value):
                return h
        return h if _decode_into(fold, self.bus, record) else None

    def _observation(self, fold: TrialFold, key: bytes | None, h: dict, value: bytes) -> bool:
        read = self._tick_actor(self.observation, key, h.get(HEADER_TICK), h.get(HEADER_RECEIVER), value)
        if read is None or h.get(HEADER_SENDER) != _ENVIRONMENT or h.get(HEADER_ID, b"") != b"":
            return False
        tick, actor, payload, tail = read
        if len(tail) < 4 or tail[0] > 1 or tail[1] > 1 or tail[2] > 1:
            return False
        if tail[3:] == b"\x00":  # reward: the union's null
            if HEADER_REWARD in h:
                return False
            reward = None
        elif len(tail) == 12 and tail[3] == 2 and h.get(HEADER_REWARD) == b"1" and tick >= 1:  # its double
            reward = _DOUBLE.unpack_from(tail, 4)[0]
            if reward_bounds_problem(reward, 1.0) is not None:
                return False
        else:
            return False
        fold.observe(tick, actor, payload, tail[0] == 1, tail[1] == 1, tail[2] == 1, reward)
        return True

    def _action(self, fold: TrialFold, record: Record, h: dict, value: bytes) -> bool:
        read = self._tick_actor(self.action, record.key, h.get(HEADER_TICK), h.get(HEADER_SENDER), value)
        if read is None or h.get(HEADER_RECEIVER) != b"" or h.get(HEADER_ID, b"") != b"":
            return False
        tick, actor, payload, tail = read
        if tail == b"\x00":  # policy_version: the union's null
            policy_version = None
        elif tail[:1] == b"\x02":  # its long
            read = _varint_at(tail, 1)
            if read is None or read[1] != len(tail) or not _LONG_MIN <= read[0] <= _LONG_MAX:
                return False
            policy_version = read[0]
        else:
            return False
        fold.act(tick, actor, payload, policy_version, record.headers)
        return True

    def _tick_actor(
        self, schema: Schema, key: bytes | None, tick_header: bytes | None, actor_header: bytes | None, value: bytes
    ) -> tuple[int, str, bytes, bytes] | None:
        """(tick, actor, payload, the bytes after it) of a body that starts with the schema's
        header, the record key as its trial ID, the tick header's tick and the actor
        header's name, as Avro encodes them, then a well-formed payload; else None."""
        heads = self._heads[schema.header]  # by schema first: no pair made per record
        head = heads.get(key, _UNSEEN)
        if head is _UNSEEN:
            head = self._remember(heads, key, _avro_string(key, schema.header))
        tick = self._ticks.get(tick_header, _UNSEEN)
        if tick is _UNSEEN:
            tick = self._remember(self._ticks, tick_header, _avro_tick(tick_header))
        actor = self._names.get(actor_header, _UNSEEN)
        if actor is _UNSEEN:
            name = _avro_string(actor_header)
            actor = self._remember(self._names, actor_header, None if name is None else (actor_header.decode(), name))
        if head is None or tick is None or actor is None or not value.startswith(head):
            return None
        pos = len(head)
        if not value.startswith(tick[1], pos):
            return None
        pos += len(tick[1])
        if not value.startswith(actor[1], pos):
            return None
        pos += len(actor[1])
        if pos < len(value) and value[pos] < 0x80:  # a payload under 64 bytes: its size in one byte
            size, pos = (value[pos] >> 1) ^ -(value[pos] & 1), pos + 1
        else:
            read = _varint_at(value, pos)
            if read is None:
                return None
            size, pos = read
        end = pos + size
        if size < 0 or end > len(value):
            return None
        return tick[0], actor[0], value[pos:end], value[end:]

    def _remember(self, cache: dict, key: object, found: object) -> object:
        if len(cache) >= self.CACHED:
            cache.clear()
        cache[key] = found
        return found


_OBSERVATION, _ACTION, _ENVIRONMENT = Observation.KIND.encode(), Action.KIND.encode(), Observation.SENDER.encode()
_OBSERVATION_FIELDS = [
    ("trial_id", "string"), ("tick", "long"), ("actor", "string"), ("payload", "bytes"),
    ("terminated", "boolean"), ("truncated", "boolean"), ("final", "boolean"), ("reward", ["null", "double"]),
]  # fmt: skip
_DOUBLE = struct.Struct("<d")  # Avro's double: 8 bytes, little-endian
_ACTION_FIELDS = [("trial_id", "string"), ("tick", "long"), ("actor", "string"), ("payload", "bytes"),
                  ("policy_version", ["null", "long"])]  # fmt: skip
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_UNSEEN = object()


def _tick_schema(bus: Bus, cls: type[Observation] | type[Action], fields: list) -> Schema | None:
    """The schema ``cls`` is written with, if it is the one :class:`Feeder` reads (its fields,
    in the order of the event's); None otherwise, and every such record takes feed's way."""
    try:
        schema = bus.store.get(cls.SCHEMA)
    except CodecError:
        return None
    if (
        not isinstance(schema.parsed, dict)
        or [(f["name"], f["type"]) for f in schema.parsed.get("fields", ())] != fields
    ):
        return None
    if [name for name, _ in fields] != [f.name for f in dataclasses.fields(cls)]:
        return None
    return schema


def _avro_string(raw: bytes | None, prefix: bytes = b"") -> bytes | None:
    """``prefix`` then ``raw`` as an Avro string, if it is UTF-8 (a string of the body the
    codec would decode); None if it is not, or absent."""
    if raw is None:
        return None
    try:
        raw.decode()
    except UnicodeDecodeError:
        return None
    return prefix + varint(len(raw)) + raw


def _avro_tick(header: bytes | None) -> tuple[int, bytes] | None:
    """(tick, as an Avro long) of a tick header written as the body's tick is compared
    (``str(tick)``); None for any other header."""
    try:
        tick = int(header)
    except (TypeError, ValueError):
        return None
    if str(tick).encode() != header or not _LONG_MIN <= tick <= _LONG_MAX:
        return None
    return tick, varint(tick)


def _varint_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """(the zigzag varint at ``pos``, the position after it); None where the codec fails on it
    (past the end, longer than 10 bytes)."""
    try:
        return read_varint(data, pos)
    except (IndexError, ValueError):
        return None


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
