"""The analytics jobs on the broker started with ``--secure``: ``trialog serve analytics``
under the ``analytics`` principal turns a few trials' events into its result topics —
creating them and Quix Streams' internal ``changelog__<group>--…`` / ``repartition__<group>--…``
topics, which lie outside the topic prefix, and committing in transactions under its
prefixed transactional ids — and the gateway's principal reads what the dashboard shows.
A principal without the analytics ACLs is refused, and the analytics principal can write
nothing but its own topics (docs/security.md, docs/analytics.md)."""

from __future__ import annotations

import asyncio
import os

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from quixstreams.models.topics.exceptions import TopicPermissionError

from tests.integration.test_secure_broker import role_settings, secure_broker  # noqa: F401 - the fixture
from trialog import cli
from trialog.analytics import read_results
from trialog.broker.secure import DASHBOARD_RESULTS, OWNED_TOPIC_PATTERNS, ROLE_ACLS
from trialog.bus.kafka import KafkaBus
from trialog.errors import TransportError
from trialog.protocol.events import Action, ActorClassSpec, ActorSpec, Observation, Reward, TrialEnded, TrialStarted
from trialog.protocol.topics import DEAD_LETTERS, EVENTS
from trialog.services.analytics.app import build
from trialog.services.gateway.dashboard import RESULTS
from trialog.tools.campaign import start_service, stop_services, wait_ready

pytestmark = pytest.mark.integration

SPEC = os.path.join(os.path.dirname(__file__), "trialtest.yaml")
TRIALS, TICKS = 3, 4


def trial_events(trial_id: str, seed: int) -> list:
    """A finished two-player trial as its log holds it: alice wins every tick of an odd seed."""
    actors = (ActorSpec("alice", "player", "random"), ActorSpec("bob", "player", "counter"))
    classes = (ActorClassSpec("player", '{"type": "int"}', '{"type": "int"}'),)
    started = TrialStarted(trial_id, spec="secured", environment="rps", environment_entry="tests:rps",
                           environment_config="{}", actors=actors, actor_classes=classes, seed=seed)  # fmt: skip
    out: list = [started]
    alice = 1.0 if seed % 2 else -1.0
    for t in range(TICKS):
        out += [Observation(trial_id, tick=t, actor=a.name, payload=b"\x02") for a in actors]
        out += [Action(trial_id, tick=t, actor=a.name, payload=b"\x02") for a in actors]
        out += [Reward(trial_id, tick=t, receiver="alice", value=alice, sender="env"),
                Reward(trial_id, tick=t, receiver="bob", value=-alice, sender="env")]  # fmt: skip
    return [*out, TrialEnded(trial_id, tick=TICKS, reason="max_ticks")]


