"""The benchmark's raw tick shape that writes without fetching back (``bench/topology.py --lean``),
on a real broker: what the shape's floor of a tick assumes — a role's own records, once
acknowledged and next in the log, are skipped rather than fetched back — must happen, or the
floor would be the shape that reads everything again."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench import floor, topology

pytestmark = pytest.mark.integration


async def test_a_lean_role_skips_its_own_records_and_reads_the_next_writer(kafka_settings):
    topic = kafka_settings.topic("floor.lean")
    await floor.create_topic(kafka_settings, topic, 1)
    consumer, producer = floor.consumer(kafka_settings), floor.producer(kafka_settings)
    other = floor.producer(kafka_settings)  # another writer of the topic
    for client in (consumer, producer, other):
        await client.start()
    try:
        tp = TopicPartition(topic, 0)
        await floor._at_end(consumer, topic, 1)  # noqa: SLF001
        read: list[bytes] = []
        skipped = []
        for i in range(10):
            theirs = f"theirs-{i}".encode()
            await (await other.send(topic, theirs, key=b"t"))
            while theirs not in read:
                read += [m.value for m in (await consumer.getmany(timeout_ms=10_000)).get(tp, [])]
            # Answered at once, as a role does after a poll. Skipped only when no fetch is on its
            # way and they are the next records: not every round.
            before = await consumer.position(tp)
            own = [(b"t", f"own-{i}-{n}".encode(), []) for n in range(2)]
            await topology._send_skipping(consumer, producer, topic, own)  # noqa: SLF001
            if await consumer.position(tp) == before + 2:
                skipped.append(i)
        await (await other.send(topic, b"last", key=b"t"))
        while b"last" not in read:
            read += [m.value for m in (await consumer.getmany(timeout_ms=10_000)).get(tp, [])]

        assert skipped, "a lean role never skipped its own records"
        for i in range(10):
            assert read.count(f"theirs-{i}".encode()) == 1
            fetched_back = {f"own-{i}-{n}".encode() for n in range(2)} & set(read)
            assert not fetched_back if i in skipped else len(fetched_back) == 2, (i, skipped, read)
    finally:
        for client in (consumer, producer, other):
            await client.stop()
        admin = AIOKafkaAdminClient(**kafka_settings.kafka_client_options())
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
