"""The consumers of :class:`~trialog.bus.kafka.KafkaBus`, through aiokafka.

Client settings are chosen on purpose (see ``docs/performance.md`` for the
measurements behind them):

- ``fetch_min_bytes=1`` with a long ``fetch_max_wait_ms``: the broker answers a fetch
  as soon as one byte is there, so the wait costs no latency and saves idle polling;
  offsets are committed by the services themselves (never automatically) because what
  is safe to commit is "the start of the oldest live trial", not "what was read";
- group assignment: ``RangePartitionAssignor``, which gives one member the same
  partition numbers of every topic it reads — the orchestrator reads partition p
  of ``control`` and of ``events`` together (I-2).

A batch the consumer cannot read (a compression codec it lacks, corrupt bytes) is
skipped and handed to the service as one :class:`Record` with ``problem`` set,
spanning the batch's offsets, so that its owner dead-letters it; the records before
and after it are delivered as usual (docs/reliability.md). A consumer whose fetcher or
coordinator ended is replaced (:meth:`KafkaConsumer.poll`, see :mod:`trialog.bus.kafka_tasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka import errors as Errors
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import OffsetAndMetadata

from trialog.bus.base import BATCH_WAIT_MS, AssignmentCallback, Consumer, Record
from trialog.bus.kafka_records import RecordMaker, as_records
from trialog.bus.kafka_tasks import _ended_with, _stopped, _watch_metadata
from trialog.errors import TopicMissingError, TransportError
from trialog.protocol.topics import TRANSACTIONAL_PREFIX
from trialog.telemetry.logs import get_logger

if TYPE_CHECKING:
    from trialog.bus.kafka import KafkaBus

log = get_logger(__name__)

# A batch the consumer cannot read; anything else a fetch raises is not about the batch.
_UNREADABLE = (UnsupportedCodecError, CorruptRecordException)

FETCH_MAX_WAIT_MS = 500
METADATA_MAX_AGE_MS = 5_000  # a consumer's metadata is refreshed this often (a moved leader is found soon)
# A topic just created may be unknown to the node asked: waits, then gives up (trialog topics
# create itself returns only once its topics are known). Within the metadata age, always: until
# it is assigned, a reader's client has no topics, and a refresh of no topics is one of *every*
# topic of the cluster — 140 ms of decoding for 1,700 topics on the loop of a gateway serving
# real-time trials (its dashboard waits like this for the analytics topics; its honest seats
# missed their ticks when the waits outlived the metadata age).
ASK_AGAIN_S = (0.1, 0.2, 0.4, 0.8, 1.6, None)
assert sum(w or 0 for w in ASK_AGAIN_S) < METADATA_MAX_AGE_MS / 1000 / 1.5
STOP_TIMEOUT_S = 30.0  # the longest a replaced consumer may take to leave its group
RESTART_PATIENCE_S = 300.0  # how long a replacement consumer keeps trying to start while Kafka is away
BATCH_MIN_BYTES = 256 * 1024


def fetching(client: AIOKafkaConsumer) -> bool:
    """A fetch is on its way (aiokafka's fetcher has a request in flight)."""
    return bool(client._fetcher._in_flight)  # noqa: SLF001


def hold(client: AIOKafkaConsumer) -> bool:
    """Fetch nothing more for any of its partitions until :func:`release`, unless a fetch is on
    its way (then False: it brings back what is written meanwhile anyway). See
    :meth:`trialog.bus.base.Consumer.hold`."""
    if fetching(client):
        return False
    client.pause(*client.assignment())
    return True


def release(client: AIOKafkaConsumer) -> None:
    client.resume(*client.assignment())
    # A fetch that returned while held left its records waiting; a poll under way would
    # not see them before its timeout (no new fetch wakes it, as none is made while
    # records wait): wake it now.
    fetcher = client._fetcher  # noqa: SLF001
    for waiter in list(fetcher._fetch_waiters):  # noqa: SLF001
        fetcher._notify(waiter)  # noqa: SLF001


class _Listener(ConsumerRebalanceListener):
    def __init__(self, consumer: KafkaConsumer, client: AIOKafkaConsumer):
        self.consumer, self.client = consumer, client

    def _current(self) -> bool:
        # A replaced client may still finish a rebalance while it stops: not ours to report.
        return self.consumer._consumer is self.client  # noqa: SLF001

    async def on_partitions_revoked(self, revoked):
        if self.consumer.on_revoked and revoked and self._current():
            await self.consumer.on_revoked({self.consumer.role_of(tp) for tp in revoked})

    async def on_partitions_assigned(self, assigned):
        if self.consumer.on_assigned and assigned and self._current():
            await self.consumer.on_assigned({self.consumer.role_of(tp) for tp in assigned})


async def partitions_of(client, topics: Sequence[str]) -> dict[str, list[int]]:
    """Each topic's partitions (none if it does not exist), asked of the cluster for these
    topics only. Not aiokafka's ``fetch_all_metadata``: that decodes every topic of the
    cluster, milliseconds per hundred topics, on the event loop of a process that may be
    serving real-time trials (a gateway starting readers stalled its pages for hundreds of
    milliseconds on a cluster of thousands of topics). Never creates a topic, whatever the
    broker's ``auto.create.topics.enable``."""
    node = client.get_random_node()
    if node is None:
        raise KafkaError("no broker known to ask for metadata")
    answer = await client.send(node, MetadataRequest(list(topics), allow_auto_topic_creation=False))
    found: dict[str, list[int]] = dict.fromkeys(topics, [])
    for topic_data in answer.topics:
        error = Errors.for_code(topic_data[0])
        if error is Errors.TopicAuthorizationFailedError:
            raise error(f"not allowed to read the metadata of {topic_data[1]}")
        if error is Errors.NoError:  # else missing, or not yet ready: none
            partitions = topic_data[2] if answer.API_VERSION == 0 else topic_data[3]
            found[topic_data[1]] = sorted(p[1] for p in partitions)
    return found


class KafkaConsumer(Consumer):
    def __init__(
        self,
        bus: KafkaBus,
        roles: Sequence[str],
        group: str | None,
        on_assigned: AssignmentCallback | None,
        on_revoked: AssignmentCallback | None,
        partitions: Iterable[int] | None,
        from_start: bool,
        batched: bool = False,
        batch_wait_ms: int = BATCH_WAIT_MS,
    ):
        self.bus = bus
        self.roles = list(roles)
        self.group = bus.settings.group(group) if group else None
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.partitions = None if partitions is None else list(partitions)
        self.from_start = from_start
        self.batched = batched
        self.batch_wait_ms = batch_wait_ms
        self._topic_roles = {bus.settings.topic(r): r for r in self.roles}
        self._consumer: AIOKafkaConsumer | None = None
        self._next: dict[TopicPartition, int] = {}  # the next offset to hand out (ours: see poll)
        self._unreadable: dict[TopicPartition, tuple[int, int, str]] = {}  # first, next offset, why
        self._watch: asyncio.Task | None = None  # the client's metadata watch

    def role_of(self, tp: TopicPartition) -> tuple[str, int]:
        return (self._topic_roles[tp.topic], tp.partition)

    def _tp(self, role: str, partition: int) -> TopicPartition:
        return TopicPartition(self.bus.settings.topic(role), partition)

    async def start(self) -> None:
        settings = self.bus.settings
        self._consumer = AIOKafkaConsumer(
            **settings.kafka_client_options(),
            client_id=f"{settings.client_id}-{self.group or 'reader'}",
            group_id=self.group,
            key_deserializer=RecordMaker(self._topic_roles),  # its batches hand out Records (kafka_records)
            enable_auto_commit=False,
            auto_offset_reset="earliest" if self.from_start else "latest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            # Batched readers let the broker gather records: each fetch response costs
            # aiokafka ~0.5 ms of CPU, which a reader off the tick path need not pay per tick.
            fetch_max_wait_ms=self.batch_wait_ms if self.batched else FETCH_MAX_WAIT_MS,
            fetch_min_bytes=BATCH_MIN_BYTES if self.batched else 1,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            # Records of aborted transactions (e.g. of a killed analytics job) are never read
            # from the topics written in transactions; on the others it would only cost.
            isolation_level="read_committed"
            if any(r.startswith(TRANSACTIONAL_PREFIX) for r in self.roles)
            else "read_uncommitted",
        )
        try:
            await self._consumer.start()
            self._watch = asyncio.create_task(_watch_metadata(self._consumer._client))  # noqa: SLF001
            if self.group:
                self._consumer.subscribe(list(self._topic_roles), listener=_Listener(self, self._consumer))
            else:
                tps = []
                found = await self._partitions_of_topics()
                for role in self.roles:
                    parts = self.partitions
                    if parts is None:
                        parts = found[settings.topic(role)]
                        if not parts:
                            raise TopicMissingError(
                                f"topic {settings.topic(role)} does not exist: run `trialog topics create`"
                            )
                    tps.extend(self._tp(role, p) for p in parts)
                self._consumer.assign(tps)
                if all(tp in self._next for tp in tps):  # a replaced consumer: on from where it was
                    for tp in tps:
                        self._consumer.seek(tp, self._next[tp])
                elif self.from_start:
                    for tp, offset in (await self._consumer.beginning_offsets(tps)).items():
                        self._consumer.seek(tp, offset)
                        self._next[tp] = offset
                else:
                    # Pin "the end" now, not at the first fetch: a reader started before
                    # a request is sent must see the answer.
                    for tp, offset in (await self._consumer.end_offsets(tps)).items():
                        self._consumer.seek(tp, offset)
                        self._next[tp] = offset
        except BaseException as exc:
            # Any way out of a half-started consumer (a refusal, a missing topic, the caller
            # cancelled) stops it: a client left open keeps its fetch and heartbeat tasks.
            await asyncio.shield(self._detach().stop())
            if isinstance(exc, KafkaError):
                raise TransportError(f"cannot consume from Kafka at {settings.bootstrap_servers}: {exc}") from exc
            raise

    async def _partitions_of_topics(self) -> dict[str, list[int]]:
        """The partitions of the topics this reader reads, asked of the cluster (an assign()-only
        consumer knows none yet). A topic created a moment ago may not be in every broker's
        metadata yet: asked again, briefly, before it counts as missing."""
        topics = [self.bus.settings.topic(role) for role in self.roles]
        for wait in ASK_AGAIN_S:
            found = await partitions_of(self._consumer._client, topics)  # noqa: SLF001
            if self.partitions is not None or all(found.values()) or wait is None:
                return found
            await asyncio.sleep(wait)

    def _detach(self) -> AIOKafkaConsumer:
        """The aiokafka consumer, no longer this one's (nor watched), for the caller to stop."""
        consumer, self._consumer = self._consumer, None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        return consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._detach().stop()

    async def poll(self, timeout_ms: int = 100, max_records: int | None = None) -> list[Record]:
        assert self._consumer is not None, "consumer not started"
        if self._unreadable:
            return await self._around_unreadable(timeout_ms)
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except Exception as exc:
            if self._found_unreadable(exc):
                return []
            coordination = self._consumer._coordinator._coordination_task if self.group else None  # noqa: SLF001
            if _stopped(coordination):
                await self._replace("its group coordination ended", _ended_with(coordination))
                return []
            if not isinstance(exc, KafkaError):  # not Kafka's answer: a background task of the client failed
                await self._replace("it failed", f"{type(exc).__name__}: {exc}")
                return []
            raise
        if not batches and _stopped(self._consumer._fetcher.error_future):  # noqa: SLF001
            await self._replace("it stopped fetching", _ended_with(self._consumer._fetcher.error_future))  # noqa: SLF001
        return self._records(batches)

    async def _replace(self, what: str, why: str) -> None:
        """A new aiokafka consumer for one whose background work failed (see the module's
        docstring). A group member hands its partitions back first, as in a rebalance (a
        service drains its outputs and commits), then joins again; a reader goes on from
        where it was."""
        log.warning(f"replacing the Kafka consumer: {what}", group=self.group, why=why)
        held = self._consumer.assignment()
        if self.group and self.on_revoked and held:
            await self.on_revoked({self.role_of(tp) for tp in held})
        old = self._detach()
        self._unreadable.clear()
        try:
            await asyncio.wait_for(old.stop(), STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the task's error again, raised by the close; or a close that hangs on it
            with contextlib.suppress(Exception):
                await old._client.close()  # noqa: SLF001 - what stop() did not reach
        # Its tasks often end while the broker is away: the new one may have to wait for it.
        deadline = time.monotonic() + RESTART_PATIENCE_S
        while True:
            try:
                return await self.start()
            except TransportError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("cannot start the new Kafka consumer yet; retrying", error=str(exc))
                await asyncio.sleep(1.0)

    def _records(self, batches) -> list[Record]:
        out: list[Record] = []
        for tp, messages in batches.items():
            out += as_records(self._topic_roles, tp, messages)
            if messages:
                self._next[tp] = messages[-1].offset + 1
        return out

    # --- batches that cannot be read ------------------------------------------------------------
    # aiokafka raises out of getmany() when it meets such a batch, dropping the records it had
    # already taken from other batches, and raises again at every fetch of that batch: a
    # service would stop, and restart into the same batch. So: note the batch, go back to
    # what was handed out, hand out the records before the batch one by one (aiokafka never
    # touches the batch then), and skip the batch as one Record with its problem.

    def _found_unreadable(self, exc: BaseException) -> bool:
        found = _unreadable_batch(exc)
        if found is None:
            return False
        tp, first, after = found
        reason = (
            f"unreadable batch of {self.bus.settings.topic(self._topic_roles[tp.topic])}[{tp.partition}] "
            f"at offsets {first}..{after - 1} ({type(exc).__name__}: {exc}); its records are skipped"
        )
        log.warning(
            "unreadable batch",
            topic=tp.topic,
            partition=tp.partition,
            first=first,
            last=after - 1,
            error=f"{type(exc).__name__}: {exc}",
        )
        previous = self._unreadable.get(tp)
        self._unreadable[tp] = (first, after, reason)
        if previous is not None and previous[0] == first and self._next.get(tp, first) < first:
            # Nothing readable is left before the batch (offsets missing there: compaction).
            self._next[tp] = first
        for other in self._consumer.assignment():
            if other in self._next:
                self._consumer.seek(other, self._next[other])
        return True

    async def _around_unreadable(self, timeout_ms: int) -> list[Record]:
        tp, (first, after, reason) = next(iter(self._unreadable.items()))
        if tp not in self._consumer.assignment():
            del self._unreadable[tp]
            return []
        if self._next.get(tp, first) < first:
            try:
                return self._records(await self._consumer.getmany(tp, timeout_ms=timeout_ms, max_records=1))
            except Exception as exc:
                if not self._found_unreadable(exc):
                    raise
                return []
        del self._unreadable[tp]
        self._consumer.seek(tp, after)
        self._next[tp] = after
        return [
            Record(
                self._topic_roles[tp.topic], tp.partition, first, None, None, (), 0, problem=reason, span=after - first
            )
        ]

    def seek(self, role: str, partition: int, offset: int) -> None:
        assert self._consumer is not None
        tp = self._tp(role, partition)
        self._consumer.seek(tp, offset)
        self._next[tp] = offset
        self._unreadable.pop(tp, None)

    def hold(self) -> bool:
        return self._consumer is not None and hold(self._consumer)

    def release(self) -> None:
        if self._consumer is not None:
            release(self._consumer)

    def skip_written(self, role: str, partition: int, first: int, after: int) -> bool:
        tp = self._tp(role, partition)
        # Not while a fetch is on its way: its answer brings the records back anyway, and moving
        # the position under it can leave aiokafka's fetcher idle for its timeout.
        if (
            self._consumer is None
            or self._unreadable
            or self._next.get(tp) != first
            or fetching(self._consumer)
            or tp not in self._consumer.assignment()
        ):
            return False
        self.seek(role, partition, after)  # drops what was fetched from ``first`` on; fetches from ``after``
        return True

    def unanswered_s(self) -> float:
        # The partition answered longest ago: a broker lost takes its partitions' answers with it
        # while the others' go on (and a node without a quorum still answers for those it led).
        if self._consumer is None:
            return 0.0
        oldest = None
        for tp in self._consumer.assignment():
            try:
                answered = self._consumer.last_poll_timestamp(tp)
            except AssertionError:  # unassigned meanwhile
                continue
            if answered is not None and (oldest is None or answered < oldest):
                oldest = answered
        return max(0.0, time.time() - oldest / 1000) if oldest is not None else 0.0

    def highwater(self, role: str, partition: int) -> int | None:
        return self._consumer.highwater(self._tp(role, partition)) if self._consumer is not None else None

    def position_hint(self, role: str, partition: int) -> int | None:
        assert self._consumer is not None
        try:
            return self._consumer._subscription.subscription.assignment.state_value(self._tp(role, partition)).position  # noqa: SLF001
        except Exception:  # not assigned, or position not yet fetched
            return None

    async def committed(self, role: str, partition: int) -> tuple[int | None, str]:
        assert self._consumer is not None
        tp = self._tp(role, partition)
        # AIOKafkaConsumer.committed() drops the metadata; the coordinator's answer keeps it.
        found = (await self._consumer._coordinator.fetch_committed_offsets([tp])).get(tp)
        if found is None or found.offset < 0:
            return None, ""
        return found.offset, found.metadata or ""

    async def commit(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        assert self._consumer is not None
        if not offsets or not self.group:
            return
        mine = self._consumer.assignment()
        payload = {
            self._tp(r, p): OffsetAndMetadata(o, mark)
            for (r, p), (o, mark) in offsets.items()
            if self._tp(r, p) in mine
        }
        if payload:
            try:
                await self._consumer.commit(payload)
            except (
                Exception
            ) as exc:  # a rebalance is under way, or the client failed: the next owner rebuilds from the last commit
                raise TransportError(f"offset commit failed: {type(exc).__name__}: {exc}") from exc

    async def end_offsets(self, parts):
        assert self._consumer is not None
        tps = {self._tp(r, p): (r, p) for r, p in parts}
        if not tps:
            return {}
        ends = await self._consumer.end_offsets(list(tps))
        return {tps[tp]: off for tp, off in ends.items()}

    def assignment(self) -> set[tuple[str, int]]:
        if self._consumer is None:
            return set()
        return {self.role_of(tp) for tp in self._consumer.assignment() if tp.topic in self._topic_roles}


def _unreadable_batch(exc: BaseException) -> tuple[TopicPartition, int, int] | None:
    """(partition, first offset, next offset) of the batch aiokafka failed to unpack, from
    the frame that was unpacking it; None when the error did not come from a batch."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_unpack_records" and "next_batch" in frame.f_locals and "tp" in frame.f_locals:
            batch = frame.f_locals["next_batch"]
            found = (frame.f_locals["tp"], batch.base_offset, batch.next_offset)
        tb = tb.tb_next
    if found is None and isinstance(exc, _UNREADABLE):
        log.error("unreadable records, but their batch could not be located", error=f"{type(exc).__name__}: {exc}")
    return found
