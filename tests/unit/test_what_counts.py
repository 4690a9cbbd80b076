"""One rule for what counts, on the in-memory bus: rewards within bounds, wildcards that
leave their sender out, messages for someone who exists — each rule judged once
(trialog.protocol.owners) and applied alike by the orchestrator's letters, the datalog's fold,
live delivery, controllers' returns and the analytics jobs. Integration tests repeat the
seat and restart parts on Kafka (tests/integration/test_what_counts.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.unit.test_analytics_jobs import State, read_as_the_jobs_do
from trialog.actor import EndEvent, MessageEvent, ObservationEvent, RewardEvent
from trialog.bus.memory import MemoryBus
from trialog.client_actor import join
from trialog.controller import Controller, new_trial_id
from trialog.datalog.replay import read_trial
from trialog.datalog.samples import RewardSource, Sample, TrialFold, apply_rewards
from trialog.errors import TrialError
from trialog.examples.rps.game import RockPaperScissors
from trialog.protocol.events import Action, DeadLetter, Message, Observation, Reward, TrialRecord
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.rewards import MAX_CONFIDENCE, MAX_REWARD_VALUE, Returns, aggregate, reward_bounds_problem
from trialog.protocol.topics import DEAD_LETTERS, EVENTS, TRIALS
from trialog.protocol.trial import matches, reaches
from trialog.services.analytics.jobs import fold_trial
from trialog.services.orchestrator.main import loop_for as orchestrator_loop
from trialog.spec import load_spec
from trialog.trust.tags import MAC_PREFIX, compute_tag, mac_input

ROOT = Path(__file__).resolve().parents[2]

SPEC = f"""
name: counts
actor_classes:
  player:
    observation: {ROOT / "examples" / "rps" / "observation.avsc"}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 1000}}}}
  huge: {{entry: "tests.unit.test_what_counts:HugeRewardRps", config: {{target_score: 1000}}}}
actors:
  wildcard: {{entry: "tests.unit.test_what_counts:wildcard_player"}}
  random: {{entry: "trialog.examples.rps.players:RandomPlayer"}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: wildcard}}
    - {{name: bob, class: player, implementation: wildcard}}
  max_ticks: 5
  response_timeout_ms: 3000
  timeout_policy: default_action
  inactivity_timeout_ms: 20000
