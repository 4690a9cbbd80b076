"""A whole trial on the local broker started with ``--secure`` (SASL_SSL, SCRAM-SHA-512,
StandardAuthorizer, one principal per role): orchestrator, environment, actor service,
logger and a client seat, each with its own principal and keys; and what the actors'
principal may not do (docs/security.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.conftest import free_ports, wait_for
from tests.integration.fixtures import rps_with_a_seat
from trialog import cli
from trialog.actor import EndEvent, ObservationEvent
from trialog.broker.secure import ROLE_ACLS
from trialog.bus.kafka import KafkaBus
from trialog.client_actor import join
from trialog.controller import Controller
from trialog.datalog.archive import Archive
from trialog.errors import TransportError
from trialog.settings import Settings
from trialog.tools.campaign import start_service, stop_services, wait_ready
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import mint_join_token
from trialog.trust.keys import Keyring

pytestmark = pytest.mark.integration

SPEC = rps_with_a_seat("secured", max_ticks=6)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    """The project's own `trialog broker start --secure`, on free ports and a data dir of its own."""
    data_dir = tmp_path_factory.mktemp("secure-broker")
    port, controller_port = free_ports(2)
    prefix = f"sec-{uuid.uuid4().hex[:6]}."
    base = [sys.executable, "-m", "trialog.cli", "broker"]
    where = ["--data-dir", str(data_dir)]
    started = subprocess.run(
        [*base, "start", "--secure", "--port", str(port), "--controller-port", str(controller_port),
         "--topic-prefix", prefix, "--timeout", "180", *where],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield started.stdout.strip().splitlines()[-1], data_dir / "secure", prefix
    finally:
        subprocess.run([*base, "stop", *where], capture_output=True, timeout=120)


def role_settings(folder: Path, role: str, **extra) -> Settings:
    return Settings.load({"settings": str(folder / f"{role}.yaml"), **extra}, environ={})


async def test_a_trial_on_the_secured_broker_each_role_with_its_own_principal(secure_broker, tmp_path, monkeypatch):
    bootstrap, folder, prefix = secure_broker
    # The commands run as in a fresh shell: TRIALOG_* variables (the plaintext test broker's
    # address, say) would beat the settings file, as they do for any command.
    for name in [n for n in os.environ if n.startswith("TRIALOG_")]:
        monkeypatch.delenv(name)
    assert role_settings(folder, "admin").bootstrap_servers == bootstrap
    assert await asyncio.to_thread(cli.main, ["topics", "create", "--settings", str(folder / "admin.yaml")]) == 0
    spec_file = tmp_path / "secured.yaml"
    spec_file.write_text(SPEC)
    keyring = tmp_path / "keyring.json"
    assert cli.main(["keyring", "generate", str(keyring)]) == 0
    assert (
        cli.main(
            ["keyring", "export", str(keyring), "--implementation", "random", "--out", str(tmp_path / "random.json")]
        )
        == 0
    )

    services = {
        "orchestrator": (["orchestrator"], keyring),
        "environment": (["environment"], keyring),
        "actors": (["actors"], tmp_path / "random.json"),  # its own actor key only
        "logger": (["logger", "--archive-dir", str(tmp_path / "archive")], keyring),
    }
    procs, ports = {}, {}
    try:
        for role, (args, ring) in services.items():
            procs[role], ports[role] = start_service(
                role_settings(folder, role, keyring=str(ring)), str(spec_file), args, tmp_path / f"{role}.log"
            )
        await asyncio.to_thread(wait_ready, procs, ports, tmp_path, 180)

        bus = KafkaBus(role_settings(folder, "controller", keyring=str(keyring)))
        async with bus, Controller(bus) as ctl:
            tid = await ctl.start_trial("secured", seed=4)
            token = mint_join_token(Keyring.load(bus.settings), tid, "bob")
            # The person's client: the actors' principal, and the seat's key from its token only.
            seat_bus = KafkaBus(role_settings(folder, "actors"))
            seat_bus.trust = Authenticator(Keyring({}))
            async with join(seat_bus, tid, "bob", token=token, holder="person-1", timeout=60) as session:
                async for event in session:
                    match event:
                        case ObservationEvent(final=False):
                            session.act("PAPER")
                        case EndEvent(reason=reason):
                            break
            ended = await ctl.wait_ended(tid, timeout=60)
        assert reason == ended.reason == "max_ticks" and ended.tick == 6
        await wait_for(
            lambda: Archive(tmp_path / "archive").entry(tid), timeout=90, what="the logger's archive of the trial"
        )
        samples = Archive(tmp_path / "archive").read(tid).samples
        assert {s.actor for s in samples} == {"alice", "bob"}
        assert [s.action for s in samples if s.actor == "bob" and s.action_avro is not None] == ["PAPER"] * 6
    finally:
        stop_services(procs.values())

    # What the actors' principal may not do.
    actors = KafkaBus(role_settings(folder, "actors"))
    async with actors:
        for topic in ("control", "trials"):
            with pytest.raises(TransportError, match="TopicAuthorizationFailed"):
                await actors.send_many([(topic, b"t", b"forged", [])])
    assert "control" not in ROLE_ACLS["actors"][1] and "trials" not in ROLE_ACLS["actors"][1]

    # Another deployment's prefix on the same cluster: its record is there (the admin reads it), the actors'
    # principal reads nothing.
    other = f"other-{uuid.uuid4().hex[:6]}."
    admin = KafkaBus(role_settings(folder, "admin", topic_prefix=other))
    await admin.create_topics()
    async with admin:
        await admin.send_many([("events", b"t", b"not for you", [])])
    assert await read_once(role_settings(folder, "admin"), f"{other}events") == [b"not for you"]
    assert await read_once(role_settings(folder, "actors"), f"{other}events") == []


async def read_once(settings: Settings, topic: str) -> list[bytes]:
    """The values of partition 0..3 of ``topic`` that ``settings``' principal gets within a few seconds."""
    consumer = AIOKafkaConsumer(**settings.kafka_client_options(), enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got = await consumer.getmany(timeout_ms=5000)
        return [m.value for messages in got.values() for m in messages]
    finally:
        await consumer.stop()
