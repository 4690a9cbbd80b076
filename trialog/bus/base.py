"""The Kafka edge's contract: what runtimes and services may ask of a broker.

Two implementations honour it: :class:`trialog.bus.kafka.KafkaBus` (aiokafka, a real
cluster) and :class:`trialog.bus.memory.MemoryBus` (in-process, for unit tests).
Nothing outside ``trialog.bus`` imports aiokafka.

Topics are named by *role* (``control``, ``events``, ``trials``, ``models``,
``dead-letters``); the bus adds the deployment's prefix.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.partitioner import murmur2  # pure function: Kafka's default key hash

from trialog.errors import RecordsTooLarge
from trialog.protocol.codec import SchemaStore
from trialog.protocol.event_codec import EventCodec
from trialog.protocol.events import DeadLetter, Event, ResolvedTrial
from trialog.protocol.topics import CONTROL, DEAD_LETTERS, EVENTS, record_limits
from trialog.settings import Settings
from trialog.trust.authenticator import Authenticator
from trialog.trust.keys import Keyring

SIGNED = frozenset({CONTROL, EVENTS})  # roles whose records carry tags (trialog.trust)


@dataclass(slots=True)
class Record:
    """One consumed record; ``role`` is the topic's role, not its full name.

    A batch the consumer could not read arrives as one record with ``problem`` set
    (why), no key, value or headers, covering ``span`` offsets from ``offset``.

    Treat it as read-only. It is not a frozen dataclass because every consumer builds
    one per record it reads, and a frozen dataclass's ``__init__`` costs 2.0 µs where
    this one costs 0.3 µs (measured with the nine fields below)."""

    role: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    problem: str | None = None
    span: int = 1

    @property
    def next_offset(self) -> int:
        return self.offset + self.span

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v.decode(errors="replace") if v is not None else None
        return None

    @property
    def trial_id(self) -> str:
        return self.key.decode(errors="replace") if self.key else ""


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where a published record landed."""

    role: str
    partition: int
    offset: int
    timestamp_ms: int = -1  # the record's timestamp in the log, when the broker said (-1: unknown)


# What a record costs on top of its key, value and headers: a batch header (61 bytes)
# and a record's varints and attributes, counted generously so that a record that
# passes the check never fails in the broker for its size.
RECORD_OVERHEAD = 128
HEADER_OVERHEAD = 10
HEADROOM = 64 * 1024  # below limit - HEADROOM bytes of key and value, a record fits (see Bus.oversized)

Item = tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]  # (role, key, value, headers)


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> int:
    """An upper bound of a record's size in a batch of its own, as the broker counts it."""
    return (
        RECORD_OVERHEAD
        + len(key or b"")
        + len(value or b"")
        + sum(len(k) + len(v or b"") + HEADER_OVERHEAD for k, v in headers)
    )


def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record (murmur2, positive, modulo)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


BATCH_WAIT_MS = 100  # a batched reader nothing waits on: the learner, the logger, dashboards
# A batched reader a trial waits on — the orchestrator (a trial starts and ends when it says so),
# controllers (the next trial starts when one sees an end): 64 short trials of the benchmark ran
# 11-19 % more ticks a second with 20 ms than with 100, for about 1 % of a core more while idle.
LIFECYCLE_WAIT_MS = 20

# Called with the set of (role, partition) assigned or revoked, inside the poll loop.
AssignmentCallback = Callable[[set[tuple[str, int]]], Awaitable[None]]


class Consumer(abc.ABC):
    """A consumer of one or more roles, in a group (partitions shared) or not (all partitions)."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def poll(self, timeout_ms: int = 100, max_records: int | None = None) -> list[Record]:
        """Records in partition order (interleaved across partitions), possibly none."""

    @abc.abstractmethod
    def seek(self, role: str, partition: int, offset: int) -> None: ...

    @abc.abstractmethod
    def position_hint(self, role: str, partition: int) -> int | None:
        """The next offset this consumer will return for a partition, if known."""

    @abc.abstractmethod
    async def committed(self, role: str, partition: int) -> tuple[int | None, str]:
        """The group's committed offset of a partition (None: never committed) and the
        metadata committed with it."""

    @abc.abstractmethod
    async def commit(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Commit (offset, metadata) per partition."""

    @abc.abstractmethod
    async def end_offsets(self, parts: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]: ...

    @abc.abstractmethod
    def assignment(self) -> set[tuple[str, int]]: ...

    def highwater(self, role: str, partition: int) -> int | None:
        """The partition's end offset as of the last fetch, if known (for the lag metric)."""
        return None

    def unanswered_s(self) -> float:
        """Seconds since the log last answered a fetch of this consumer for the partition it
        answered longest ago (an empty answer counts: the broker answers within its fetch wait
        even when there is nothing new); 0 when it cannot tell. What tells a quiet log from one
        that is away."""
        return 0.0

    # A service that writes to a partition it reads would otherwise fetch its own records
    # back: a fetch response of their own (docs/performance.md). It holds its fetches while
    # they are on their way, then moves past them if they are the next to read.
    def hold(self) -> bool:
        """Fetch nothing more until :meth:`release` (records fetched already are kept), and say
        whether it holds: not when a fetch is on its way already (it brings the records back
        anyway). Every partition, not only the one written to: a fetch made meanwhile for the
        others would keep the written one from being fetched until the broker answers it."""
        return False

    def release(self) -> None:
        """Fetch again (see :meth:`hold`)."""
        return None

    def skip_written(self, role: str, partition: int, first: int, after: int) -> bool:
        """If the next record this consumer hands out of the partition is at offset
        ``first``, go on from ``after`` instead and return True: the caller handles the
        records in between itself (it wrote them). False: nothing changes."""
        return False

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