"""

SEEN: dict[tuple[str, str], list] = {}  # (trial, actor) -> what its session received
REFUSED: dict[tuple[str, str], list[str]] = {}  # (trial, actor) -> what its SDK refused to send


async def wildcard_player(session) -> None:
    """Plays ROCK and rewards everyone at each tick from 1, through ``*`` (10 from alice, 20
    from bob) and ``player.*`` (1); tries what the SDK refuses; at tick 2 alice also writes,
    past the SDK's checks (as an SDK without them would), a reward to herself, one out of
    bounds, a message to someone who does not exist and one to everyone."""
    me, tid = session.actor.name, session.trial.trial_id
    seen, refused = SEEN.setdefault((tid, me), []), REFUSED.setdefault((tid, me), [])
    async for event in session:
        seen.append(event)
        match event:
            case ObservationEvent(tick=t, final=False):
                if t >= 1:
                    session.reward("*", 10.0 if me == "alice" else 20.0)
                    session.reward("player.*", 1.0)
                    for bad in (
                        lambda: session.reward(me, 1.0),
                        lambda: session.reward("*", 1e13),
                        lambda: session.message(["nobody"], {}),
                    ):
                        try:
                            bad()
                        except TrialError as exc:
                            refused.append(str(exc))
                if t == 2 and me == "alice":
                    session._loop.emit(Reward(tid, tick=2, receiver="alice", value=5.0, sender="alice"))
                    session._loop.emit(Reward(tid, tick=2, receiver="bob", value=1e308, sender="alice"))
                    session._loop.emit(
                        Message(
                            tid,
                            tick=2,
                            sender="alice",
                            receivers=("bob", "nobody"),
                            message_id="m-bad",
                            payload='{"bad": 1}',
                        )
                    )
                    session._loop.emit(
                        Message(tid, tick=2, sender="alice", receivers=("*",), message_id="m-all", payload='{"all": 1}')
                    )
                session.act("ROCK")
            case EndEvent():
                break


class HugeRewardRps(RockPaperScissors):
    """RPS whose update gives a reward out of bounds at round 2."""

    def update(self, actions):
        step = super().update(actions)
        if self.round == 2:
            step.rewards[self.players[0]] = 2 * MAX_REWARD_VALUE
        return step


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


def letters(bus: MemoryBus, tid: str) -> list[DeadLetter]:
    return [
        d
        for r in bus.records(DEAD_LETTERS)
        if (d := DeadLetter(**bus.store.decode(r.value, DeadLetter.SCHEMA))).key == tid.encode()
    ]


# --- the rules, as pure functions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, confidence, fragment",
    [
        (1e308, 1.0, "value 1e+308"),
        (-2e12, 1.0, "value -2000000000000.0"),
        (math.nan, 1.0, "value nan"),
        (math.inf, 1.0, "value inf"),
        (1.0, 2e6, "confidence 2000000.0"),
        (1.0, -1.0, "confidence -1.0"),
        (1.0, math.nan, "confidence nan"),
        ("1", 1.0, "must be numbers"),
    ],
)
def test_rewards_out_of_bounds_have_a_reason(value, confidence, fragment):
    assert fragment in reward_bounds_problem(value, confidence)
    assert fragment in reward_problem(Reward("t", tick=0, value=value, confidence=confidence), 0, None)


def test_rewards_within_bounds_cannot_overflow_their_aggregate():
    for value, confidence in [(MAX_REWARD_VALUE, MAX_CONFIDENCE), (-MAX_REWARD_VALUE, 0.0), (0, 0), (1e-300, 5e-324)]:
        assert reward_bounds_problem(value, confidence) is None
    # The attack: three finite rewards of 1e308 at one tick made an infinite aggregate.
    assert aggregate([Reward("t", value=1e308)] * 3) == math.inf
    # Within the bounds, a million rewards at the limits stay finite.
    assert math.isfinite(aggregate([Reward("t", value=MAX_REWARD_VALUE, confidence=MAX_CONFIDENCE)] * 1_000_000))


def test_a_wildcard_never_reaches_its_sender():
    assert matches("*", "alice", "player") and not reaches("*", "alice", "alice", "player")
    assert not reaches("player.*", "alice", "alice", "player") and reaches("player.*", "alice", "bob", "player")
    assert reaches("*", "env", "alice", "player") and reaches("bob", "alice", "bob", "player")
    assert not reaches("alice", "alice", "alice", "player")


@pytest.mark.parametrize(
    "reward, fragment",
    [
        (Reward("t", tick=1, receiver="alice", sender="alice"), "to itself"),
        (Reward("t", tick=1, receiver="judge", sender="judge"), "to itself"),
        (Reward("t", tick=1, receiver="player.*", sender="alice"), "reaches no actor but its sender"),
        (Reward("t", tick=1, receiver="ghost.*", sender="alice"), "addresses no actor"),
    ],
)
def test_rewards_that_reach_nobody_but_their_sender_cannot_count(reward, fragment):
    actors = {"alice": "player", "carol": "coach"}
    assert fragment in reward_problem(reward, 1, actors)
    assert reward_problem(Reward("t", tick=1, receiver="*", sender="alice"), 1, actors) is None  # carol
    assert reward_problem(Reward("t", tick=1, receiver="player.*", sender="carol"), 1, actors) is None


def test_messages_go_to_someone_in_the_trial():
    actors = {"alice": "player", "bob": "player"}

    def problem(*receivers: str):
        return message_problem(Message("t", tick=1, sender="alice", receivers=receivers, message_id="m"), 1, actors)

    assert problem("bob") is None and problem("*") is None and problem("player.*") is None and problem("env") is None
    assert problem("env", "bob", "player.*") is None
    for bad in (("nobody",), ("bob", "nobody"), ("ghost.*",), ("",), ("env/x",)):
        assert "addresses nobody" in problem(*bad), bad
    assert (
        message_problem(Message("t", tick=1, sender="alice", receivers=("nobody",), message_id="m"), 1, None) is None
    )  # actors unknown


def test_joining_late_rewards_to_samples_leaves_their_sender_out():
    samples = [Sample("t", 1, name, "player", "x", b"", None, 0.0, ()) for name in ("alice", "bob")]
    joined = apply_rewards(
        samples, [(1, RewardSource("alice", "*", 3.0, 1.0)), (1, RewardSource("alice", "player.*", 5.0, 1.0))]
    )
    assert [s.reward for s in joined] == [0.0, 4.0]


def test_a_letter_for_a_reward_an_observation_carries_says_so():
    """The reasons an observation carrying a reward is refused for it, as the services letter them,
    are explained as such (``trialog dead-letters``, the dashboard), not as bytes no schema reads."""
    from trialog.datalog.deadletters import explain
    from trialog.errors import CodecError
    from trialog.protocol.event_codec import EventCodec
    from trialog.protocol.owners import check_headers

    codec, reasons = EventCodec(), []
    for bad in (Observation("t", tick=2, actor="a", reward=math.inf), Observation("t", tick=0, actor="a", reward=1.0)):
        with pytest.raises(CodecError) as caught:
            codec.decode(codec.encode(bad), "observation")
        reasons.append(f"undecodable record: {caught.value}")
    carrying, plain = Observation("t", tick=2, actor="a", reward=1.0), Observation("t", tick=2, actor="a")
    for event, headers in ((carrying, plain.headers()), (plain, carrying.headers())):
        with pytest.raises(CodecError) as caught:
            check_headers(b"t", headers, event)
        reasons.append(f"refused: {caught.value}")
    explained = [explain(reason) for reason in reasons]
    assert "out of bounds" in explained[0] and "tick 0" in explained[1], explained
    assert all("`reward` header and body disagree" in text for text in explained[2:]), explained


def test_the_conformance_suite_counts_the_rewards_observations_carry(bus):
    """A probe's answer must list the environment's reward an observation carried, as the record it
    stands for, in log order (trialog.tools.conformance.checks.check_probes)."""
    from trialog.bus.base import Record
    from trialog.protocol.events import ActorSpec, TrialStarted
    from trialog.protocol.inbox import PROBE
    from trialog.tools.conformance.checks import Check, check_probes
    from trialog.tools.conformance.trial import Outcome, TrialLog

    actors = (ActorSpec("alice", "player", "p"), ActorSpec("bob", "player", "p"))
    started = TrialStarted("t", spec="s", environment="e", environment_entry="x:y", environment_config="{}",
                           actors=actors, actor_classes=(), seed=1)  # fmt: skip
    logged = [
        Observation("t", tick=1, actor="alice", reward=0.5),  # the environment's reward of tick 0
        Reward("t", tick=1, receiver="alice", value=2.0, sender="judge"),
        Message("t", tick=1, sender="conformance", receivers=("alice",), message_id="p", payload=f'{{"{PROBE}": "1"}}'),
    ]
    for answered, problems in (([[0, "env", 0.5], [1, "judge", 2.0]], 0), ([[1, "judge", 2.0]], 1)):
        body = f'{{"{PROBE}.ack": "1", "rewards": {answered}, "messages": []}}'.replace("'", '"')
        answer = Message("t", tick=1, sender="alice", receivers=("conformance",), message_id="probe-1", payload=body)
        log = TrialLog(bus, "t")
        log.records = [Record(EVENTS, 0, i, b"t", bus.codec.encode(e), tuple(e.headers()), 0)
                       for i, e in enumerate([*logged, answer])]  # fmt: skip
        check = Check("receives rewards")
        check_probes(bus, Outcome(started, log, {}, set(), probes=[("1", "alice", 2)]), check, Check("duplicates"))
        assert len(check.problems) == problems, check.problems


# --- the rules, applied everywhere ---------------------------------------------------------------------


async def test_one_rule_for_rewards_and_messages_everywhere(bus, tmp_path):
    (tmp_path / "counts.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "counts.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("counts")
        ended = await ctl.wait_ended(tid, timeout=20)
        assert (ended.reason, ended.tick) == ("max_ticks", 5)
        # Three finite rewards of 1e308 for one tick (retroactive, after the end), and one that counts.
        with pytest.raises(TrialError, match="value 1e\\+308"):
            await ctl.send_reward(tid, "bob", 1e308, tick=1, sender="j1")
        for judge in ("j1", "j2", "j3"):
            await bus.publish(EVENTS, Reward(tid, tick=1, receiver="bob", value=1e308, sender=judge))
        await ctl.send_reward(tid, "bob", 4.0, tick=1, sender="j4")
        await wait_for(lambda: len(letters(bus, tid)) >= 6, timeout=10, what="the dead letters")
        await asyncio.sleep(0.2)
        returns = ctl.returns(tid)
    reasons = sorted(letter.reason for letter in letters(bus, tid))
    assert len(reasons) == 6 and all(letter.service == "orchestrator" for letter in letters(bus, tid)), reasons
    assert sum("value 1e+308 is not a finite number" in r for r in reasons) == 4
    assert (
        sum("to itself" in r for r in reasons) == 1
        and sum("'nobody', which addresses nobody" in r for r in reasons) == 1
    )

    # The SDK refused what could not count, with the reason.
    for actor in ("alice", "bob"):
        refused = REFUSED[(tid, actor)]
        assert len(refused) == 3 * 4 and sum("to itself" in r for r in refused) == 4
        assert (
            sum("value 10000000000000.0" in r for r in refused) == 4
            and sum("addresses nobody" in r for r in refused) == 4
        )

    fold = await read_trial(bus, tid)
    samples = {(s.tick, s.actor): s for s in fold.samples()}
    for (tick, actor), s in samples.items():
        other = "bob" if actor == "alice" else "alice"
        assert all(r.sender != actor for r in s.reward_sources), (tick, actor, s.reward_sources)
        assert all(abs(r.value) <= MAX_REWARD_VALUE for r in s.reward_sources) and math.isfinite(s.reward)
        if 1 <= tick < 5:
            assert {(r.sender, r.receiver) for r in s.reward_sources if r.sender == other} == {
                (other, "*"),
                (other, "player.*"),
            }
        assert all(m.sender != actor for m in s.messages)
    assert [r.value for r in samples[(1, "bob")].reward_sources if r.sender.startswith("j")] == [4.0]
    assert [m.message_id for m in samples[(2, "bob")].messages] == ["m-all"]
    assert samples[(2, "alice")].messages == ()

    # Live delivery: nobody got its own rewards, nor what was dead-lettered.
    for actor in ("alice", "bob"):
        got = SEEN[(tid, actor)]
        assert not [
            e for e in got if isinstance(e, RewardEvent) and (e.sender == actor or abs(e.value) > MAX_REWARD_VALUE)
        ]
    assert [e.payload for e in SEEN[(tid, "bob")] if isinstance(e, MessageEvent)] == [{"all": 1}]
    assert not [e for e in SEEN[(tid, "alice")] if isinstance(e, MessageEvent)]

    # Controller's returns and the analytics jobs: what the datalog counts.
    by_datalog = {a: sum(s.reward for s in fold.samples() if s.actor == a) for a in ("alice", "bob")}
    assert returns == pytest.approx(by_datalog)
    state = State()
    results = [
        out
        for i, e in enumerate(read_as_the_jobs_do(bus, tid))
        if (out := fold_trial(e, tid, 1000 + i, [], state)) is not None
    ]
    assert results[-1]["returns"] == pytest.approx(by_datalog)


async def test_an_environment_reward_out_of_bounds_ends_its_trial_with_the_reason(bus, tmp_path):
    (tmp_path / "counts.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "counts.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("counts", environment="huge", implementations={"alice": "random", "bob": "random"})
        ended = await ctl.wait_ended(tid, timeout=20)
    assert (
        ended.reason == "error"
        and "environment reward at tick 1 cannot count: reward value 2000000000000.0" in ended.details
    ), ended
    # Every record decodes (an observation carrying a reward out of bounds would not), and no reward
    # logged, as a record or carried by an observation, is out of bounds.
    logged = [bus.codec.decode(r.value, r.header("kind")) for r in bus.records(EVENTS) if r.trial_id == tid]
    rewards = [e for e in logged if isinstance(e, Reward)]
    rewards += [e.carried_reward() for e in logged if isinstance(e, Observation) and e.reward is not None]
    assert rewards and not [r for r in rewards if abs(r.value) > MAX_REWARD_VALUE]


# --- the datalog counts exactly what the environment applied ---------------------------------------------

SEAT_SPEC = f"""
name: seat
actor_classes:
  player:
    observation: {ROOT / "examples" / "rps" / "observation.avsc"}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 1000}}}}
