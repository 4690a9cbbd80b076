"""Decide-style agents send rewards and messages (trialog.actor.Agent.reward/message), by
the same checks and records as sessions (trialog.runtime.actor_session); an actor that
cannot play ends its trial at once, with the reason. On the in-memory bus; the same
scenarios run on Kafka in tests/integration/test_agent_outputs.py."""

from __future__ import annotations

import dataclasses
import re
import sys
import time
import types
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.actor import Agent, ObservationEvent
from trialog.bus.base import Bus
from trialog.bus.memory import MemoryBus
from trialog.datalog.replay import read_trial, trial_records
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialError, TrialogError
from trialog.protocol.cannot_play import CANNOT_PLAY, cannot_play, cannot_play_reason
from trialog.protocol.events import Action, ActorTimeout, Message, Reward, TrialEnded, with_carried_rewards
from trialog.protocol.rewards import aggregate
from trialog.protocol.topics import CONTROL
from trialog.runtime.actor_session import Outbox
from trialog.services.actors.main import loops_for as actor_loops
from trialog.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.unit.test_agent_outputs"
DOCS_EXAMPLE = "docs_concepts_agent"  # the module the agent shown in docs/concepts.md is run as

SPEC = f"""
name: agents
actor_classes:
  player:
    observation: {ROOT / "examples" / "rps" / "observation.avsc"}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 1000}}}}
actors:
  judge: {{entry: "{HERE}:Judge"}}
  listener: {{entry: "{HERE}:Listener"}}
  broken: {{entry: "{HERE}:Broken"}}
  crashing: {{entry: "{HERE}:crashing_session"}}
  random: {{entry: "trialog.examples.rps.players:RandomPlayer"}}
  good_sport: {{entry: "{DOCS_EXAMPLE}:GoodSport"}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: judge}}
    - {{name: bob, class: player, implementation: listener}}
  max_ticks: 6
  response_timeout_ms: 20000
  timeout_policy: default_action
  inactivity_timeout_ms: 60000
"""
RESPONSE_TIMEOUT_S = 20.0  # the spec's: a trial that ends well before it was not ended by timeouts

SEEN: dict[tuple[str, str], list] = {}  # (trial, actor) -> what its hooks got; (trial, "refused") -> errors


class Judge(Agent):
    """Plays ROCK. Greets bob at tick 0; from tick 1 rewards bob for the tick before (3.0,
    confidence 0.5) and tries what could not count; from its ``on_end`` hook rewards bob
    7.0 for the last tick it played (a retroactive reward after the end)."""

    def decide(self, observation):
        tick = observation["round"]
        if tick == 0:
            self.message(["bob"], {"hello": self.actor.name})
        else:
            self.reward("bob", 3.0, tick=tick - 1, confidence=0.5)
        for bad in (lambda: self.reward("alice", 1.0), lambda: self.message(["nobody"], {})):
            try:
                bad()
            except TrialError as exc:
                SEEN.setdefault((self.trial.trial_id, "refused"), []).append(str(exc))
        self.last_played = tick
        return "ROCK"

    def on_message(self, message):
        SEEN.setdefault((self.trial.trial_id, self.actor.name), []).append(message)

    def on_end(self, end):
        self.reward("bob", 7.0, tick=self.last_played)
        SEEN.setdefault((self.trial.trial_id, "ended"), []).append(end)


class Listener(Agent):
    """Plays PAPER (it wins every round against ROCK), answers a greeting from its
    ``on_message`` hook, and keeps the rewards it is given."""

    def decide(self, observation):
        return "PAPER"

    def on_message(self, message):
        if "hello" in message.payload:
            self.message([message.sender], {"reply": self.actor.name})

    def on_reward(self, reward):
        SEEN.setdefault((self.trial.trial_id, self.actor.name), []).append(reward)


class Broken(Agent):
    def __init__(self, trial, actor):
        raise RuntimeError("no weights at /models/missing.npz")


async def crashing_session(session) -> None:
    """Plays ROCK, and raises at tick 2."""
    async for event in session:
        match event:
            case ObservationEvent(tick=tick, final=False):
                if tick == 2:
                    raise ValueError("lost the plot at tick 2")
                session.act("ROCK")


