"""The trial lifecycle on a real Kafka broker, asserting on the log itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.integration import fixtures
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller
from trialog.errors import TrialError
from trialog.protocol.events import (
    Action,
    ActorJoined,
    ActorTimeout,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialStarted,
    with_carried_rewards,
)
from trialog.protocol.rewards import aggregate
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


async def read_trial(bus: KafkaBus, trial_id: str) -> list:
    """Every event of a trial, in log order, straight from the events topic."""
    consumer = bus.consumer(["events"], partitions=[bus.partition_of(trial_id)])
    await consumer.start()
    try:
        end = (await consumer.end_offsets([("events", bus.partition_of(trial_id))]))[
            ("events", bus.partition_of(trial_id))
        ]
        out, position = [], 0
        while position < end:
            for r in await consumer.poll(timeout_ms=1000):
                position = r.offset + 1
                if r.trial_id == trial_id:
                    out.append(bus.codec.decode(r.value, r.header("kind")))
        return out
    finally:
        await consumer.stop()


@pytest.fixture
async def running(kafka_settings):
    bus = KafkaBus(kafka_settings)
    specs = [load_spec(HERE / "trialtest.yaml", bus.store), load_spec(HERE / "trialtest_limits.yaml", bus.store)]
    async with deployment(bus, specs) as (d, ctl):
        yield bus, ctl


async def ended(ctl: Controller, tid: str, timeout: float = 60) -> TrialEnded:
    return await ctl.wait_ended(tid, timeout=timeout)


async def test_a_slow_environment_ticks_at_its_own_pace_not_a_polls_timeout(running):
    """An update that waits (50 ms asleep) runs off the event loop, so its observations are
    written while the environment's next fetch may be on its way; the loop holds its partition
    from fetching back what it writes (docs/performance.md). No tick may then wait out a
    poll's timeout (200 ms) for records already fetched."""
    bus, ctl = running
    tid = await ctl.start_trial("trialtest", seed=3, max_ticks=60, environment="slow")
    assert (await ended(ctl, tid)).reason == "max_ticks"
    p = bus.partition_of(tid)
    consumer = bus.consumer(["events"], partitions=[p])
    await consumer.start()
    try:
        end = (await consumer.end_offsets([("events", p)]))[("events", p)]
        stamps, position = {}, 0
        while position < end:
            for r in await consumer.poll(timeout_ms=1000):
                position = r.offset + 1
                if r.trial_id == tid and r.header("kind") == "observation" and r.header("receiver") == "alice":
                    stamps[int(r.header("tick"))] = r.timestamp_ms
    finally:
        await consumer.stop()
    ticks = sorted(stamps)
    assert ticks == list(range(61))
    durations = sorted(stamps[t] - stamps[t - 1] for t in ticks[1:])
    assert durations[0] >= 45  # the update's own 50 ms (millisecond timestamps)
    assert durations[len(durations) // 2] < 150, durations


async def test_end_reasons(running):
    bus, ctl = running
    cases = {
        "environment": await ctl.start_trial("trialtest", seed=1),
        "max_ticks": await ctl.start_trial("trialtest", seed=2, max_ticks=3, environment="slow"),
        "terminated-soft": await ctl.start_trial("trialtest", environment="slow"),
        "terminated-hard": await ctl.start_trial("trialtest", environment="slow"),
        "inactivity": await ctl.start_trial("trialtest-limits", implementations={"alice": "silent", "bob": "silent"}),
        "wall_clock": await ctl.start_trial("trialtest-limits", environment="slow", max_ticks=10_000),
        "join_timeout": await ctl.start_trial("trialtest", implementations={"bob": "human"}),
        "error": await ctl.start_trial("trialtest", environment="exploding"),
    }
    await ctl.wait_started(cases["terminated-soft"])
    await ctl.wait_started(cases["terminated-hard"])
    await asyncio.sleep(0.5)
    await ctl.terminate(cases["terminated-soft"])
    await ctl.terminate(cases["terminated-hard"], hard=True)
    reasons = {name: (await ended(ctl, tid)).reason for name, tid in cases.items()}
    assert reasons == {
        "environment": "environment",
        "max_ticks": "max_ticks",
        "terminated-soft": "terminated",
        "terminated-hard": "terminated",
        "inactivity": "inactivity",
        "wall_clock": "wall_clock",
        "join_timeout": "join_timeout",
        "error": "error",
    }
    # The log says the same: one trial.ended per trial, with that reason.
    for name, tid in cases.items():
        events = await read_trial(bus, tid)
        ends = [e for e in events if isinstance(e, TrialEnded)]
        assert len(ends) == 1 and ends[0].reason == reasons[name], (name, ends)
    max_ticks = await read_trial(bus, cases["max_ticks"])
    assert max(e.tick for e in max_ticks if isinstance(e, Observation)) == 3
    # A soft terminate lets the environment finish its tick: the last observations are final.
    soft = await read_trial(bus, cases["terminated-soft"])
    last = max(e.tick for e in soft if isinstance(e, Observation))
    assert all(e.final for e in soft if isinstance(e, Observation) and e.tick == last)


async def test_rewards_from_three_sources_and_retroactive_reward(running):
    bus, ctl = running
    tid = await ctl.start_trial(
        "trialtest", environment="slow", max_ticks=12, implementations={"alice": "rewarding", "bob": "rewarding"}
    )
    await ctl.wait_started(tid)
    await wait_for(lambda: ctl.last_tick(tid) >= 6, what="tick 6")
    # A retroactive reward from outside (an evaluator) for tick 1, while the trial is at tick >= 6.
    await ctl.send_reward(tid, "alice", 10.0, tick=1, confidence=1.0, sender="judge")
    end = await ended(ctl, tid)
    assert end.reason == "max_ticks"
    events = await read_trial(bus, tid)
    at_tick_1 = [
        e for e in with_carried_rewards(events) if isinstance(e, Reward) and e.tick == 1 and e.receiver == "alice"
    ]
    assert sorted(r.sender for r in at_tick_1) == ["bob", "env", "judge"]
    env_value = next(r.value for r in at_tick_1 if r.sender == "env")
    expected = (1.0 * env_value + 0.5 * 2.0 + 1.0 * 10.0) / (1.0 + 0.5 + 1.0)
    assert aggregate(at_tick_1) == pytest.approx(expected)
    # Delivered live: alice's session saw the judge's reward for tick 1 after later observations.
    seen = fixtures.SEEN[(tid, "alice")]
    judged = [i for i, e in enumerate(seen) if type(e).__name__ == "RewardEvent" and e.sender == "judge"]
    assert len(judged) == 1
    later_obs = [e.tick for e in seen[: judged[0]] if type(e).__name__ == "ObservationEvent"]
    assert max(later_obs) >= 5 and seen[judged[0]].tick == 1


async def test_message_round_trip(running):
    bus, ctl = running
    tid = await ctl.start_trial("trialtest", max_ticks=4, implementations={"alice": "rewarding", "bob": "rewarding"})
    await ended(ctl, tid)
    messages = [e for e in await read_trial(bus, tid) if isinstance(e, Message)]
    hellos = {(m.sender, m.receivers) for m in messages if "hello" in m.payload}
    replies = {(m.sender, m.receivers) for m in messages if "reply" in m.payload}
    assert hellos == {("alice", ("bob",)), ("bob", ("alice",))}
    assert replies == {("alice", ("bob",)), ("bob", ("alice",))}
    got = {type(e).__name__ for e in fixtures.SEEN[(tid, "alice")]}
    assert "MessageEvent" in got


async def test_rejected_start_request_comes_back(running):
    _, ctl = running
    tid = await ctl.start_trial("trialtest", implementations={"alice": "no-such-impl"})
    with pytest.raises(TrialError, match="no-such-impl"):
        await ctl.wait_started(tid, timeout=30)
    unknown = await ctl.start_trial("no-such-spec")
    with pytest.raises(TrialError, match="unknown spec"):
        await ctl.wait_started(unknown, timeout=30)


async def test_response_timeout_default_action_and_client_join(running):
    bus, ctl = running
    tid = await ctl.start_trial("trialtest", max_ticks=2, implementations={"bob": "silent"})
    end = await ended(ctl, tid)
    events = await read_trial(bus, tid)
    assert end.reason == "max_ticks"
    assert [e.tick for e in events if isinstance(e, ActorTimeout)] == [0, 1]
    # A client actor joins: the trial waits for it, then starts.
    tid = await ctl.start_trial("trialtest", max_ticks=2, implementations={"bob": "human"})
    await asyncio.sleep(0.5)
    await bus.publish("events", ActorJoined(tid, actor="bob", implementation="human"))
    started = await ctl.wait_started(tid, timeout=30)
    assert isinstance(started, TrialStarted)
    await ctl.terminate(tid, hard=True)
    assert (await ended(ctl, tid)).reason == "terminated"


async def test_actions_and_observations_alternate_per_tick(running):
    bus, ctl = running
    tid = await ctl.start_trial("trialtest", seed=3)
    end = await ended(ctl, tid)
    events = await read_trial(bus, tid)
    for tick in range(end.tick):
        obs = [e for e in events if isinstance(e, Observation) and e.tick == tick]
        acts = [e for e in events if isinstance(e, Action) and e.tick == tick]
        assert {o.actor for o in obs} == {"alice", "bob"} and {a.actor for a in acts} == {"alice", "bob"}
        assert max(events.index(o) for o in obs) < min(events.index(a) for a in acts)


async def test_client_actor_joins_and_plays(running):
    from trialog.actor import EndEvent, ObservationEvent
    from trialog.client_actor import join

    bus, ctl = running
    tid = await ctl.start_trial("trialtest", max_ticks=6, implementations={"bob": "human"})
    moves = []
    async with join(KafkaBus(bus.settings), tid, "bob", timeout=30) as session:
        async for event in session:
            match event:
                case ObservationEvent(final=False, tick=tick):
                    moves.append(tick)
                    session.act("PAPER")
                case EndEvent(reason=reason):
                    break
    assert reason in ("max_ticks", "environment")
    events = await read_trial(bus, tid)
    bob_actions = [e for e in events if isinstance(e, Action) and e.actor == "bob"]
    assert [a.tick for a in bob_actions] == moves and moves
    assert not [e for e in events if isinstance(e, ActorTimeout)]
