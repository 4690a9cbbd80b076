"""The Kafka edge on a real cluster, through aiokafka.

Client settings are chosen on purpose (see ``docs/performance.md`` for the
measurements behind them):

- producer: ``enable_idempotence=True`` and ``acks="all"`` (I-8: a retried send
  never duplicates or reorders), ``linger_ms=0`` because a tick waits on every
  record — batching happens anyway when several records are in flight;
- consumer: ``fetch_min_bytes=1`` with a long ``fetch_max_wait_ms``: the broker
  answers a fetch as soon as one byte is there, so the wait costs no latency and
  saves idle polling; offsets are committed by the services themselves (never
  automatically) because what is safe to commit is "the start of the oldest live
  trial", not "what was read";
- group assignment: ``RangePartitionAssignor``, which gives one member the same
  partition numbers of every topic it reads — the orchestrator reads partition p
  of ``control`` and of ``events`` together (I-2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.structs import OffsetAndMetadata

from trialog.bus.base import (
    BATCH_WAIT_MS,
    AssignmentCallback,
    Bus,
    Consumer,
    Delivered,
    Record,
)
from trialog.errors import TransportError
from trialog.topics import CONTROL, EVENTS, TRIALS, plan

KEYED = frozenset({CONTROL, EVENTS, TRIALS})  # partitioned by trial ID, same count (I-2)

FETCH_MAX_WAIT_MS = 500
BATCH_MIN_BYTES = 256 * 1024


class KafkaBus(Bus):
    """Producer, consumers and admin client against ``settings.bootstrap_servers``."""

    _producer: AIOKafkaProducer | None = None
    _users = 0  # start/stop pairs: the producer closes when its last user stops

    async def start(self) -> None:
        self._users += 1
        if self._producer is not None:
            return
        self._producer = AIOKafkaProducer(
            **self.settings.kafka_client_options(),
            client_id=f"{self.settings.client_id}-producer",
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            max_request_size=8 * 1024 * 1024,
        )
        try:
            await self._producer.start()
            await self._learn_partitions()
        except KafkaError as exc:
            self._producer = None
            self._users -= 1
            raise TransportError(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {exc}") from exc

    async def _learn_partitions(self) -> None:
        """Trust the cluster over the settings for the partition count of events (I-2)."""
        assert self._producer is not None
        cluster = await self._producer.client.fetch_all_metadata()
        found = cluster.partitions_for_topic(self.settings.topic(EVENTS))
        if found:
            self.partitions = len(found)
            self._partition_cache.clear()

    async def stop(self) -> None:
        self._users = max(0, self._users - 1)
        if self._producer is not None and self._users == 0:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def send_many(self, items):
        if self._producer is None:
            raise TransportError("the bus is not started: use `async with bus:` or `await bus.start()`")
        futures = []
        roles = []
        for role, key, value, headers in items:
            # Keyed roles share the partition count of events: give the partition we already
            # know rather than have the producer hash the key again.
            partition = self.partition_of(key.decode()) if role in KEYED and key else None
            futures.append(await self._producer.send(self.settings.topic(role), value=value, key=key, headers=headers, partition=partition))
            roles.append(role)
        try:
            metas = await asyncio.gather(*futures)
        except KafkaError as exc:
            raise TransportError(f"Kafka refused a record: {exc}") from exc
        return [Delivered(role, m.partition, m.offset) for role, m in zip(roles, metas)]

    def consumer(self, roles, *, group=None, on_assigned=None, on_revoked=None, partitions=None, from_start=True, batched=False):
        return KafkaConsumer(self, roles, group, on_assigned, on_revoked, partitions, from_start, batched)

    # --- admin -----------------------------------------------------------------------------------
    async def _admin(self) -> AIOKafkaAdminClient:
        admin = AIOKafkaAdminClient(**self.settings.kafka_client_options(), client_id=f"{self.settings.client_id}-admin")
        try:
            await admin.start()
        except KafkaError as exc:
            raise TransportError(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {exc}") from exc
        return admin

    async def create_topics(self) -> list[str]:
        admin = await self._admin()
        try:
            existing = set(await admin.list_topics())
            wanted = plan(self.settings)
            missing = [t for t in wanted if t.name not in existing]
            created = []
            for t in missing:
                try:
                    await admin.create_topics([NewTopic(t.name, t.partitions, t.replication_factor, topic_configs=t.configs)])
                    created.append(t.name)
                except TopicAlreadyExistsError:  # created meanwhile by another instance: fine
                    pass
            if self._producer is not None:
                await self._learn_partitions()
            return created
        finally:
            await admin.close()

    async def describe_topics(self) -> dict[str, dict]:
        admin = await self._admin()
        try:
            names = [t.name for t in plan(self.settings)]
            described = await admin.describe_topics(names)
            out: dict[str, dict] = {}
            for topic in described:
                if topic.get("error_code", 0):
                    continue
                out[topic["topic"]] = {"partitions": len(topic["partitions"]), "configs": {}}
            resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in out]
            for response in await admin.describe_configs(resources):
                for resource in response.resources:
                    _err, _msg, _type, name, entries = resource[:5]
                    out[name]["configs"] = {entry[0]: entry[1] for entry in entries}
            return out
        finally:
            await admin.close()


class _Listener(ConsumerRebalanceListener):
    def __init__(self, consumer: KafkaConsumer):
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked):
        if self.consumer.on_revoked and revoked:
            await self.consumer.on_revoked({self.consumer.role_of(tp) for tp in revoked})

    async def on_partitions_assigned(self, assigned):
        if self.consumer.on_assigned and assigned:
            await self.consumer.on_assigned({self.consumer.role_of(tp) for tp in assigned})


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
    ):
        self.bus = bus
        self.roles = list(roles)
        self.group = bus.settings.group(group) if group else None
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.partitions = None if partitions is None else list(partitions)
        self.from_start = from_start
        self.batched = batched
        self._topic_roles = {bus.settings.topic(r): r for r in self.roles}
        self._consumer: AIOKafkaConsumer | None = None

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
            enable_auto_commit=False,
            auto_offset_reset="earliest" if self.from_start else "latest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            # Batched readers let the broker gather records: each fetch response costs
            # aiokafka ~0.5 ms of CPU, which a reader off the tick path need not pay per tick.
            fetch_max_wait_ms=BATCH_WAIT_MS if self.batched else FETCH_MAX_WAIT_MS,
            fetch_min_bytes=BATCH_MIN_BYTES if self.batched else 1,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            metadata_max_age_ms=5_000,
        )
        try:
            await self._consumer.start()
            if self.group:
                self._consumer.subscribe(list(self._topic_roles), listener=_Listener(self))
            else:
                tps = []
                # A fresh metadata snapshot: an assign()-only consumer has none for unsubscribed topics.
                cluster = await self._consumer._client.fetch_all_metadata()  # noqa: SLF001
                for role in self.roles:
                    parts = self.partitions
                    if parts is None:
                        parts = sorted(cluster.partitions_for_topic(settings.topic(role)) or ())
                        if not parts:
                            raise TransportError(f"topic {settings.topic(role)} does not exist: run `trialog topics create`")
                    tps.extend(self._tp(role, p) for p in parts)
                self._consumer.assign(tps)
                if self.from_start:
                    await self._consumer.seek_to_beginning(*tps)
                else:
                    # Pin "the end" now, not at the first fetch: a reader started before
                    # a request is sent must see the answer.
                    for tp, offset in (await self._consumer.end_offsets(tps)).items():
                        self._consumer.seek(tp, offset)
        except (KafkaError, TransportError) as exc:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()
            if isinstance(exc, TransportError):
                raise
            raise TransportError(f"cannot consume from Kafka at {settings.bootstrap_servers}: {exc}") from exc

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    async def poll(self, timeout_ms: int = 100, max_records: int | None = None) -> list[Record]:
        assert self._consumer is not None, "consumer not started"
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        out: list[Record] = []
        for tp, messages in batches.items():
            role = self._topic_roles[tp.topic]
            for m in messages:
                out.append(Record(role, tp.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp))
        return out

    def seek(self, role: str, partition: int, offset: int) -> None:
        assert self._consumer is not None
        self._consumer.seek(self._tp(role, partition), offset)

    def highwater(self, role: str, partition: int) -> int | None:
        return self._consumer.highwater(self._tp(role, partition)) if self._consumer is not None else None

    def position_hint(self, role: str, partition: int) -> int | None:
        assert self._consumer is not None
        try:
            return self._consumer._subscription.subscription.assignment.state_value(self._tp(role, partition)).position  # noqa: SLF001
        except Exception:  # not assigned, or position not yet fetched
            return None

    async def committed(self, role: str, partition: int) -> int | None:
        assert self._consumer is not None
        return await self._consumer.committed(self._tp(role, partition))

    async def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        assert self._consumer is not None
        if not offsets or not self.group:
            return
        mine = self._consumer.assignment()
        payload = {self._tp(r, p): OffsetAndMetadata(o, "") for (r, p), o in offsets.items() if self._tp(r, p) in mine}
        if payload:
            try:
                await self._consumer.commit(payload)
            except KafkaError as exc:  # a rebalance is under way; the next owner rebuilds from the last commit
                raise TransportError(f"offset commit failed: {exc}") from exc

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
