"""Real-time trials (``tick_interval_ms``) on the in-memory bus: one step per interval
whether actors answer at once or never; a missing action at the deadline becomes the
default action, logged as ``actor.timeout``; deadlines on a steady clock at the trial's phase."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.protocol.events import Action, ActorTimeout, Observation
from trialog.protocol.topics import EVENTS
from trialog.runtime.pace import next_deadline, trial_phase
from trialog.spec import parse_spec

SPEC = Path(__file__).resolve().parents[1] / "integration" / "trialtest.yaml"
INTERVAL_MS, TICKS = 60, 6


def real_time_spec(bus):
    raw = yaml.safe_load(SPEC.read_text())
    raw["name"] = "realtime"
    # No early win: both trials run to max_ticks, so the pacing bound below is exact.
    raw["environments"]["rps"]["config"]["target_score"] = 1000
    raw["trial"]["tick_interval_ms"] = INTERVAL_MS
    raw["trial"]["response_timeout_ms"] = 10  # ignored in real time: the deadline is the interval
    return parse_spec(raw, file=str(SPEC), base_dir=SPEC.parent, store=bus.store)


async def events_of(bus, trial_id):
    consumer = bus.consumer([EVENTS])
    await consumer.start()
    out = [
        bus.codec.decode(r.value, r.header("kind"))
        for r in await consumer.poll(timeout_ms=100, max_records=100_000)
        if r.trial_id == trial_id
    ]
    await consumer.stop()
    return out


async def test_steps_are_paced_and_a_silent_actor_gets_the_default_action(memory_settings):
    bus = MemoryBus(memory_settings)
    async with deployment(bus, real_time_spec(bus)) as (_, ctl):
        t0 = time.monotonic()
        fast = await ctl.start_trial("realtime", max_ticks=TICKS)
        await ctl.wait_ended(fast, timeout=30)
        paced = time.monotonic() - t0
        silent = await ctl.start_trial("realtime", max_ticks=TICKS, implementations={"bob": "silent"})
        await ctl.wait_ended(silent, timeout=30)
        fast_events, silent_events = await events_of(bus, fast), await events_of(bus, silent)
    # Both agents answer at once, yet the trial takes an interval per tick.
    assert max(e.tick for e in fast_events if isinstance(e, Observation)) == TICKS
    assert paced >= TICKS * INTERVAL_MS / 1000 * 0.9
    # bob never answers: every tick, a logged timeout at the deadline, and the trial goes on.
    # (alice answers at once; on a loaded machine she too may miss a 60 ms deadline.)
    assert [e.tick for e in silent_events if isinstance(e, ActorTimeout) and e.actor == "bob"] == list(range(TICKS))
    assert all(e.policy == "default_action" for e in silent_events if isinstance(e, ActorTimeout))
    alice = {e.tick for e in silent_events if isinstance(e, Action | ActorTimeout) and e.actor == "alice"}
    assert alice == set(range(TICKS))
    assert not [e for e in silent_events if isinstance(e, Action) and e.actor == "bob"]
    assert max(e.tick for e in silent_events if isinstance(e, Observation)) == TICKS


def test_deadlines_keep_a_steady_clock_at_the_trials_phase():
    interval, phase = 0.15, 0.05
    # The first tick: at the trial's phase, one to two intervals after its observations.
    first = next_deadline(None, 100.0031, interval, phase)
    assert first == pytest.approx(100.25) and 100.0031 + interval <= first < 100.0031 + 2 * interval
    # Observations written a few ms after the deadline: the next tick is due an interval after
    # the deadline, not after the writing, so ticks do not grow by what a step costs.
    second = next_deadline(first, first + 0.004, interval, phase)
    assert second == pytest.approx(first + interval)
    # After a stall longer than half an interval the clock starts again, at the same phase.
    late = second + 0.2
    third = next_deadline(second, late, interval, phase)
    assert late + interval <= third < late + 2 * interval
    assert (third - phase) / interval == pytest.approx(round((third - phase) / interval))
    # Trials of one phase are due at the same instant, whenever their observations were
    # written within the interval: stepped in one turn of the event loop.
    assert len({next_deadline(None, now, interval, phase) for now in (7.0001, 7.05, 7.0999)}) == 1


def test_trials_are_spread_over_the_phases_of_the_interval():
    ids = [f"trial-{i}" for i in range(300)]
    phases = [trial_phase(t, 0.15) for t in ids]
    assert phases == [trial_phase(t, 0.15) for t in ids]  # the same on any host, any time
    assert sorted(set(phases)) == pytest.approx([0.0, 0.05, 0.1])  # three, 50 ms apart
    assert min(phases.count(p) for p in set(phases)) > 70  # about a third each
    assert sorted({trial_phase(t, 1.0) for t in ids}) == pytest.approx([k * 0.05 for k in range(20)])
    assert {trial_phase(t, 0.03) for t in ids} == {0.0}  # shorter than a step: one phase
