"""The replay's reader of observations and actions (``Feeder``) folds exactly what ``feed``
folds: the same samples, the same problems, the same records refused for the same reason —
on the records as logged and on records altered in every way the fast reading could miss."""

from __future__ import annotations

import dataclasses
import gc
import struct
from pathlib import Path

import pytest

from tests.harness import deployment
from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus, MemoryConsumer
from trialog.datalog import replay as replay_module
from trialog.datalog.collector import PUT_OFF
from trialog.datalog.replay import Feeder, feed
from trialog.datalog.samples import TrialFold
from trialog.protocol.events import Action, Observation
from trialog.protocol.in_place import TickBodies
from trialog.protocol.topics import EVENTS
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


async def logged(bus: MemoryBus) -> tuple[str, list[Record]]:
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=5)
        await ctl.wait_ended(tid, timeout=20)
    return tid, [r for r in bus.records(EVENTS) if r.trial_id == tid]


def retagged(bus: MemoryBus, record: Record, *, key=None, value=None, headers=None) -> Record:
    """The record with another key, value or headers, tagged anew (its tags hold)."""
    key = record.key if key is None else key
    value = record.value if value is None else value
    base = [(k, v) for k, v in (record.headers if headers is None else headers) if not k.startswith("mac.")]
    tags = bus.trust.tag(key.decode(errors="replace"), base, value)
    return Record(record.role, record.partition, record.offset, key, value, tuple(base + tags), record.timestamp_ms)


def with_header(record: Record, name: str, value: bytes | None) -> list[tuple[str, bytes]]:
    """The record's headers with ``name`` set to ``value`` (None: left out)."""
    return [(k, value if k == name else v) for k, v in record.headers if k != name or value is not None]


def folded(bus: MemoryBus, tid: str, records: list[Record], fast: bool) -> tuple:
    fold, reader = TrialFold(tid, bus.store), Feeder(bus)
    for r in records:
        if fast:
            reader(fold, r)
        else:
            feed(fold, bus, r)
    samples = [(s.to_json(), s.observation_avro, s.action_avro) for s in fold.samples()]
    return samples, fold.problems, fold.check(), fold.events, fold.stepped, fold.tick