def docs_agent() -> type[Agent]:
    """The agent shown in docs/concepts.md, run as a module of its own (the spec's good_sport)."""
    if DOCS_EXAMPLE not in sys.modules:
        text = (ROOT / "docs" / "concepts.md").read_text()
        (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class GoodSport(Agent)" in b]
        module = types.ModuleType(DOCS_EXAMPLE)
        exec(compile(code, "docs/concepts.md", "exec"), module.__dict__)
        sys.modules[DOCS_EXAMPLE] = module
    return sys.modules[DOCS_EXAMPLE].GoodSport


def load(bus: Bus, tmp_path: Path) -> Spec:
    docs_agent()
    (tmp_path / "agents.yaml").write_text(SPEC)
    return load_spec(tmp_path / "agents.yaml", bus.store)


async def logged(bus: Bus, tid: str) -> list:
    """The trial's events, each reward an observation carries as a record of its own, where it stands."""
    return list(
        with_carried_rewards([bus.codec.decode(r.value, r.header("kind")) async for r in trial_records(bus, tid)])
    )


async def play_judged_trial(bus: Bus, spec: Spec) -> None:
    """alice (Judge) and bob (Listener) play 6 ticks: what decide and the hooks sent is in the
    log — decide's before the action of its tick —, delivered live, and folded into the samples."""
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("agents")
        ended = await ctl.wait_ended(tid, timeout=60)
        assert (ended.reason, ended.tick) == ("max_ticks", 6)
        await wait_for(lambda: SEEN.get((tid, "ended")), timeout=20, what="alice's on_end")
    # (the deployment stops once its loops have written what they hold: on_end's reward too)
    events = await logged(bus, tid)
    rewards = [
        (e.tick, e.receiver, e.value, e.confidence) for e in events if isinstance(e, Reward) and e.sender == "alice"
    ]
    assert sorted(e.tick for e in events if isinstance(e, Action) and e.actor == "alice") == [0, 1, 2, 3, 4, 5]
    assert rewards == [(t, "bob", 3.0, 0.5) for t in range(5)] + [(5, "bob", 7.0, 1.0)]
    for t in range(1, 6):  # sent by decide at tick t (for t - 1): logged before alice's action of tick t
        reward_at = next(
            i for i, e in enumerate(events) if isinstance(e, Reward) and e.sender == "alice" and e.tick == t - 1
        )
        action_at = next(
            i for i, e in enumerate(events) if isinstance(e, Action) and e.actor == "alice" and e.tick == t
        )
        assert reward_at < action_at, t
    messages = [(m.sender, m.receivers, m.payload) for m in events if isinstance(m, Message)]
    assert messages == [("alice", ("bob",), '{"hello":"alice"}'), ("bob", ("alice",), '{"reply":"bob"}')]
    refused = SEEN[(tid, "refused")]
    assert len(refused) == 2 * 6 and all("alice cannot send this" in r for r in refused), refused
    assert sum("to itself" in r for r in refused) == 6 and sum("addresses nobody" in r for r in refused) == 6

    # Delivered live: bob's hook got alice's rewards, alice's hook bob's reply.
    assert [(r.tick, r.value) for r in SEEN[(tid, "bob")] if r.sender == "alice"][:5] == [(t, 3.0) for t in range(5)]
    assert [m.payload for m in SEEN[(tid, "alice")]] == [{"reply": "bob"}]

    # Folded: bob's reward at each tick aggregates the environment's +1 (confidence 1) with alice's.
    samples = {(s.tick, s.actor): s for s in (await read_trial(bus, tid)).samples()}
    for t in range(6):
        bob = samples[(t, "bob")]
        assert {(r.sender, r.value) for r in bob.reward_sources} == {("env", 1.0), ("alice", 3.0 if t < 5 else 7.0)}
        assert bob.reward == pytest.approx((1.0 + 0.5 * 3.0) / 1.5 if t < 5 else (1.0 + 7.0) / 2)
        logged_for_bob = [e for e in events if isinstance(e, Reward) and e.tick == t and e.receiver == "bob"]
        assert bob.reward == pytest.approx(aggregate(logged_for_bob))
    assert [m.payload for m in samples[(0, "bob")].messages] == ['{"hello":"alice"}']


async def ends_at_once(bus: Bus, spec: Spec, implementations: dict[str, str], why: str) -> TrialEnded:
    """A trial one of whose actors cannot play ends long before the response timeout, with
    the reason, and no actor is timed out. The actor said so in one message, on events under its
    own key (an actor service never writes control)."""
    async with deployment(bus, spec) as (_, ctl):
        began = time.monotonic()
        tid = await ctl.start_trial("agents", implementations=implementations)
        ended = await ctl.wait_ended(tid, timeout=RESPONSE_TIMEOUT_S)
        took = time.monotonic() - began
    assert ended.reason == "error" and why in ended.details, ended
    assert took < RESPONSE_TIMEOUT_S / 4, took
    events = await logged(bus, tid)
    assert not [e for e in events if isinstance(e, ActorTimeout)]
    said = [e for e in events if isinstance(e, Message) and cannot_play_reason(e) is not None]
    assert [(m.sender, m.receivers, cannot_play_reason(m)) for m in said] == [("alice", ("env",), ended.details)]
    return ended


# --- the API, without a bus ------------------------------------------------------------------------------


def outbox() -> Outbox:
    trial = TrialInfo(
        trial_id="t-1",
        seed=1,
        config={},
        actors=(ActorInfo("alice", "player", "judge", {}), ActorInfo("bob", "player", "listener", {})),
    )
    return Outbox(trial, trial.actors[0])


def test_an_agent_sends_through_its_outbox_checked_as_a_session_is():
    box = outbox()
    agent = Agent(box.trial, box.actor)
    with pytest.raises(TrialogError, match="once an actor runtime plays it"):
        agent.reward("bob", 1.0)
    agent.outbox = box
    box.tick = 4
    agent.reward("bob", 2.0, confidence=0.5)
    agent.reward("*", 1.0, tick=1, user_data={"why": "fair"})
    agent.message(["bob", "env"], {"hi": 1})
    agent.message(["bob"], {"hi": 2})
    agent.reward("player.*", 1.0, tick=1)  # reaches bob: a wildcard leaves alice out
    for bad, reason in [
        (lambda: agent.reward("alice", 1.0), "to itself"),
        (lambda: agent.reward("bob", float("nan")), "not a finite number"),
        (lambda: agent.reward("bob", 1.0, tick=-1), "tick"),
        (lambda: agent.reward("nobody", 1.0), "nobody"),
        (lambda: agent.message(["nobody"], {}), "addresses nobody"),
    ]:
        with pytest.raises(TrialError, match=reason):
            bad()
    sent = box.take()
    assert [(e.tick, e.receiver, e.value, e.confidence, e.user_data) for e in sent if isinstance(e, Reward)] == [
        (4, "bob", 2.0, 0.5, None),
        (1, "*", 1.0, 1.0, '{"why":"fair"}'),
        (1, "player.*", 1.0, 1.0, None),
    ]
    assert [(m.tick, m.receivers, m.message_id) for m in sent if isinstance(m, Message)] == [
        (4, ("bob", "env"), "alice-4-1"),
        (4, ("bob",), "alice-4-2"),
    ]
    assert all(e.sender == "alice" for e in sent)
    assert box.take() == []


# --- on the in-memory bus ----------------------------------------------------------------------------------


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


async def test_a_decide_style_agent_rewards_and_messages(bus, tmp_path):
    await play_judged_trial(bus, load(bus, tmp_path))


async def test_the_agent_in_the_docs_rewards_its_opponent_for_each_round_it_won(bus, tmp_path):
    assert issubclass(docs_agent(), Agent)
    async with deployment(bus, load(bus, tmp_path)) as (_, ctl):
        tid = await ctl.start_trial("agents", implementations={"alice": "good_sport", "bob": "random"}, max_ticks=20)
        assert (await ctl.wait_ended(tid, timeout=60)).reason == "max_ticks"
    events = await logged(bus, tid)
    won_by_bob = [
        e.tick for e in events if isinstance(e, Reward) and e.sender == "env" and e.receiver == "bob" and e.value > 0
    ]
    rewarded = [e.tick for e in events if isinstance(e, Reward) and e.sender == "alice"]
    assert won_by_bob and rewarded == [t for t in won_by_bob if t < 19]  # the last round is never decided on
    assert [(m.sender, m.receivers) for m in events if isinstance(m, Message)] == [("alice", ("*",))]


async def test_an_agent_whose_constructor_raises_ends_its_trial_with_the_reason(bus, tmp_path):
    spec = load(bus, tmp_path)
    await ends_at_once(
        bus, spec, {"alice": "broken"}, "actor alice could not start: RuntimeError: no weights at /models/missing.npz"
    )
    assert [r.header("kind") for r in bus.records(CONTROL)] == ["trial.start"]  # the controller's request only


async def test_a_session_that_raises_ends_its_trial_with_the_reason(bus, tmp_path):
    ended = await ends_at_once(
        bus, load(bus, tmp_path), {"alice": "crashing"}, "actor alice failed: ValueError: lost the plot at tick 2"
    )
    assert ended.tick == 2


async def test_a_failure_read_during_catch_up_is_reported_when_it_ends(bus, tmp_path):
    """An actor service that comes up after the trial began reads its trial.started while
    catching up: what it says then is set aside until it is live, and sent once, the log lacking it."""
    spec = load(bus, tmp_path)
    async with deployment(bus, spec, actors=False) as (d, ctl):
        tid = await ctl.start_trial("agents", implementations={"alice": "broken", "bob": "random"})
        await ctl.wait_started(tid, timeout=20)
        await wait_for(lambda: ctl.last_tick(tid) >= 0, what="the first observations")
        d.add(actor_loops(bus, spec))
        ended = await ctl.wait_ended(tid, timeout=RESPONSE_TIMEOUT_S / 2)
    assert ended.reason == "error" and "actor alice could not start" in ended.details
    said = [e for e in await logged(bus, tid) if isinstance(e, Message) and cannot_play_reason(e) is not None]
    assert len(said) == 1


async def test_only_an_actor_of_the_trial_can_say_it_cannot_play(bus, tmp_path):
    """The orchestrator ends the trial for such a message only from an actor of the trial: from
    someone else (here a controller, a judge), it is a message like any other."""
    async with deployment(bus, load(bus, tmp_path)) as (_, ctl):
        # Ticks as fast as the machine goes: only the message may end it (40 ticks once ran out first).
        tid = await ctl.start_trial("agents", implementations={"alice": "random", "bob": "random"}, max_ticks=10**6)
        await wait_for(lambda: ctl.last_tick(tid) >= 1, what="tick 1")
        for sender in ("judge", "env/judge"):
            await ctl.send_message(tid, ["env"], {CANNOT_PLAY: "not mine to say"}, sender=sender)
        await wait_for(lambda: ctl.last_tick(tid) >= 4, what="tick 4 (the trial went on)")
        await ctl.send_message(tid, ["env"], {CANNOT_PLAY: "alice gives up"}, sender="alice", tick=ctl.last_tick(tid))
        ended = await ctl.wait_ended(tid, timeout=20)
    assert (ended.reason, ended.details) == ("error", "alice gives up") and ended.tick < 10**6


def test_a_cannot_play_message_says_why_and_nothing_else_does():
    said = cannot_play("t-1", 3, "alice", "actor alice could not start: OSError: disk")
    assert (said.tick, said.sender, said.receivers, said.message_id) == (3, "alice", ("env",), "alice-cannot-play")
    assert cannot_play_reason(said) == "actor alice could not start: OSError: disk"
    for payload in ('{"hello": 1}', '["trialog.cannot_play"]', '{"trialog.cannot_play": 1}', "trialog.cannot_play"):
        assert cannot_play_reason(dataclasses.replace(said, payload=payload)) is None, payload


def test_an_actor_service_with_only_its_own_key_can_say_so():
    """Restricted keys (docs/security.md): the message carries the actor service's own key only,
    and the orchestrator, holding the whole keyring, accepts it."""
    from tests.unit.test_trust import STARTED, TRIAL, record  # a trial where alice plays "random"
    from trialog.trust.authenticator import Authenticator
    from trialog.trust.keys import Keyring

    keyring = Keyring.generate()
    orchestrator, random_service = Authenticator(keyring), Authenticator(keyring.restricted_to("random"))
    for trust in (orchestrator, random_service):
        trust.learn(STARTED)
    assert (
        orchestrator.check(*record(cannot_play(TRIAL, 0, "alice", "actor alice could not start"), random_service))
        is None
    )
