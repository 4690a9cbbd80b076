"""The Kafka edge on a real cluster, through aiokafka: :class:`KafkaBus`, its producer and
the topics' admin. Its consumers are :mod:`trialog.bus.kafka_consumer`; the watch over
aiokafka's background tasks is :mod:`trialog.bus.kafka_tasks`.

Client settings are chosen on purpose (see ``docs/performance.md`` for the
measurements behind them; the consumer's are explained in :mod:`trialog.bus.kafka_consumer`):

- producer: ``enable_idempotence=True`` and ``acks="all"`` (I-8: a retried send
  never duplicates or reorders), ``linger_ms=0`` because a tick waits on every
  record — batching happens anyway when several records are in flight.

One bad record must not stop a service (docs/reliability.md): a record larger than its
topic takes is refused *before* the producer sees it (:meth:`Bus.oversized`); should the
broker still refuse one for its size, the producer is replaced, because an idempotent
producer whose batch failed answers every later send to that partition with
``OutOfOrderSequenceNumber``. A producer whose sender task ended is replaced too
(:meth:`KafkaBus.send_many`, see :mod:`trialog.bus.kafka_tasks`).
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordTooLargeError,
    TopicAlreadyExistsError,
)

from trialog.bus.base import BATCH_WAIT_MS, RECORD_OVERHEAD, Bus, Delivered
from trialog.bus.kafka_consumer import ASK_AGAIN_S, KafkaConsumer, partitions_of
from trialog.bus.kafka_tasks import _ended_with, _stopped, _watch_metadata
from trialog.errors import RecordsTooLarge, TransportError
from trialog.protocol.topics import CONTROL, EVENTS, RECORD_LIMIT, TRIALS, plan
from trialog.telemetry.logs import get_logger

TOPICS_KNOWN_WITHIN_S = 30.0  # topics created and still unknown to the cluster after this: an error
KEYED = frozenset({CONTROL, EVENTS, TRIALS})  # partitioned by trial ID, same count (I-2)
BATCH_BYTES = RECORD_LIMIT // 2  # the most a producer's batch holds (see _new_producer)

log = get_logger(__name__)

# The broker refused a record for its size, or the idempotent producer lost its
# sequence after such a refusal: the producer must be replaced to send again.
_POISONING = (MessageSizeTooLargeError, RecordTooLargeError, OutOfOrderSequenceNumber)


class KafkaBus(Bus):
    """Producer, consumers and admin client against ``settings.bootstrap_servers``."""

    _producer: AIOKafkaProducer | None = None
    _users = 0  # start/stop pairs: the producer closes when its last user stops
    _replacing: asyncio.Lock | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._watches: dict[AIOKafkaProducer, asyncio.Task] = {}  # each producer's metadata watch

    async def start(self) -> None:
        self._users += 1
        if self._producer is not None:
            return
        try:
            self._producer = await self._new_producer()
            await self._learn_partitions()
        except KafkaError as exc:
            self._producer = None
            self._users -= 1
            raise TransportError(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {exc}") from exc

    async def _new_producer(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            **self.settings.kafka_client_options(),
            client_id=f"{self.settings.client_id}-producer",
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            # A partition's batch may hold a whole flush: a request carries one batch a partition,
            # and the next waits for its answer, so a flush of 32 Overcooked observations (3.6 KB
            # each) went as eight requests, one after the other, in aiokafka's 16 KB batches.
            # Below every topic's record limit (RECORD_LIMIT), which a batch must fit as a whole.
            max_batch_size=BATCH_BYTES,
            # The largest record any of our topics takes: larger ones are refused before
            # they get here (Bus.oversized), with the topic's own limit in the message.
            max_request_size=max(self.record_limits.values()) + RECORD_OVERHEAD,
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self._watches[producer] = asyncio.create_task(_watch_metadata(producer.client))
        return producer

    async def _stop_producer(self, producer: AIOKafkaProducer) -> None:
        watch = self._watches.pop(producer, None)
        if watch is not None:
            watch.cancel()
        await producer.stop()

    async def _replace_producer(self, broken: AIOKafkaProducer, why: str) -> None:
        """A fresh producer (a new producer ID, fresh sequence numbers) for the next sends."""
        self._replacing = self._replacing or asyncio.Lock()
        async with self._replacing:
            if self._producer is not broken:
                return  # replaced meanwhile by another send
            log.warning("replacing the Kafka producer", why=why)
            self._producer = await self._new_producer()
        await self._stop_producer(broken)

    async def _learn_partitions(self) -> None:
        """Trust the cluster over the settings for the partition count of events (I-2)."""
        assert self._producer is not None
        topic = self.settings.topic(EVENTS)
        found = (await partitions_of(self._producer.client, [topic]))[topic]
        if found:
            self.partitions = len(found)
            self._partition_cache.clear()

    async def stop(self) -> None:
        self._users = max(0, self._users - 1)
        if self._producer is not None and self._users == 0:
            producer, self._producer = self._producer, None
            await self._stop_producer(producer)

    async def _submit(self, producer: AIOKafkaProducer, items, refused: dict[int, str], stamp: int) -> list:
        """Hand the records to the producer: (future, indices) per batch, in order. aiokafka's
        per-record ``send`` costs a coroutine, a metadata check and a future per record
        (docs/performance.md); so a partition's records go as batches built here, one future each,
        answered with the offset of their first record (the others follow it). Not where a batch
        already waits its turn for the partition (another task's): a batch handed over then would
        wait for it to go, and each task writing to that partition in turn would wait once more;
        records given one by one join the waiting batch. Nor the records of other roles (no
        partition of ours)."""
        waiting = producer._message_accumulator._batches  # noqa: SLF001 - partition -> its batches not yet sent
        batches: dict[tuple[str, int], tuple] = {}  # (topic, partition) -> (builder, indices)
        sent: list = []
        for i, (role, key, value, headers) in enumerate(items):
            if i in refused:
                continue
            topic = self.settings.topic(role)
            # Keyed roles share the partition count of events: the partition we already know,
            # rather than have the producer hash the key again.
            partition = self.partition_of(key.decode()) if role in KEYED and key else None
            where = (topic, partition)
            builder, indices = batches.get(where) or (None, None)
            if builder is None and (partition is None or waiting.get(TopicPartition(topic, partition))):
                one = await producer.send(
                    topic, value=value, key=key, headers=headers, partition=partition, timestamp_ms=stamp
                )
                sent.append((one, [i]))
                continue
            if builder is None or builder.append(key=key, value=value, timestamp=stamp, headers=headers) is None:
                if builder is not None:  # full: it goes, and a new one starts
                    sent.append((await producer.send_batch(builder, topic, partition=partition), indices))
                builder, indices = producer.create_batch(), []
                # An empty batch takes a record of any size (larger ones were refused above).
                builder.append(key=key, value=value, timestamp=stamp, headers=headers)
                batches[where] = (builder, indices)
            indices.append(i)
        for (topic, partition), (builder, indices) in batches.items():
            sent.append((await producer.send_batch(builder, topic, partition=partition), indices))
        return sent

    async def send_many(self, items, *, retry: bool = True):
        producer = self._producer
        if producer is None:
            raise TransportError("the bus is not started: use `async with bus:` or `await bus.start()`")
        if _stopped(producer._sender.sender_task):  # noqa: SLF001
            # Records given to it now would wait forever. Checked before the sends: these do
            # not suspend while the topic's metadata is known and the batches waiting their turn
            # have room (else at most for the producer's request timeout), so the sender cannot
            # stop between here and the last send, and its end fails every record it holds.
            await self._replace_producer(producer, why=_ended_with(producer._sender.sender_task))  # noqa: SLF001
            producer = self._producer
        refused = self.oversized(items)
        # The records' timestamp, given rather than left to the producer: aiokafka answers every
        # record of a batch with the timestamp of the batch's first, which may be another call's.
        stamp = int(time.time() * 1000)
        try:
            sent = await self._submit(producer, items, refused, stamp)
        except KafkaError as exc:
            raise TransportError(f"Kafka refused a record: {exc}") from exc
        results = await asyncio.gather(*(future for future, _ in sent), return_exceptions=True)
        delivered: dict[int, Delivered] = {}
        failed: dict[int, BaseException] = {}
        for (_, indices), result in zip(sent, results):  # a batch's answer is each of its records'
            if isinstance(result, (MessageSizeTooLargeError, RecordTooLargeError)):
                for i in indices:
                    refused[i] = (
                        f"the broker refused a record of trial {items[i][1].decode(errors='replace')} "
                        f"for its size ({result})"
                    )
            elif isinstance(result, BaseException):
                failed.update(dict.fromkeys(indices, result))
            else:
                # Create time (type 0): the log has ours; log append time: the broker's, in the answer.
                at = stamp if result.timestamp_type == 0 else result.timestamp
                for position, i in enumerate(indices):
                    delivered[i] = Delivered(items[i][0], result.partition, result.offset + position, at)
        if any(isinstance(r, _POISONING) for r in results):
            await self._replace_producer(producer, why="a record was refused: its sequence numbers are spent")
            if failed and retry:  # sent behind the refused record: once more, in order, on the fresh producer
                again = sorted(failed)
                try:
                    for i, d in zip(again, await self.send_many([items[i] for i in again], retry=False)):
                        delivered[i] = d
                    failed = {}
                except RecordsTooLarge as exc:
                    refused.update({again[j]: why for j, why in exc.refused.items()})
                    delivered.update({again[j]: d for j, d in exc.delivered.items()})
                    failed = {}
        if failed:
            failure = failed[min(failed)]
            if not isinstance(failure, KafkaError):
                raise failure
            raise TransportError(f"Kafka refused a record: {failure}") from failure
        return self.refuse(refused, delivered, items)

    def consumer(
        self,
        roles,
        *,
        group=None,
        on_assigned=None,
        on_revoked=None,
        partitions=None,
        from_start=True,
        batched=False,
        batch_wait_ms=BATCH_WAIT_MS,
    ):
        return KafkaConsumer(
            self, roles, group, on_assigned, on_revoked, partitions, from_start, batched, batch_wait_ms
        )

    # --- admin -----------------------------------------------------------------------------------
    async def _admin(self) -> AIOKafkaAdminClient:
        admin = AIOKafkaAdminClient(
            **self.settings.kafka_client_options(), client_id=f"{self.settings.client_id}-admin"
        )
        try:
            await admin.start()
        except KafkaError as exc:
            raise TransportError(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {exc}") from exc
        return admin

    async def create_topics(self, local_instances: int | None = None) -> list[str]:
        admin = await self._admin()
        try:
            existing = set(await admin.list_topics())
            brokers = len((await admin.describe_cluster())["brokers"])
            wanted = plan(self.settings, brokers, local_instances)
            missing = [t for t in wanted if t.name not in existing]
            if missing and wanted[0].replication_factor < min(3, brokers):
                log.warning(
                    "creating topics with fewer copies than the cluster could keep: losing a broker loses records",
                    replication_factor=wanted[0].replication_factor,
                    brokers=brokers,
                    setting="TRIALOG_REPLICATION_FACTOR (0: by cluster size)",
                )
            created = []
            for t in missing:
                try:
                    await admin.create_topics(
                        [NewTopic(t.name, t.partitions, t.replication_factor, topic_configs=t.configs)]
                    )
                    created.append(t.name)
                except TopicAlreadyExistsError:  # created meanwhile by another instance: fine
                    pass
            await self._until_known(admin, {t.name: t.partitions for t in missing if t.name in created})
            events = self.settings.topic(EVENTS)
            if local_instances and events not in created:  # made before, perhaps by a smaller run
                have = len((await partitions_of(admin._client, [events]))[events])  # noqa: SLF001
                if have < local_instances:
                    log.warning(
                        "fewer partitions than this run has instances of a service: the others stand idle",
                        topic=events,
                        partitions=have,
                        instances=local_instances,
                        fix="a fresh TRIALOG_TOPIC_PREFIX with TRIALOG_PARTITIONS at the instances",
                    )
            if self._producer is not None:
                await self._learn_partitions()
            return created
        finally:
            await admin.close()

    async def _until_known(self, admin: AIOKafkaAdminClient, wanted: dict[str, int]) -> None:
        """Return once the cluster answers with every partition of the topics just created: a
        broker started a moment ago took seconds to know its first topics, and a reader started
        meanwhile would find them missing (readers ask again only briefly: ASK_AGAIN_S)."""
        deadline = time.monotonic() + TOPICS_KNOWN_WITHIN_S
        while wanted:
            found = await partitions_of(admin._client, list(wanted))  # noqa: SLF001
            wanted = {name: n for name, n in wanted.items() if len(found[name]) < n}
            if not wanted:
                return
            if time.monotonic() > deadline:
                raise TransportError(
                    f"topics created but not known to the cluster after {TOPICS_KNOWN_WITHIN_S:.0f} s: "
                    f"{', '.join(sorted(wanted))}"
                )
            await asyncio.sleep(0.1)

    async def describe_topics(self) -> dict[str, dict]:
        admin = await self._admin()
        try:
            names = [t.name for t in plan(self.settings)]
            described = await admin.describe_topics(names)
            out: dict[str, dict] = {}
            for topic in described:
                if topic.get("error_code", 0):
                    continue
                partitions = topic["partitions"]
                out[topic["topic"]] = {
                    "partitions": len(partitions),
                    # The fewest of any partition: what the topic can lose is what its worst partition can.
                    "replication_factor": min((len(p["replicas"]) for p in partitions), default=0),
                    "in_sync_replicas": min((len(p["isr"]) for p in partitions), default=0),
                    "configs": {},
                }
            # A topic created a moment ago may not be known yet to the node that answers (a
            # cluster): asked again, briefly, as for its metadata.
            missing = list(out)
            for wait in ASK_AGAIN_S:
                resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in missing]
                for response in await admin.describe_configs(resources):
                    for resource in response.resources:
                        error, _msg, _type, name, entries = resource[:5]
                        if not error:
                            out[name]["configs"] = {entry[0]: entry[1] for entry in entries}
                            missing.remove(name)
                if not missing or wait is None:
                    return out
                await asyncio.sleep(wait)
            return out
        finally:
            await admin.close()

    async def delete_topics(self) -> list[str]:
        admin = await self._admin()
        try:
            # Ask for every topic of the plan: a listing can lag a creation just made.
            response = await admin.delete_topics([t.name for t in plan(self.settings)])
            return [name for name, error_code, *_ in response.topic_error_codes if error_code == 0]
        finally:
            await admin.close()
