"""A whole trial lifecycle on the in-memory bus (the integration tests repeat it on Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.errors import TrialError
from trialog.protocol.events import Action, Observation, Reward, TrialEnded, with_carried_rewards
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"


async def test_rps_trial_runs_to_the_end(memory_settings):
    bus = MemoryBus(memory_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=1)
        ended = await ctl.wait_ended(tid, timeout=20)
    assert ended.reason in ("environment", "max_ticks")
    events = [bus.codec.decode(r.value, r.header("kind")) for r in bus.records("events") if r.trial_id == tid]
    ticks = {e.tick for e in events if isinstance(e, Observation)}
    assert ticks == set(range(ended.tick + 1))
    actions = [e for e in events if isinstance(e, Action)]
    assert len(actions) == 2 * ended.tick
    rewards = [e for e in with_carried_rewards(events) if isinstance(e, Reward)]
    assert len(rewards) == 2 * ended.tick
    assert not [e for e in events if isinstance(e, Reward)]  # each rides in its receiver's observation
    assert sum(1 for e in events if isinstance(e, TrialEnded)) == 1


async def test_rejected_start_comes_back_with_reason(memory_settings):
    bus = MemoryBus(memory_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", implementations={"alice": "nope"})
        with pytest.raises(TrialError, match="nope"):
            await ctl.wait_started(tid, timeout=10)
