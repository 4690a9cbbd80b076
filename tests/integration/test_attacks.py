"""The attacks of the security issue, on the real broker: each has no effect, each bad
record is dead-lettered once with its reason, and honest trials beside them finish
with the trajectory an undisturbed run of the same seed has (docs/security.md)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.integration.fixtures import rps_with_a_seat
from trialog import cli
from trialog.actor import EndEvent, ObservationEvent
from trialog.bus.base import Delivered
from trialog.bus.kafka import KafkaBus
from trialog.client_actor import TAKEN_OVER, join
from trialog.datalog.replay import read_trial
from trialog.errors import TrialError
from trialog.protocol.events import Action, ActorClassSpec, ActorSpec, Reward, TrialEnded, TrialStarted
from trialog.services.actors.main import loops_for as actor_loops
from trialog.services.environment.main import loops_for as env_loops
from trialog.spec import load_spec
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import mint_join_token, read_join_token
from trialog.trust.keys import Keyring
from trialog.trust.seats import Seat
from trialog.trust.tags import MAC_PREFIX, compute_tag, mac_input

pytestmark = pytest.mark.integration

GAME = rps_with_a_seat("attacks", max_ticks=8)

# PettingZoo hosted through the adapter; `open` is an operator who lets requests set anything.
HOSTED = """
name: attacks-hosted
actor_classes:
  player: {observation: auto, action: auto, default_action: 0}
environments:
  pz: {entry: "trialog.adapters.pettingzoo:PettingZooEnvironment", \
config: {env: "pettingzoo.classic.rps_v2:parallel_env", kwargs: {max_cycles: 3}}}
  open:
    entry: "trialog.adapters.pettingzoo:PettingZooEnvironment"
    config: {env: "pettingzoo.classic.rps_v2:parallel_env", kwargs: {max_cycles: 3}}
    overridable: [env, kwargs, rewards]
actors:
  pzrandom: {entry: "trialog.agents.random_agent:RandomAgent"}
trial:
  environment: pz
  actors:
    - {name: alice, class: player, implementation: pzrandom}
    - {name: bob, class: player, implementation: pzrandom}
  max_ticks: 3
  inactivity_timeout_ms: 30000
