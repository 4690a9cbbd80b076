"""The environment's reward riding in the next observation (docs/protocol.md#a-reward-an-observation-carries):
which rewards ride, and that every reader takes a carried reward as the record it stands for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.harness import deployment
from tests.unit.test_replay_feed import folded
from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus
from trialog.environment import RewardOut
from trialog.errors import CodecError
from trialog.protocol.events import Observation, Reward, with_carried_rewards
from trialog.protocol.topics import EVENTS
from trialog.runtime.step_rewards import reward_record, split_carried
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"


def test_only_the_environments_own_plain_reward_to_an_observed_actor_rides():
    plain = RewardOut("alice", 1.0)
    rewards = [
        plain,
        RewardOut("bob", 2.0, source="speed"),  # a source: a sender of its own (env/speed)
        RewardOut("carol", 3.0, confidence=0.5),
        RewardOut("dave", 4.0, user_data={"why": "x"}),
        RewardOut("*", 5.0),
        RewardOut("erin", 6.0),  # not observed at the next tick (she left)
    ]
    carried, rest = split_carried(rewards, {"alice", "bob", "carol", "dave"})
    assert carried == {"alice": plain} and carried["alice"] is plain
    assert rest == rewards[1:]  # in their order


def test_an_actor_given_two_plain_rewards_keeps_both_as_records_in_order():
    """Of one sender, a later reward for the same (receiver, tick) corrects an earlier one: carried
    after it, the first would correct the second."""
    first, second = RewardOut("alice", 1.0), RewardOut("alice", 2.0, confidence=0.5)
    carried, rest = split_carried([first, RewardOut("bob", 3.0), second], {"alice", "bob"})
    assert list(carried) == ["bob"] and rest == [first, second]


def test_a_reward_record_names_its_source_as_its_sender():
    assert reward_record("t", 3, RewardOut("a", 1.5, source="speed", user_data={"k": 1})) == Reward(
        "t", tick=3, receiver="a", value=1.5, sender="env/speed", user_data='{"k":1}'
    )


def test_what_a_carried_reward_may_be(bus):
    ok = Observation("t", tick=3, actor="a", payload=b"", reward=-2.5)
    assert bus.codec.decode(bus.codec.encode(ok), Observation.KIND) == ok
    assert ok.carried_reward() == Reward("t", tick=2, receiver="a", value=-2.5, confidence=1.0, sender="env")
    assert ("reward", b"1") in ok.headers() and ("reward", b"1") not in dataclasses.replace(ok, reward=None).headers()
    for bad, why in (
        (dataclasses.replace(ok, tick=0), "tick 0 carries no reward"),
        (dataclasses.replace(ok, reward=float("inf")), "not a finite number"),
        (dataclasses.replace(ok, reward=2e12), "not a finite number between"),
    ):
        with pytest.raises(CodecError, match=why):
            bus.codec.decode(bus.codec.encode(bad), Observation.KIND)


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


def rewards_as_records(bus, records: list[Record]) -> list[Record]:
    """The same records as an environment that writes every reward as a record of its own would
    log them: each carried reward just before its observation, which then carries none."""
    out: list[Record] = []
    for r in records:
        e = bus.codec.decode(r.value, r.header("kind"))
        if not isinstance(e, Observation) or e.reward is None:
            out.append(r)
            continue
        for event in (e.carried_reward(), dataclasses.replace(e, reward=None)):
            _, key, value, headers = bus.to_record(EVENTS, event)
            out.append(Record(EVENTS, r.partition, r.offset, key, value, tuple(headers), r.timestamp_ms))
    return out


async def test_a_carried_reward_folds_as_the_record_it_stands_for(bus):
    """Rock-paper-scissors rewards both players every round: the log holds no reward record, every
    observation after the first carries its player's; folded, the log gives the samples the same log
    gives with each carried reward written as a record of its own, just before its observation."""
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=3)
        ended = await ctl.wait_ended(tid, timeout=20)
    records = [r for r in bus.records(EVENTS) if r.trial_id == tid]
    events = [bus.codec.decode(r.value, r.header("kind")) for r in records]
    assert not [e for e in events if isinstance(e, Reward)]
    observations = [e for e in events if isinstance(e, Observation)]
    assert all((o.reward is not None) == (o.tick > 0) for o in observations) and ended.tick > 3

    as_records = rewards_as_records(bus, records)
    written = [bus.codec.decode(r.value, Reward.KIND) for r in as_records if r.header("kind") == Reward.KIND]
    assert written == [e for e in with_carried_rewards(events) if isinstance(e, Reward)]
    assert len(written) == 2 * ended.tick

    expected, problems = folded(bus, tid, as_records, fast=False)[:2]
    assert problems == [] and {s[0]["reward"] for s in expected} - {0.0}  # the rounds were won and lost
    assert folded(bus, tid, records, fast=True)[:2] == folded(bus, tid, records, fast=False)[:2] == (expected, [])


async def test_a_carried_reward_counts_after_the_end_as_its_record_would(bus):
    """An observation logged after ``trial.ended`` (its environment raced the end) does not count;
    the reward it carries does, as a reward record written after the end would (I-7): the fold gives
    the same samples either way, in its fast and its general read."""
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=5)
        ended = await ctl.wait_ended(tid, timeout=20)
    records = [r for r in bus.records(EVENTS) if r.trial_id == tid]
    end = next(r for r in records if r.header("kind") == "trial.ended")
    last = [r for r in records if r.header("kind") == Observation.KIND and r.header("tick") == str(ended.tick)]
    assert len(last) == 2 and all(r.header("reward") for r in last)
    raced = [r for r in records if r is not end and r not in last] + [end] + last

    expected = folded(bus, tid, rewards_as_records(bus, raced), fast=False)[0]
    last_round = [s[0]["reward"] for s in expected if s[0]["tick"] == ended.tick - 1]
    assert len(last_round) == 2 and set(last_round) != {0.0}  # the last round was won and lost, after the end
    assert folded(bus, tid, raced, fast=False)[0] == folded(bus, tid, raced, fast=True)[0] == expected
