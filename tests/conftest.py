"""Shared fixtures: an in-memory bus for unit tests, the real broker for integration tests.

Integration tests need ``TRIALOG_BOOTSTRAP_SERVERS`` (``.ci/run`` starts a broker
with ``trialog broker start`` and exports it). Without it they FAIL with a
message rather than skip: a skipped integration test is not a passing one.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from trialog.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def memory_settings() -> Settings:
    return Settings.load({"partitions": 4}, environ={})


@pytest.fixture
def kafka_settings():
    """Settings for a real broker with a fresh topic prefix (isolates each test); the
    prefix's topics are deleted afterwards so that the broker does not fill up."""
    servers = os.environ.get("TRIALOG_BOOTSTRAP_SERVERS")
    if not servers:
        pytest.fail(
            "integration tests need a broker: run `export TRIALOG_BOOTSTRAP_SERVERS=$(trialog broker start)` first"
        )
    settings = Settings.load(
        {"bootstrap_servers": servers, "topic_prefix": f"test-{uuid.uuid4().hex[:8]}.", "partitions": 4}, environ={}
    )
    yield settings
    from trialog.bus.kafka import KafkaBus

    asyncio.run(KafkaBus(settings).delete_topics())


def free_ports(count: int) -> list[int]:
    """Ports free right now, all different, out of every process's way (see free_port)."""
    from trialog.tools.campaign import free_port

    return [free_port() for _ in range(count)]


async def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it is truthy (returns its value) or fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
