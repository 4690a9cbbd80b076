"""The floors: what raw aiokafka does on the same broker, in the same run, with the
client settings of :mod:`trialog.bus.kafka` and :mod:`trialog.bus.kafka_consumer` — the best Trialog
could hope for."""

from __future__ import annotations

import asyncio
import io
import time

import fastavro
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from trialog.bus.base import Record
from trialog.bus.kafka_consumer import FETCH_MAX_WAIT_MS
from trialog.protocol.codec import HEADER_SIZE, SchemaStore
from trialog.settings import Settings


def producer(settings: Settings) -> AIOKafkaProducer:
    # Same as KafkaBus.start: the floor must pay what Trialog pays (idempotence, acks=all).
    return AIOKafkaProducer(
        **settings.kafka_client_options(),
        enable_idempotence=True,
        acks="all",
        linger_ms=0,
        max_request_size=8 * 1024 * 1024,
    )


def consumer(settings: Settings) -> AIOKafkaConsumer:
    # Same as KafkaConsumer.start, without a group (assignment is not what is measured).
    return AIOKafkaConsumer(
        **settings.kafka_client_options(),
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        fetch_min_bytes=1,
    )


async def create_topic(settings: Settings, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(**settings.kafka_client_options())
    await admin.start()
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        await admin.create_topics([NewTopic(name, partitions, settings.replicas(brokers))])
    finally:
        await admin.close()


async def _at_end(c: AIOKafkaConsumer, topic: str, partitions: int) -> list[TopicPartition]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    # As KafkaConsumer.start does: an assign()-only consumer has no metadata for a new topic.
    await c._client.fetch_all_metadata()
    c.assign(tps)
    for tp, offset in (await c.end_offsets(tps)).items():
        c.seek(tp, offset)
    return tps


async def two_hop(settings: Settings, rounds: int, value: bytes) -> list[float]:
    """ms per round trip: A produces to ping, B consumes it and produces to pong, A consumes it."""
    ping, pong = settings.topic("floor.ping"), settings.topic("floor.pong")
    await create_topic(settings, ping, 1)
    await create_topic(settings, pong, 1)
    pa, pb, ca, cb = producer(settings), producer(settings), consumer(settings), consumer(settings)
    for client in (pa, pb, ca, cb):
        await client.start()
    await _at_end(ca, pong, 1)
    await _at_end(cb, ping, 1)

    async def echo() -> None:
        while True:
            for messages in (await cb.getmany(timeout_ms=200)).values():
                for m in messages:
                    await pb.send_and_wait(pong, m.value, key=m.key, headers=list(m.headers))

    echoer = asyncio.create_task(echo())
    out = []
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            await pa.send_and_wait(ping, value, key=b"floor", headers=[("kind", b"ping")])
            got = 0
            while not got:
                if echoer.done():  # surface its failure rather than wait forever
                    echoer.result()
                got = sum(len(m) for m in (await ca.getmany(timeout_ms=200)).values())
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        echoer.cancel()
        await asyncio.gather(echoer, return_exceptions=True)
        for client in (pa, pb, ca, cb):
            await client.stop()
    return out


async def produce_consume(settings: Settings, name: str, records: list[Record], partitions: int) -> float:
    """Seconds to produce these records (same keys, values, headers) and consume them all back."""
    topic = settings.topic(name)
    await create_topic(settings, topic, partitions)
    p, c = producer(settings), consumer(settings)
    await p.start()
    await c.start()
    await _at_end(c, topic, partitions)
    try:
        t0 = time.perf_counter()

        async def consume() -> None:
            seen = 0
            while seen < len(records):
                seen += sum(len(m) for m in (await c.getmany(timeout_ms=200)).values())

        reader = asyncio.create_task(consume())
        futures = [await p.send(topic, r.value, key=r.key, headers=list(r.headers)) for r in records]
        await asyncio.gather(*futures)
        await asyncio.wait_for(reader, 120)
        return time.perf_counter() - t0
    finally:
        await p.stop()
        await c.stop()


async def warm_broker(settings: Settings, seconds: float) -> int:
    """Raw produce+consume and round trips, on topics of their own, for ``seconds``; the rounds run.

    A fresh broker's JVM compiles its hot paths during its first minutes of load, and a
    benchmark started meanwhile charged that to whichever row ran first
    (docs/performance.md#a-fresh-brokers-first-minutes-the-benchmark-warms-it-2026-12-02).
    The records are shaped like a tick's: 64 trial keys, Trialog's headers, a tag's 32 bytes.
    Every round reuses the same topics (each read from its end), so the broker's metadata
    does not grow with the minutes."""
    keys = [f"warm-{k:02d}".encode() for k in range(64)]
    headers = (("kind", b"observation"), ("tick", b"1"), ("sender", b"environment"), ("mac.environment", bytes(32)))
    records = [Record("events", 0, i, keys[i % 64], bytes(96), headers, 0) for i in range(20_000)]
    deadline, rounds = time.monotonic() + seconds, 0
    while True:
        await produce_consume(settings, "floor.warm", records, 1)
        await two_hop(settings, 200, bytes(96))
        rounds += 1
        if time.monotonic() >= deadline:
            return rounds


async def consume_decode(settings: Settings, store: SchemaStore, partitions: int) -> tuple[float, int]:
    """Seconds to read the whole events topic and Avro-decode every value and nested payload with
    fastavro directly (writer schema by fingerprint, no resolution, no Trialog types)."""
    topic = settings.topic("events")
    parsed = {fp: s.parsed for fp, s in store._by_fingerprint.items()}
    c = consumer(settings)
    await c.start()
    try:
        t0 = time.perf_counter()
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)
        left = {tp for tp, end in ends.items() if end > 0}
        count = 0
        while left:
            for tp, messages in (await c.getmany(timeout_ms=500)).items():
                for m in messages:
                    buf = io.BytesIO(m.value)
                    buf.seek(HEADER_SIZE)
                    value = fastavro.schemaless_reader(buf, parsed[m.value[2:HEADER_SIZE]])
                    payload = value.get("payload") if isinstance(value, dict) else None
                    if isinstance(payload, bytes) and payload[:2] == b"\xc3\x01":
                        inner = io.BytesIO(payload)
                        inner.seek(HEADER_SIZE)
                        fastavro.schemaless_reader(inner, parsed[payload[2:HEADER_SIZE]])
                    count += 1
                    if m.offset + 1 >= ends[tp]:
                        left.discard(tp)
        return time.perf_counter() - t0, count
    finally:
        await c.stop()