async def test_analytics_on_the_secured_broker_under_its_own_principal(secure_broker, tmp_path, monkeypatch):  # noqa: F811
    _bootstrap, folder, prefix = secure_broker
    for name in [
        n for n in os.environ if n.startswith("TRIALOG_")
    ]:  # a fresh shell's settings (see test_secure_broker)
        monkeypatch.delenv(name)
    keyring = tmp_path / "keyring.json"
    assert cli.main(["keyring", "generate", str(keyring)]) == 0
    assert await asyncio.to_thread(cli.main, ["topics", "create", "--settings", str(folder / "admin.yaml")]) == 0
    # The operator writes the datalog of a few finished trials (tagged with the deployment's keys).
    async with KafkaBus(role_settings(folder, "admin", keyring=str(keyring))) as admin:
        for i in range(TRIALS):
            await admin.publish_all(EVENTS, trial_events(f"secured-{i}", seed=i))

    analytics = role_settings(folder, "analytics", keyring=str(keyring))
    proc, port = start_service(
        analytics, SPEC, ["analytics", "--state-dir", str(tmp_path / "state")], tmp_path / "analytics.log"
    )
    try:
        await asyncio.to_thread(wait_ready, {"analytics": proc}, {"analytics": port}, tmp_path, 180)
        # The dashboard's reader: the gateway's principal.
        async with KafkaBus(role_settings(folder, "gateway", keyring=str(keyring))) as gateway:

            async def results() -> tuple[dict, dict] | None:
                assert proc.poll() is None, (tmp_path / "analytics.log").read_text()[-3000:]
                trials, by_pairing = (
                    await read_results(gateway, "trials"),
                    await read_results(gateway, "returns-by-pairing"),
                )
                done = len(trials) == TRIALS and by_pairing.get("random + counter", {}).get("trials") == TRIALS
                return (trials, by_pairing) if done else None

            deadline = asyncio.get_running_loop().time() + 180
            while (done := await results()) is None:
                assert asyncio.get_running_loop().time() < deadline, (tmp_path / "analytics.log").read_text()[-3000:]
                await asyncio.sleep(2)
            trials, by_pairing = done
            assert await read_results(gateway, "environments"), "the dashboard's third topic"
    finally:
        stop_services([proc])
    assert {t: r["returns"] for t, r in trials.items()} == {
        f"secured-{i}": {"alice": TICKS * (1.0 if i % 2 else -1.0), "bob": TICKS * (-1.0 if i % 2 else 1.0)}
        for i in range(TRIALS)
    }
    assert by_pairing["random + counter"]["mean_by_actor"] == pytest.approx({"alice": -TICKS / 3, "bob": TICKS / 3})

    # It made its internal topics under the patterns it was granted, outside the topic prefix.
    client = AIOKafkaAdminClient(**role_settings(folder, "admin").kafka_client_options())
    await client.start()
    try:
        topics = set(await client.list_topics())
    finally:
        await client.close()
    internal = {t for t in topics if t.startswith(("changelog__", "repartition__"))}
    patterns = [p.format(prefix=prefix) for p in OWNED_TOPIC_PATTERNS["analytics"]]
    assert {t.split("__")[0] for t in internal} == {"changelog", "repartition"}, topics
    assert all(t.startswith(tuple(patterns)) and not t.startswith(prefix) for t in internal), internal

    # What the analytics principal may not do: write the log or the control topic.
    async with KafkaBus(analytics) as bus:
        for topic in ("events", "control"):
            with pytest.raises(TransportError, match="TopicAuthorizationFailed"):
                await bus.send_many([(topic, b"t", b"forged", [])])
    # Nor may the dashboard's reader forge a result.
    async with KafkaBus(role_settings(folder, "gateway", keyring=str(keyring))) as gateway:
        with pytest.raises(TransportError, match="TopicAuthorizationFailed"):
            await gateway.send_many([("analytics.trials", b"secured-0", b"{}", [])])


def test_a_principal_without_the_analytics_acls_is_refused(secure_broker, tmp_path, monkeypatch):  # noqa: F811
    """The logger reads events too, but may not inspect them as Quix does, nor make the jobs' topics."""
    _bootstrap, folder, _prefix = secure_broker
    for name in [n for n in os.environ if n.startswith("TRIALOG_")]:
        monkeypatch.delenv(name)
    assert cli.main(["topics", "create", "--settings", str(folder / "admin.yaml")]) == 0
    assert EVENTS in ROLE_ACLS["logger"][0] and "logger" not in OWNED_TOPIC_PATTERNS
    with pytest.raises(TopicPermissionError, match="DescribeConfigs"):
        build(role_settings(folder, "logger"), state_dir=tmp_path / "state")


def test_the_gateway_may_read_what_its_dashboard_shows():
    """services/gateway/dashboard.py follows the analytics results and the dead letters."""
    assert DASHBOARD_RESULTS == tuple(f"analytics.{job}" for job in RESULTS)
    assert {*DASHBOARD_RESULTS, DEAD_LETTERS} <= set(ROLE_ACLS["gateway"][0])
