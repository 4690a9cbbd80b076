"""The local broker for real: a Kafka JVM on ports and in a data dir of the test's own.

These tests leave the shared broker (127.0.0.1:9092) alone and reuse the default jar
cache, so only the very first run on a machine fetches Kafka with Maven. Each start
takes some seconds; every wait is bounded so a hung broker fails the test, not CI.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.conftest import free_ports
from trialog.broker import process
from trialog.broker.config import BrokerConfig
from trialog.errors import BrokerError

pytestmark = pytest.mark.integration

# Generous: the first start on a machine also fetches Kafka (≈30 s) before the JVM starts.
START_TIMEOUT_S = 120.0
CLIENT_TIMEOUT_S = 60.0


@pytest.fixture
def config(tmp_path):
    port, controller_port = free_ports(2)
    config = BrokerConfig.from_env(data_dir=tmp_path / "broker", port=port, controller_port=controller_port)
    yield config
    process.stop(config)


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    found: list[tuple[bytes, bytes]] = []
    try:
        while len(found) < count:
            batches = await consumer.getmany(timeout_ms=1000)
            found += [(record.key, record.value) for batch in batches.values() for record in batch]
    finally:
        await consumer.stop()
    return found


async def test_records_survive_stop_and_start(config):
    records = [(b"trial-1", b"tick 0"), (b"trial-1", b"tick 1"), (b"trial-2", b"tick 0")]

    bootstrap = await asyncio.to_thread(process.start, config, timeout=START_TIMEOUT_S)
    assert bootstrap == config.bootstrap
    running = process.status(config)
    assert running.running and running.bootstrap == bootstrap and running.kafka_version == config.kafka_version
    # A second start finds the running broker and only reports its address.
    assert await asyncio.to_thread(process.start, config, timeout=START_TIMEOUT_S) == bootstrap
    assert process.status(config).pid == running.pid

    await asyncio.wait_for(_produce(bootstrap, "datalog", records), CLIENT_TIMEOUT_S)

    assert await asyncio.to_thread(process.stop, config) is True
    assert not process.status(config).running
    assert not config.pid_file.exists()
    assert await asyncio.to_thread(process.stop, config) is False

    assert await asyncio.to_thread(process.start, config, timeout=START_TIMEOUT_S) == bootstrap
    assert process.status(config).pid != running.pid
    assert await asyncio.wait_for(_consume(bootstrap, "datalog", len(records)), CLIENT_TIMEOUT_S) == records


def test_taken_port_fails_with_a_clear_error(config):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", config.port))
        squatter.listen()
        with pytest.raises(BrokerError, match=f"port {config.port} .*already in use"):
            process.start(config, timeout=START_TIMEOUT_S)
    assert not process.status(config).running


def test_broker_that_exits_while_starting_shows_its_log(config, monkeypatch):
    # Unformatted storage makes the real Kafka refuse to start and exit.
    monkeypatch.setattr(process, "_format_storage", lambda *args: None)
    with pytest.raises(BrokerError, match="(?s)exited while starting.*meta.properties"):
        process.start(config, timeout=START_TIMEOUT_S)
    assert not config.pid_file.exists()