_UNDECODED_PER_KEY = 8  # values of one key a reader of a compacted topic keeps undecoded (read_latest)


def _newest_decoded(values: list[bytes], decode: Callable[[bytes], Any]) -> tuple[bytes, Any] | None:
    """(value, decoded) of the newest of ``values`` that decodes, or None if none does: a
    broken or forged record does not replace a good value."""
    for value in reversed(values):
        try:
            return value, decode(value)
        except Exception:  # noqa: BLE001, S112 - the next older one, then
            continue
    return None


class Bus(abc.ABC):
    """Producer, consumers and topic admin for one deployment (one settings object)."""

    def __init__(self, settings: Settings, store: SchemaStore | None = None):
        self.settings = settings
        self.codec = EventCodec(store)
        # The partition count of control/events as the cluster has it (settings until known),
        # and trial ID -> partition: murmur2 in pure Python costs ~8 µs, paid per event otherwise.
        self.partitions = settings.partition_count()
        self._partition_cache: dict[str, int] = {}
        #: role -> the largest record its topic takes (topics are created with these limits).
        self.record_limits = record_limits(settings)
        self._trust: Authenticator | None = None

    @property
    def trust(self) -> Authenticator:
        """Tags what this process writes and checks what it reads (keyring loaded on first use)."""
        if self._trust is None:
            self._trust = Authenticator(Keyring.load(self.settings))
        return self._trust

    @trust.setter
    def trust(self, value: Authenticator) -> None:
        self._trust = value

    @property
    def store(self) -> SchemaStore:
        return self.codec.store

    # --- lifecycle ---------------------------------------------------------------------
    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Bus:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- producing -------------------------------------------------------------------------
    @abc.abstractmethod
    async def send_many(self, items: Sequence[Item]) -> list[Delivered]:
        """Send (role, key, value, headers) records; return once all are acknowledged,
        in order. Records for one partition keep their order (idempotent producer).

        Records larger than their topic takes are not sent: the others are, then
        :class:`~trialog.errors.RecordsTooLarge` says which were refused and why."""

    def oversized(self, items: Sequence[Item]) -> dict[int, str]:
        """Index -> reason, for the records their topic would refuse for their size."""
        out: dict[int, str] = {}
        for i, (role, key, value, headers) in enumerate(items):
            limit = self.record_limits.get(role)
            # Fast path (a tick's records weigh little): headers are counted only near the limit;
            # should they alone push a record over, the broker's refusal is handled in the send.
            if limit is None or len(value or b"") + len(key or b"") < limit - HEADROOM:
                continue
            size = record_size(key, value, headers)
            if size > limit:
                kind = next((v.decode(errors="replace") for k, v in headers if k == "kind" and v), "record")
                out[i] = (
                    f"{kind} of {size:,} bytes for trial {key.decode(errors='replace') if key else '?'} "
                    f"exceeds the {limit:,}-byte limit of topic {self.settings.topic(role)}"
                )
        return out

    @staticmethod
    def refuse(refused: dict[int, str], delivered: dict[int, Delivered], items: Sequence[Item]) -> list[Delivered]:
        """The answer of a send: everything delivered, or RecordsTooLarge naming the refused."""
        if refused:
            key = items[min(refused)][1]
            raise RecordsTooLarge(refused, delivered, trial_id=key.decode(errors="replace") if key else None)
        return [delivered[i] for i in range(len(items))]

    def to_record(self, role: str, event: Event) -> tuple[str, bytes, bytes, list[tuple[str, bytes]]]:
        """An event as a (role, key, value, headers) record: keyed by its trial ID (I-1),
        tagged with the sender's key (and its receivers') on ``control`` and ``events``."""
        value = self.codec.encode(event)
        headers = event.headers()
        if role in SIGNED:
            if isinstance(event, ResolvedTrial):
                self.trust.learn(event)  # its actors' keys tag it, and what follows
            headers += self.trust.tag(event.trial_id, headers, value)
        return (role, event.trial_id.encode(), value, headers)

    def refusal(self, record: Record, headers: dict[str, bytes] | None = None) -> str | None:
        """Why a consumed record must not count (forged, or written without the right key), or
        None. ``headers``: the dict of the record's headers, if the reader made it already."""
        if record.role not in SIGNED:
            return None
        return self.trust.check(record.key, record.headers if headers is None else headers, record.value)

    async def publish(self, role: str, event: Event) -> Delivered:
        """Encode one event and send it, keyed by its trial ID; wait for the acknowledgement."""
        return (await self.publish_all(role, (event,)))[0]

    async def publish_all(self, role: str, events: Iterable[Event]) -> list[Delivered]:
        """Encode and send several events at once (one round trip, order kept)."""
        items = [self.to_record(role, e) for e in events]
        return await self.send_many(items) if items else []

    async def dead_letter(self, record: Record, reason: str, service: str) -> None:
        """Park a record a service cannot use, with the reason (I-8: never vanish)."""
        letter = DeadLetter(
            topic=self.settings.topic(record.role),
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            headers={k: (v or b"") for k, v in record.headers},
            reason=reason,
            service=service,
            timestamp_ms=record.timestamp_ms,
        )
        value = self.codec.encode(letter)
        limit = self.record_limits[DEAD_LETTERS]
        if record_size(record.key, value, letter.headers_list()) > limit:
            # The letter must get through: keep the reason and the headers, drop the body.
            size = len(record.value or b"")
            letter = dataclasses.replace(
                letter,
                value=None,
                reason=f"{reason} (its value of {size:,} bytes is not kept: "
                f"over the {limit:,}-byte limit of dead letters)",
            )
            value = self.codec.encode(letter)
        await self.send_many([(DEAD_LETTERS, record.key or b"", value, letter.headers_list())])

    def partition_of(self, trial_id: str) -> int:
        p = self._partition_cache.get(trial_id)
        if p is None:
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            p = self._partition_cache[trial_id] = partition_for(trial_id.encode(), self.partitions)
        return p

    # --- consuming -------------------------------------------------------------------------
    @abc.abstractmethod
    def consumer(
        self,
        roles: Sequence[str],
        *,
        group: str | None = None,
        on_assigned: AssignmentCallback | None = None,
        on_revoked: AssignmentCallback | None = None,
        partitions: Iterable[int] | None = None,
        from_start: bool = True,
        batched: bool = False,
        batch_wait_ms: int = BATCH_WAIT_MS,
    ) -> Consumer:
        """A consumer of ``roles``. With ``group`` (a name without the prefix) the
        partitions are shared with the group's other members and offsets can be
        committed; without, it reads ``partitions`` (default all) from the start
        (or the end with ``from_start=False``). ``batched`` trades up to
        ``batch_wait_ms`` of latency for far fewer, fuller fetches: for readers off
        the tick path of a busy topic, several records a tick — ``events`` for the
        orchestrator, the logger, the learner, a controller following it
        (:data:`LIFECYCLE_WAIT_MS` for those a trial waits on). A topic with a few records
        a trial (the ``trials`` index, ``models``, dead letters, analytics results) is read
        unbatched: there a batched fetch comes back empty at the end of each wait, where an
        unbatched one is answered at its first record and otherwise waits long (an idle
        reader of the index: a tenth of the CPU, docs/performance.md)."""

    async def read_to_end(self, role: str) -> AsyncIterator[Record]:
        """Every record of a topic (all partitions) from its start to its end as of now."""
        consumer = self.consumer([role])
        await consumer.start()
        try:
            ends = await consumer.end_offsets(consumer.assignment())
            done = {rp for rp, end in ends.items() if end == 0}
            while len(done) < len(ends):
                for record in await consumer.poll(timeout_ms=500):
                    yield record
                # Positions, not the last record's offset: a transactional writer (the analytics
                # jobs) leaves commit markers at the end, which are offsets without records.
                done.update(rp for rp, end in ends.items() if (consumer.position_hint(*rp) or 0) >= end)
        finally:
            await consumer.stop()

    async def read_latest(self, role: str, decode: Callable[[bytes], Any]) -> dict[str, Any]:
        """Read a compacted topic (``trials``, ``analytics.*``) to its current end: the latest
        decoded value per key. A value that does not decode is skipped; a tombstone deletes its key."""
        # Values kept per key as read and decoded newest first at the end: a key's older values (a
        # trial's index has several before compaction) need no decoding. A key updated often keeps
        # its newest good value only, so what is kept stays small.
        values: dict[str, list[bytes]] = {}
        async for record in self.read_to_end(role):
            if not record.value:
                values.pop(record.trial_id, None)
                continue
            kept = values.setdefault(record.trial_id, [])
            kept.append(record.value)
            if len(kept) > _UNDECODED_PER_KEY:
                good = _newest_decoded(kept, decode)
                kept[:] = [good[0]] if good else []
        latest: dict[str, Any] = {}
        for key, kept in values.items():
            if good := _newest_decoded(kept, decode):
                latest[key] = good[1]
        return latest

    # --- admin -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def create_topics(self, local_instances: int | None = None) -> list[str]:
        """Create the deployment's topics if missing (idempotent); return the ones created. A
        local run says how many instances its largest service has (their partition count when
        the settings leave it open: :meth:`Settings.partition_count`)."""

    @abc.abstractmethod
    async def describe_topics(self) -> dict[str, dict]:
        """Partitions and configs of the deployment's topics (for checks and tests)."""

    @abc.abstractmethod
    async def delete_topics(self) -> list[str]:
        """Delete the deployment's topics (tests clean up after themselves); return the ones deleted."""