actors:
  random: {{entry: "trialog.examples.rps.players:RandomPlayer"}}
  human: {{client: true}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: random}}
    - {{name: bob, class: player, implementation: human}}
  max_ticks: 6
  response_timeout_ms: 400
  timeout_policy: default_action
  inactivity_timeout_ms: 20000
  join_timeout_ms: 20000
"""


def holderless(bus, tid: str, tick: int, move: str) -> tuple:
    """Bob's action for ``tick`` tagged with his seat's key but without the ``holder`` header:
    genuine, yet not from the seat's holder (what the environment refuses)."""
    action = Action(tid, tick=tick, actor="bob", payload=bus.store.encode("rps.Move", move))
    value, headers = bus.codec.encode(action), action.headers()
    tag = compute_tag(bus.trust.keyring.key("seat.bob", tid), mac_input(tid.encode(), dict(headers), value))
    return (EVENTS, tid.encode(), value, [*headers, (MAC_PREFIX + "seat.bob", tag)])


def applied_by_the_environment(samples: dict) -> dict[int, str]:
    """Bob's move at each tick as the environment applied it: alice's next observation says it."""
    return {
        t: samples[(t + 1, "alice")].observation["their_last_move"]
        for (t, a) in samples
        if a == "alice" and (t + 1, "alice") in samples
    }