def variants(bus: MemoryBus, tid: str, records: list[Record]) -> dict[str, list[Record]]:
    """The logged records with one observation or action (of tick 2) altered."""
    obs = next(r for r in records if r.header("kind") == Observation.KIND and r.header("tick") == "2")
    act = next(r for r in records if r.header("kind") == Action.KIND and r.header("tick") == "2")
    action = bus.codec.decode(act.value, Action.KIND)
    observation = bus.codec.decode(obs.value, Observation.KIND)
    body = obs.value[10:]
    # The payload's length written in two bytes where one does: Avro reads it the same.
    size = len(observation.payload)
    long_size = bytes([((size << 1) & 0x7F) | 0x80, (size << 1) >> 7])
    at = body.index(observation.payload) - 1
    overlong = obs.value[: 10 + at] + long_size + body[at + 1 :]
    other_actor = "bob" if observation.actor == "alice" else "alice"
    assert observation.reward is not None  # rock-paper-scissors rewards every round: the observation carries it
    final = 10 + at + 1 + size + 2  # the final flag, after the payload and the two flags before it
    with_flag = lambda flag: obs.value[:final] + flag + obs.value[final + 1 :]  # noqa: E731
    reward_at = final + 2  # after the union's branch: the reward's eight bytes
    with_reward = lambda value: obs.value[:reward_at] + struct.pack("<d", value)  # noqa: E731
    out = {
        "as logged": {},
        "observation tick header off by one": {"obs": retagged(bus, obs, headers=with_header(obs, "tick", b"3"))},
        "observation tick header not canonical": {"obs": retagged(bus, obs, headers=with_header(obs, "tick", b"02"))},
        "observation for another actor": {
            "obs": retagged(bus, obs, headers=with_header(obs, "receiver", other_actor.encode()))
        },
        "observation without a receiver": {"obs": retagged(bus, obs, headers=with_header(obs, "receiver", None))},
        "observation of another trial's key": {"obs": retagged(bus, obs, key=b"another")},
        "observation cut short": {"obs": retagged(bus, obs, value=obs.value[:-1])},
        "observation with a byte after it": {"obs": retagged(bus, obs, value=obs.value + b"\x00")},
        "observation with a flag of 2": {"obs": retagged(bus, obs, value=with_flag(b"\x02"))},
        "observation final": {"obs": retagged(bus, obs, value=with_flag(b"\x01"))},
        "observation carrying another reward": {"obs": retagged(bus, obs, value=with_reward(-2.5))},
        "observation carrying a reward of nan": {"obs": retagged(bus, obs, value=with_reward(float("nan")))},
        "observation carrying a reward without its header": {
            "obs": retagged(bus, obs, headers=with_header(obs, "reward", None))
        },
        "observation carrying no reward with the header": {
            "obs": retagged(bus, obs, value=obs.value[: final + 1] + b"\x00")
        },
        "observation with an overlong length": {"obs": retagged(bus, obs, value=overlong)},
        "observation forged": {  # altered after it was tagged
            "obs": dataclasses.replace(obs, value=with_flag(b"\x01"))
        },
        "observation with two kind headers": {
            "obs": retagged(bus, obs, headers=[("kind", Action.KIND.encode()), *obs.headers])
        },
        "observation with an id": {"obs": retagged(bus, obs, headers=[*obs.headers, ("id", b"x")])},
        "observation without a value": {
            "obs": Record(obs.role, obs.partition, obs.offset, obs.key, None, obs.headers, obs.timestamp_ms)
        },
        "action with a policy version": {
            "act": retagged(bus, act, value=bus.codec.encode(dataclasses.replace(action, policy_version=7)))
        },
        "action with a large policy version": {
            "act": retagged(bus, act, value=bus.codec.encode(dataclasses.replace(action, policy_version=1 << 40)))
        },
        "action with a receiver": {"act": retagged(bus, act, headers=with_header(act, "receiver", b"bob"))},
        "action from another actor": {
            "act": retagged(bus, act, headers=with_header(act, "sender", other_actor.encode()))
        },
        "action written as an observation": {"act": retagged(bus, act, value=obs.value)},
        "action cut short": {"act": retagged(bus, act, value=act.value[:-1])},
    }
    originals = {"obs": obs, "act": act}  # by name: a record is not hashable
    return {
        name: [next((new for which, new in changed.items() if originals[which] is r), r) for r in records]
        for name, changed in out.items()
    }


async def test_the_fast_reading_folds_what_feed_folds(bus):
    tid, records = await logged(bus)
    for name, altered in variants(bus, tid, records).items():
        assert folded(bus, tid, altered, fast=True) == folded(bus, tid, altered, fast=False), name


async def test_records_feed_refuses_are_still_refused_with_their_reason(bus):
    tid, records = await logged(bus)
    cases = variants(bus, tid, records)
    found = {name: folded(bus, tid, cases[name], fast=True)[1] for name in cases}
    assert found["as logged"] == []
    assert any("undecodable record: headers do not match the body: tick header 3" in p for p in found[
        "observation tick header off by one"]), found  # fmt: skip
    assert any("record key 'another' is not the trial of its body" in p for p in found[
        "observation of another trial's key"]), found  # fmt: skip
    assert any("1 trailing bytes" in p for p in found["observation with a byte after it"]), found
    assert any("neither 0 nor 1" in p for p in found["observation with a flag of 2"]), found
    assert any("reward value nan is not a finite number" in p for p in found["observation carrying a reward of nan"])
    assert any("no reward header but the body carries a reward" in p for p in found[
        "observation carrying a reward without its header"]), found  # fmt: skip
    assert any("reward header b'1' but the body carries none" in p for p in found[
        "observation carrying no reward with the header"]), found  # fmt: skip
    assert found["observation carrying another reward"] == []
    assert any(p.startswith("offset") and "refused:" in p for p in found["observation forged"]), found
    # Read the slow way and accepted: the same sample as logged.
    assert (
        folded(bus, tid, cases["observation with an overlong length"], fast=True)[0]
        == folded(bus, tid, records, fast=True)[0]
    )


async def test_a_policy_version_reaches_the_sample(bus):
    tid, records = await logged(bus)
    samples = folded(bus, tid, variants(bus, tid, records)["action with a large policy version"], fast=True)[0]
    assert [s["policy_version"] for s, _, _ in samples if s["tick"] == 2 and s["policy_version"]] == [1 << 40]