"""


@pytest.fixture
async def running(kafka_settings, tmp_path):
    (tmp_path / "attacks.yaml").write_text(GAME)
    (tmp_path / "hosted.yaml").write_text(HOSTED)
    bus = KafkaBus(kafka_settings)
    game, hosted = load_spec(tmp_path / "attacks.yaml", bus.store), load_spec(tmp_path / "hosted.yaml", bus.store)
    async with deployment(bus, [game, hosted]) as (d, ctl):
        d.add(env_loops(bus, hosted) + actor_loops(bus, hosted))
        await d.ready()
        yield bus, ctl


def outsider(bus: KafkaBus, keyring: Keyring) -> KafkaBus:
    """A client of the same cluster holding only ``keyring`` (a seat's token, an actor's key)."""
    other = KafkaBus(bus.settings)
    other.trust = Authenticator(keyring)
    return other


async def dead_letters(bus: KafkaBus, wanted: list[Delivered], timeout: float = 30) -> dict[tuple[int, int], list[str]]:
    """The reasons each of ``wanted`` (records on events) was dead-lettered with, waiting until each has one."""
    by_origin: dict[tuple[int, int], list[str]] = {}
    reader = bus.consumer(["dead-letters"])
    await reader.start()
    keys = {(d.partition, d.offset) for d in wanted}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for r in await reader.poll(timeout_ms=500):
                letter = bus.store.decode(r.value)
                if letter["topic"] == bus.settings.topic("events"):
                    by_origin.setdefault((letter["partition"], letter["offset"]), []).append(letter["reason"])
            if keys <= set(by_origin):
                await asyncio.sleep(1.0)  # a second letter for the same record would show up now
                for r in await reader.poll(timeout_ms=500):
                    letter = bus.store.decode(r.value)
                    by_origin.setdefault((letter["partition"], letter["offset"]), []).append(letter["reason"])
                break
    finally:
        await reader.stop()
    return {k: by_origin.get(k, []) for k in keys}


async def letters_of(bus: KafkaBus, tid: str) -> list[dict]:
    """Every dead letter about trial ``tid`` so far (read until the topic is quiet)."""
    reader = bus.consumer(["dead-letters"])
    await reader.start()
    try:
        out, quiet = [], 0
        while quiet < 3:
            records = await reader.poll(timeout_ms=500)
            quiet = 0 if records else quiet + 1
            out += [bus.store.decode(r.value) for r in records if r.key == tid.encode()]
        return out
    finally:
        await reader.stop()


def assert_once(letters: dict, delivered: list[Delivered], *fragments: str) -> None:
    for d in delivered:
        reasons = letters[(d.partition, d.offset)]
        assert len(reasons) == 1, f"offset {d.offset}: {reasons}"
        assert all(f in reasons[0] for f in fragments), reasons[0]


async def trajectory(bus: KafkaBus, tid: str) -> list[tuple]:
    fold = await read_trial(bus, tid)
    return [(s.tick, s.actor, s.observation_avro, s.action_avro, s.reward) for s in fold.samples()]


async def play_bob(bus: KafkaBus, tid: str, *, holder: str = "bob-1", impostor=None) -> str:
    """Bob, a person with a join token only: plays PAPER every tick; ``impostor`` runs at each observation."""
    keyring = Keyring.load(bus.settings)
    token = mint_join_token(keyring, tid, "bob")
    client = outsider(bus, Keyring({}))
    async with join(client, tid, "bob", token=token, holder=holder, timeout=30) as session:
        async for event in session:
            match event:
                case ObservationEvent(final=False, tick=tick):
                    if impostor is not None:
                        await impostor(client, tick)
                    session.act("PAPER")
                case EndEvent(reason=reason):
                    return reason
    return "left"


async def test_impostor_actions_are_refused_and_the_trial_is_undisturbed(running):
    bus, ctl = running
    reference = await ctl.start_trial("attacks", seed=5)
    await play_bob(bus, reference)
    await ctl.wait_ended(reference, timeout=60)

    attacked = await ctl.start_trial("attacks", seed=5)
    forged: list[Delivered] = []

    async def act_as_alice(client: KafkaBus, tick: int) -> None:
        # Bob's process holds bob's seat key only: alice's action gets bob's tag, or none.
        action = Action(attacked, tick=tick, actor="alice", payload=client.store.encode("rps.Move", "SCISSORS"))
        value, headers = client.codec.encode(action), action.headers()
        seat_tag = compute_tag(
            client.trust.keyring.key("seat.bob", attacked), mac_input(attacked.encode(), dict(headers), value)
        )
        forged.extend(
            await client.send_many(
                [("events", attacked.encode(), value, headers + [(MAC_PREFIX + "seat.bob", seat_tag)])]
            )
        )

    assert await play_bob(bus, attacked, impostor=act_as_alice) == "max_ticks"
    await ctl.wait_ended(attacked, timeout=60)
    assert len(forged) == 8
    assert await trajectory(bus, attacked) == await trajectory(bus, reference)
    assert_once(await dead_letters(bus, forged), forged, "refused", "not tagged by actors.random")


async def test_a_seat_has_one_holder_a_takeover_is_explicit_and_told(running):
    bus, ctl = running
    tid = await ctl.start_trial("attacks", seed=6, max_ticks=30)
    keyring = Keyring.load(bus.settings)
    token = mint_join_token(keyring, tid, "bob")
    first = outsider(bus, Keyring({}))
    async with join(first, tid, "bob", token=token, holder="first", timeout=30) as session:
        async for event in session:
            if isinstance(event, ObservationEvent):
                session.act("PAPER")
                if event.tick == 2:
                    break
        # Someone else with the link, without asking to take over: refused.
        with pytest.raises(TrialError, match="held by another holder") as refused:
            async with join(outsider(bus, Keyring({})), tid, "bob", token=token, holder="second", timeout=30):
                pass
        assert refused.value.reason == "seat_held"
        # A reconnect of the same holder resumes (no refusal).
        async with join(outsider(bus, Keyring({})), tid, "bob", token=token, holder="first", timeout=30):
            pass
        # An explicit takeover: the first holder is told, and its actions stop counting.
        async with join(
            outsider(bus, Keyring({})), tid, "bob", token=token, holder="third", takeover=True, timeout=30
        ) as taker:
            told = None
            async for event in session:
                if isinstance(event, EndEvent):
                    told = event.reason
                    break
            assert told == TAKEN_OVER
            stale = Action(tid, tick=session.tick, actor="bob", payload=first.store.encode("rps.Move", "SCISSORS"))
            [stale_at] = await first.send_many([first.to_record("events", stale)])  # tagged, holder "first"
            async for event in taker:
                match event:
                    case ObservationEvent(final=False):
                        taker.act("ROCK")
                    case EndEvent(reason=reason):
                        break
    assert reason == "max_ticks"
    letters = await dead_letters(bus, [stale_at])
    assert_once(letters, [stale_at], "held by another holder")
    # The refused join was dead-lettered once, by the orchestrator; the takeover and the resume were not.
    joins = [letter for letter in await letters_of(bus, tid) if letter["headers"].get("kind") == b"actor.joined"]
    assert [(j["headers"].get("holder"), j["service"]) for j in joins] == [(b"second", "orchestrator")], joins
    fold = await read_trial(bus, tid)
    moves = {s.tick: s.action for s in fold.samples() if s.actor == "bob" and s.action_avro is not None}
    assert all(moves[t] == "PAPER" for t in range(3)) and all(m == "ROCK" for t, m in moves.items() if t > session.tick)


async def test_forged_lifecycle_records_and_environment_rewards_change_nothing(running):
    bus, ctl = running
    reference = await ctl.start_trial("attacks", seed=7, implementations={"bob": "random"}, max_ticks=40)
    await ctl.wait_ended(reference, timeout=60)

    honest = await ctl.start_trial("attacks", seed=7, implementations={"bob": "random"}, max_ticks=40)
    await wait_for(lambda: ctl.last_tick(honest) >= 2, timeout=30, what="the honest trial under way")
    keyring = Keyring.load(bus.settings)
    # An actor service (its own key only), a stolen environment key, and nobody at all.
    actor_service = outsider(bus, keyring.restricted_to("random"))
    stranger = outsider(bus, Keyring({}))

    def forged(event, key_id: str | None = None, secret: bytes | None = None):
        value, headers = bus.codec.encode(event), event.headers()
        if key_id is not None:
            headers = headers + [
                (MAC_PREFIX + key_id, compute_tag(secret, mac_input(event.trial_id.encode(), dict(headers), value)))
            ]
        return ("events", event.trial_id.encode(), value, headers)

    fake_start = TrialStarted(
        "forged-start-1", spec="no-such-spec", environment="rps", environment_entry="this:s", environment_config="{}",
        actors=(ActorSpec("alice", "player", "random"), ActorSpec("bob", "player", "random")),
        actor_classes=(ActorClassSpec("player", '"string"', '"string"'),), seed=1, max_ticks=40,
    )  # fmt: skip
    end = TrialEnded(honest, tick=3, reason="terminated", details="forged")
    env_reward = Reward(honest, tick=1, receiver="alice", value=1000.0, sender="env")
    records = [
        forged(end),  # no tag
        forged(end, "orchestrator", keyring.key("environment")),  # the environment's key posing as the orchestrator's
        forged(fake_start),
        forged(fake_start, "actors.random", keyring.key("actors.random")),  # an actor service's key
        forged(env_reward, "actors.random", keyring.key("actors.random")),
        forged(Reward(honest, tick=2, receiver="*", value=-1000.0, sender="env/delivery")),
    ]
    async with stranger:
        delivered = await stranger.send_many(records)
    # An actor service cannot even produce the records through the SDK: it holds no key for them.
    with pytest.raises(Exception, match="holds none of the keys"):
        actor_service.to_record("events", env_reward)

    ended = await ctl.wait_ended(honest, timeout=60)
    want = await ctl.wait_ended(reference, timeout=5)
    assert (ended.reason, ended.tick) == (want.reason, want.tick) == ("max_ticks", 40)
    assert await trajectory(bus, honest) == await trajectory(bus, reference)
    assert ctl.returns(honest) == ctl.returns(reference)
    letters = await dead_letters(bus, delivered)
    assert_once(letters, delivered[:2], "refused", "trial.ended")
    assert_once(letters, delivered[2:4], "refused", "trial.started")
    assert_once(letters, delivered[4:], "refused", "reward from 'env")
    # The forged start ran nothing: no environment or actor wrote a record for it.
    fold = await read_trial(bus, "forged-start-1")
    assert fold.samples() == [] and fold.started is None


async def test_start_requests_and_records_name_no_code(running, tmp_path, capsys):
    bus, ctl = running
    marker = tmp_path / "written-by-the-attack"
    attack = {"env": "os:system", "kwargs": {"command": f"id > {marker}"}}
    # The spec lets requests set nothing: rejected, with the reason.
    rejected = await ctl.start_trial("attacks-hosted", environment="pz", environment_config=attack)
    with pytest.raises(TrialError, match="may not set env, kwargs"):
        await ctl.wait_started(rejected, timeout=30)
    rewards = {"rewards": [{"component": "os:system", "kwargs": {"command": f"id > {marker}"}}]}
    with pytest.raises(TrialError, match="may not set rewards"):
        await ctl.wait_started(
            await ctl.start_trial("attacks-hosted", environment="pz", environment_config=rewards), timeout=30
        )
    # An operator who lets requests set `env` anyway: the service still imports only its spec's.
    allowed = await ctl.start_trial("attacks-hosted", environment="open", environment_config={**attack, **rewards})
    ended = await ctl.wait_ended(allowed, timeout=60)
    assert ended.reason == "error" and "command" in ended.details  # rps_v2's parallel_env(command=...) refused
    honest = await ctl.start_trial("attacks-hosted", environment="open", seed=3)
    assert (await ctl.wait_ended(honest, timeout=60)).reason in ("max_ticks", "environment")
    assert not marker.exists()

    # replay --verify of a record that names code to import: the record is refused, nothing imported.
    evil = TrialStarted(
        "forged-verify-1",
        spec="attacks-hosted",
        environment="pz",
        environment_entry="tests.integration.never_imported:Env",
        environment_config="{}",
        actors=(ActorSpec("alice", "player", "pzrandom"),),
        actor_classes=(),
        seed=1,
    )
    async with outsider(bus, Keyring({})) as stranger:
        [at] = await stranger.send_many([("events", evil.trial_id.encode(), bus.codec.encode(evil), evil.headers())])
    flags = [
        "--bootstrap-servers",
        bus.settings.bootstrap_servers,
        "--topic-prefix",
        bus.settings.topic_prefix,
        "--partitions",
        "4",
    ]
    spec_file = str(tmp_path / "hosted.yaml")
    assert await asyncio.to_thread(cli.main, ["replay", evil.trial_id, "--verify", "--spec", spec_file, *flags]) == 1
    assert "has no trial.started" in capsys.readouterr().err
    assert "tests.integration.never_imported" not in sys.modules
    assert_once(await dead_letters(bus, [at]), [at], "refused", "trial.started")
    # A genuine trial re-simulates from the local spec's environment.
    assert await asyncio.to_thread(cli.main, ["replay", honest, "--verify", "--spec", spec_file, *flags]) == 0
    assert "deterministic" in capsys.readouterr().out


def test_a_seat_key_is_for_one_seat_of_one_trial(tmp_path):
    """(No broker) what a join token gives: the seat key of that seat and trial only."""
    keyring = Keyring.generate()
    claims = read_join_token(mint_join_token(keyring, "t1", "bob"))
    holder = Authenticator(Keyring({}))
    holder.hold(Seat("t1", "bob", "h"), claims.seat_key)
    assert holder.keyring.key("seat.bob", "t1") == keyring.key("seat.bob", "t1")
    assert holder.keyring.key("seat.bob", "t2") is None and holder.keyring.key("seat.alice", "t1") is None