async def play_seat(bus, tid: str, refused_at: set[int], sent: list) -> str:
    """Bob joins with holder bob-1 and plays PAPER, but at ``refused_at`` ticks his action
    goes out without the holder header (and no proper one follows: the timeout decides)."""
    async with join(bus, tid, "bob", holder="bob-1", timeout=20) as session:
        async for event in session:
            match event:
                case ObservationEvent(final=False, tick=tick) if tick in refused_at:
                    sent.extend(await bus.send_many([holderless(bus, tid, tick, "SCISSORS")]))
                case ObservationEvent(final=False):
                    session.act("PAPER")
                case EndEvent(reason=reason):
                    return reason
    return "left"


async def test_a_seat_action_the_environment_refused_is_no_played_action(bus, tmp_path):
    (tmp_path / "seat.yaml").write_text(SEAT_SPEC)
    spec = load_spec(tmp_path / "seat.yaml", bus.store)
    sent: list = []
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("seat")
        assert await play_seat(bus, tid, {1, 3}, sent) == "max_ticks"
        await ctl.wait_ended(tid, timeout=20)
        await wait_for(lambda: len(letters(bus, tid)) >= 2, timeout=10, what="the refused actions' letters")
    assert [(d.offset, d.service) for d in letters(bus, tid)] == [(s.offset, "environment") for s in sent]
    assert all("refused: action at tick" in d.reason and "holder" in d.reason for d in letters(bus, tid))
    fold = await read_trial(bus, tid)
    samples = {(s.tick, s.actor): s for s in fold.samples()}
    bob = {t: (s.action, s.timed_out) for (t, a), s in samples.items() if a == "bob" and t < 6}
    assert bob == {t: ("ROCK", True) if t in (1, 3) else ("PAPER", False) for t in range(6)}
    assert {t: m for t, (m, _) in bob.items()} == applied_by_the_environment(samples)
    assert fold.check() == []