async def test_a_transition_is_what_the_two_samples_say(bus):
    """What the learner takes in at a step (TrialFold.transition) is read off sample(t) and sample(t + 1)."""
    tid, records = await logged(bus)
    fold, reader = TrialFold(tid, bus.store), Feeder(bus)
    for r in records:
        reader(fold, r)
    steps = sorted(fold._observations)
    assert len(steps) > 4
    for tick, actor in steps:
        now, after = fold.sample(tick, actor), fold.sample(tick + 1, actor)
        expected = None
        if now is not None and after is not None and now.action is not None:
            expected = (
                now.observation,
                now.action,
                now.reward,
                after.observation,
                after.terminated,
                now.policy_version,
            )
        assert fold.transition(tick, actor) == expected
    last_tick, actor = steps[-1]
    assert fold.transition(last_tick, actor) is None  # no observation after the last
    assert fold.transition(0, actor, lambda sender: False) == (
        *fold.transition(0, actor)[:2],
        0.0,
        *fold.transition(0, actor)[3:],
    )


async def test_read_trials_folds_in_small_polls_with_full_collections_put_off(bus, monkeypatch):
    """What ``read_trials`` folds is what the per-record feed folds; it reads at most
    READ_AT_ONCE records a poll, with the collector's full collections put off while it
    folds, and puts the threshold back once the partition is read."""
    tid, records = await logged(bus)
    monkeypatch.setattr(replay_module, "READ_AT_ONCE", 16)  # a trial of a few dozen records: several polls
    polls, thresholds = [], []
    real_poll, real_call = MemoryConsumer.poll, replay_module.Feeder.__call__

    async def poll(self, timeout_ms=100, max_records=None):
        polls.append(max_records)
        return await real_poll(self, timeout_ms, max_records)

    def call(self, fold, record):
        thresholds.append(gc.get_threshold()[2])
        return real_call(self, fold, record)

    monkeypatch.setattr(MemoryConsumer, "poll", poll)
    monkeypatch.setattr(replay_module.Feeder, "__call__", call)
    before = gc.get_threshold()
    folds = [f async for f in replay_module.read_trials(bus, lambda r: r.trial_id == tid)]
    assert gc.get_threshold() == before
    assert set(thresholds) == {PUT_OFF}
    assert len(records) > replay_module.READ_AT_ONCE
    assert polls.count(replay_module.READ_AT_ONCE) >= 2  # the partition's (the index's poll is another)
    [fold] = folds
    samples = [(s.to_json(), s.observation_avro, s.action_avro) for s in fold.samples()]
    assert (samples, fold.problems) == folded(bus, tid, records, fast=False)[:2]


async def test_the_readers_caches_stay_bounded_whatever_keys_come(bus, monkeypatch):
    """The records are untrusted input: their keys and headers fill the reader's caches, each
    emptied once it holds ``CACHED`` entries — the cache of body prefixes too, kept per schema."""
    tid, records = await logged(bus)
    monkeypatch.setattr(TickBodies, "CACHED", 8)
    reader = Feeder(bus)
    obs = next(r for r in records if r.header("kind") == Observation.KIND and r.header("tick") == "2")
    act = next(r for r in records if r.header("kind") == Action.KIND and r.header("tick") == "2")
    for i in range(50):
        for r in (obs, act):
            other = retagged(bus, r, headers=with_header(r, "tick", str(100 + i).encode()))
            reader(TrialFold(tid, bus.store), other)  # a new tick each: one entry more in the ticks' cache
    observation = bus.codec.decode(obs.value, Observation.KIND)
    for i in range(50):
        other = dataclasses.replace(observation, trial_id=f"{tid}-{i}")
        record = retagged(bus, obs, key=other.trial_id.encode(), value=bus.codec.encode(other))
        assert reader(TrialFold(other.trial_id, bus.store), record) is not None  # read, not refused
    bodies = reader.bodies
    assert 0 < len(bodies._ticks) <= TickBodies.CACHED  # noqa: SLF001
    assert len(bodies._heads) == 2  # noqa: SLF001 - the observations' schema and the actions'
    assert all(0 < len(by_key) <= TickBodies.CACHED for by_key in bodies._heads.values())  # noqa: SLF001
