"""The command line's answers on a real broker when there is nothing to answer."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from trialog.bus.kafka import KafkaBus

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def trialog(settings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    flags = [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
        "--partitions",
        "4",
    ]
    return subprocess.run(
        [sys.executable, "-m", "trialog.cli", *args, *flags], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_terminating_an_unknown_trial_fails(kafka_settings):
    asyncio.run(KafkaBus(kafka_settings).create_topics())
    out = trialog(kafka_settings, "trial", "terminate", "no-such-trial")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no trial no-such-trial" in out.stderr and "Traceback" not in out.stderr


def test_starting_a_trial_without_an_orchestrator_says_so(kafka_settings):
    asyncio.run(KafkaBus(kafka_settings).create_topics())
    out = trialog(kafka_settings, "trial", "start", "rps", "--start-timeout", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no orchestrator answered" in out.stderr and "Traceback" not in out.stderr


def test_topics_are_created_with_the_record_limit_the_producers_check(kafka_settings):
    created = trialog(kafka_settings, "topics", "create")
    assert created.returncode == 0, created.stderr
    described = trialog(kafka_settings, "topics", "describe")
    lines = {line.split()[0]: line for line in described.stdout.splitlines()}
    assert "max.message.bytes=1048576" in lines[kafka_settings.topic("events")]
    assert "max.message.bytes=8388608" in lines[kafka_settings.topic("models")]


def test_a_deployments_topics_can_be_deleted_as_the_test_fixture_does(kafka_settings):
    """Integration tests delete their topics afterwards (tests/conftest.py), through this."""

    async def go():
        bus = KafkaBus(kafka_settings)
        await bus.create_topics()
        deleted = await bus.delete_topics()
        for _ in range(20):  # deletion is asynchronous in the broker
            if not await bus.describe_topics():
                break
            await asyncio.sleep(0.25)
        return deleted, await bus.describe_topics()

    deleted, left = asyncio.run(go())
    assert sorted(deleted) == sorted(
        kafka_settings.topic(r) for r in ("control", "events", "trials", "models", "dead-letters")
    )
    assert left == {}


def test_a_local_run_creates_one_partition_per_instance_unless_the_settings_say(kafka_settings):
    """`trialog train`'s rule (Settings.partition_count): the settings' count when given, else
    one per instance of the run's largest service; a bus then routes by what the cluster has."""

    async def created(settings, instances, larger_run):
        bus = KafkaBus(settings)
        try:
            await bus.create_topics(local_instances=instances)
            await bus.start()
            topics = await bus.describe_topics()
            with structlog.testing.capture_logs() as said:  # a larger run later on the same topics is told
                await bus.create_topics(local_instances=larger_run)
            idle = [e for e in said if e["event"].startswith("fewer partitions than this run has instances")]
            counts = {role: topics[settings.topic(role)]["partitions"] for role in ("control", "events")}
            return counts, bus.partitions, [(e["partitions"], e["instances"]) for e in idle]
        finally:
            await bus.stop()
            await bus.delete_topics()

    open_count = dataclasses.replace(kafka_settings, partitions=0, topic_prefix=kafka_settings.topic_prefix + "open.")
    assert asyncio.run(created(open_count, 2, 3)) == ({"control": 2, "events": 2}, 2, [(2, 3)])
    # The fixture sets 4; a run of 2 or 4 instances on them is not told anything.
    assert asyncio.run(created(kafka_settings, 2, 4)) == ({"control": 4, "events": 4}, 4, [])