async def test_the_fold_applies_the_environments_action_rules(bus):
    spec = load_spec(ROOT / "examples" / "rps" / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=4, max_ticks=6)
        ended = await ctl.wait_ended(tid, timeout=20)
    records = [r for r in bus.records(EVENTS) if r.trial_id == tid]
    events = [(bus.codec.decode(r.value, r.header("kind")), r.headers) for r in records]

    def at(kind, tick, actor):
        return next(i for i, (e, _) in enumerate(events) if e.KIND == kind and (e.tick, e.actor) == (tick, actor))

    real = events[at("action", 2, "alice")][0]
    # Right after alice's observation of tick 2, an action whose payload does not decode in
    # her class's schema; and after the last (final) observations, an answer to them.
    events.insert(at("observation", 2, "alice") + 1, (dataclasses.replace(real, payload=b"\xc3\x01garbage"), ()))
    final = events[at("observation", ended.tick, "bob")][0]
    assert final.final
    events.insert(
        at("observation", ended.tick, "bob") + 1, (Action(tid, tick=ended.tick, actor="bob", payload=real.payload), ())
    )
    fold = TrialFold(tid, bus.store)
    for event, headers in events:
        fold.add(event, headers)
    samples = {(s.tick, s.actor): s for s in fold.samples()}
    assert samples[(2, "alice")].action_avro == real.payload and not samples[(2, "alice")].timed_out
    assert samples[(ended.tick, "bob")].action_avro is None
    assert fold.problems == [] and fold.check() == []
    # What the environment applied, tick by tick (the other player's next observation says it).
    for me, other in (("alice", "bob"), ("bob", "alice")):
        for t in range(ended.tick):
            assert samples[(t, me)].action == samples[(t + 1, other)].observation["their_last_move"]


# --- a late reward after an orchestrator restart ------------------------------------------------------


async def test_a_restarted_orchestrator_judges_a_late_reward_as_before(bus):
    spec = load_spec(ROOT / "examples" / "rps" / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("rps", seed=9, max_ticks=4)
        await ctl.wait_ended(tid, timeout=20)
        # Another trial ends after it: the restarted orchestrator resumes past both.
        other = await ctl.start_trial("rps", seed=10, max_ticks=2)
        await ctl.wait_ended(other, timeout=20)
        await asyncio.sleep(1.2)  # a commit
        [old] = [loop for loop in d.loops if loop.group == "orchestrator"]
        old.stop()
        await d.tasks[d.loops.index(old)]
        d.loops.remove(old)
        [new] = d.add([orchestrator_loop(bus, [spec])])
        await asyncio.wait_for(new.ready.wait(), 10)
        assert tid not in new.handler.ended and tid not in new.handler.live_trials
        late = [
            Reward(tid, tick=2, receiver="alice", value=3.0, sender="judge"),  # counts
            Reward(tid, tick=2, receiver="alice", value=1e13, sender="judge2"),  # out of bounds
            Reward(tid, tick=5, receiver="bob", value=1.0, sender="judge3"),  # past the end's tick
        ]
        for reward in late:
            await bus.publish(EVENTS, reward)
        await wait_for(lambda: len(letters(bus, tid)) >= 2, timeout=10, what="the late rewards' letters")
        await asyncio.sleep(0.3)
    reasons = sorted(d.reason for d in letters(bus, tid))
    assert (
        len(reasons) == 2
        and "value 10000000000000.0" in reasons[1]
        and "between 0 and the current one (4)" in reasons[0]
    ), reasons
    assert new.handler.ended[tid] == (4, {"alice": "player", "bob": "player"})  # recalled from the log
    fold = await read_trial(bus, tid)
    assert [(r.sender, r.value) for s in fold.samples() for r in s.reward_sources if r.sender.startswith("judge")] == [
        ("judge", 3.0)
    ]


async def test_the_index_records_at_a_trials_end_the_returns_a_watcher_of_events_counts(bus, tmp_path):
    """`trialog train` follows the `trials` index, not every event: the ended trial's record
    carries per actor the returns that a controller watching events counts and the datalog folds —
    the rewards refused (forged senders, values out of bounds, nobody reached) left out alike."""
    (tmp_path / "counts.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "counts.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl), Controller(bus, name="index", follow=TRIALS) as index:
        tid = new_trial_id()
        following = (
            asyncio.create_task(index.wait_started(tid, timeout=20)),
            asyncio.create_task(index.wait_result(tid, timeout=20)),
        )
        await asyncio.sleep(0)  # waiting for it before it is asked for
        await ctl.start_trial("counts", trial_id=tid)  # the controller watching events counts its returns
        watched = await ctl.wait_result(tid, timeout=20)
        started, ended = await asyncio.gather(*following)
    assert isinstance(started, TrialRecord) and started.status in ("running", "ended")
    assert (ended.reason, ended.tick) == (watched.reason, watched.tick) == ("max_ticks", 5)
    fold = await read_trial(bus, tid)
    folded = {a: sum(s.reward for s in fold.samples() if s.actor == a and s.tick <= 5) for a in ("alice", "bob")}
    assert ended.returns == watched.returns == pytest.approx(folded)
    assert all(ended.returns[a] != 0 for a in ("alice", "bob")), ended.returns  # something counted for each
    assert index.ticks_seen == 5
    with pytest.raises(ValueError, match="follows"):
        Controller(bus, follow="control")


def test_returns_kept_compactly_are_the_aggregation_of_the_latest_reward_of_each_sender():
    """Returns keeps a receiver's first sender in arrays and the others by entry: whatever the
    mix — corrections, several senders on one tick, patterns, zero confidences, rewards past the
    end — its totals are I-4's aggregation over the latest reward of each (receiver, tick, sender)."""
    import random

    actors = {"alice": "player", "bob": "player", "carol": "coach"}
    rng = random.Random(7)
    for _ in range(50):
        returns, latest = Returns(actors), {}
        for _ in range(rng.randrange(1, 200)):
            r = Reward(
                "t",
                tick=rng.randrange(0, 40),
                receiver=rng.choice(["alice", "bob", "carol", "*", "player.*"]),
                sender=rng.choice(["env", "env", "env", "judge", "carol", "alice"]),
                value=rng.uniform(-5, 5),
                confidence=rng.choice([1.0, 1.0, 0.5, 2.0, 0.0]),
            )
            returns.add(r)
            latest[(r.receiver, r.tick, r.sender)] = r
        last = rng.choice([None, 20, 39])
        expected = {}
        for name, actor_class in actors.items():
            per_tick = {}
            for (receiver, tick, sender), r in latest.items():
                if (last is None or tick <= last) and reaches(receiver, sender, name, actor_class):
                    per_tick.setdefault(tick, []).append(r)
            expected[name] = sum(aggregate(rs) for rs in per_tick.values())
        assert returns.totals(last) == pytest.approx(expected, abs=1e-9)
    assert Returns(actors).totals() == dict.fromkeys(actors, 0.0)


async def test_a_controller_following_the_index_answers_as_one_watching_events(bus):
    """A trial's running then ended records start and end it; an ended record with no running
    one before it is a trial that never started (a seat nobody joined), as trial.ended before
    trial.started is for a controller watching events; a rejected one fails both waits."""
    await bus.create_topics()
    async with bus, Controller(bus, name="index", follow=TRIALS) as index:
        ran, never, refused = new_trial_id(), new_trial_id(), new_trial_id()
        waits = {
            t: (index.wait_started(t, timeout=10), index.wait_result(t, timeout=10)) for t in (ran, never, refused)
        }
        tasks = {t: [asyncio.create_task(w) for w in ws] for t, ws in waits.items()}
        await asyncio.sleep(0)
        await bus.publish(TRIALS, TrialRecord(ran, status="running"))
        await bus.publish(TRIALS, TrialRecord(ran, status="ended", ticks=7, reason="max_ticks", returns={"a": 2.5}))
        await bus.publish(TRIALS, TrialRecord(never, status="ended", reason="join_timeout"))
        await bus.publish(TRIALS, TrialRecord(refused, status="rejected", reason="unknown spec"))
        started, ended = await asyncio.gather(*tasks[ran])
        assert started.status == "running" and (ended.tick, ended.reason, ended.returns) == (7, "max_ticks", {"a": 2.5})
        assert index.returns(ran) == {"a": 2.5} and index.ticks_seen == 7
        with pytest.raises(TrialError, match="ended before it started: join_timeout"):
            await tasks[never][0]
        assert (await tasks[never][1]).reason == "join_timeout"
        for task in tasks[refused]:
            with pytest.raises(TrialError, match="rejected: unknown spec"):
                await task
