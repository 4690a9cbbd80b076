"""Regression tests of the runtime's reliability on a real broker: duplicates that change
nothing, a start no environment serves, nothing after the end, re-simulation after a
parameter change, and a slow environment that slows only its own trials."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.integration.test_dead_letters import read_letters
from trialog.bus.kafka import KafkaBus
from trialog.datalog.archive import Archive
from trialog.datalog.replay import read_trial, trial_records
from trialog.datalog.verify import verify
from trialog.protocol.events import TrialStarted
from trialog.protocol.topics import EVENTS
from trialog.runtime.service import ServiceLoop
from trialog.services.logger.main import loop_for as logger_loop
from trialog.services.orchestrator.handler import OrchestratorHandler
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


@pytest.fixture
def bus(kafka_settings):
    return KafkaBus(kafka_settings)


async def test_a_resent_start_of_an_ended_trial_changes_nothing(bus, tmp_path):
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        d.add([logger_loop(bus, tmp_path, grace_s=0.2)])
        tid = await ctl.start_trial("trialtest", seed=3, environment="slow", max_ticks=12)
        assert (await ctl.wait_ended(tid, timeout=60)).reason == "max_ticks"
        await wait_for(lambda: Archive(tmp_path).entry(tid), timeout=30, what="the trial archived")
        before = [r async for r in trial_records(bus, tid)]
        [started] = [r for r in before if r.header("kind") == TrialStarted.KIND]
        await bus.send_many(
            [(EVENTS, started.key, started.value, list(started.headers))]
        )  # byte for byte, tags included
        await asyncio.sleep(4)  # time enough for any service to replay the trial
        after = [r async for r in trial_records(bus, tid, start=before[0].offset)]
        letters = await read_letters(bus, settle_s=1.0)
    assert [r.header("kind") for r in after] == [r.header("kind") for r in before] + [TrialStarted.KIND]
    assert not Archive(tmp_path).corrections(tid)
    assert not letters  # a repeat is applied once (the first time), not a bad record


async def test_a_start_no_environment_serves_ends_with_an_error_and_pins_nothing(bus):
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec, env=False, orchestrator=False) as (d, ctl):
        handler = OrchestratorHandler({spec.name: spec}, environment_timeout_s=2)
        [loop] = d.add([ServiceLoop(bus, handler, group="orchestrator")])
        await d.ready()
        tid = await ctl.start_trial("trialtest", seed=1)
        ended = await ctl.wait_ended(tid, timeout=30)
        assert ended.reason == "error" and "no environment service" in ended.details
        await wait_for(lambda: not handler.live_trials, timeout=10, what="the orchestrator to read the end back")
        assert loop.handler.safe_offset(EVENTS, bus.partition_of(tid)) is None


async def test_nothing_after_the_end_counts(bus):
    """The orchestrator ends a slow trial on its wall clock while its environment is mid-tick."""
    spec = load_spec(HERE / "trialtest_limits.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest-limits", environment="slow", max_ticks=1000)
        ended = await ctl.wait_ended(tid, timeout=30)
        await asyncio.sleep(1)
        fold = await read_trial(bus, tid)
    assert ended.reason == "wall_clock"
    assert max(s.tick for s in fold.samples()) <= ended.tick
    assert fold.ended == ended


async def test_verify_replays_a_parameter_change(bus):
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest", seed=4, environment="scaled", max_ticks=30)
        await wait_for(lambda: ctl.last_tick(tid) >= 5, timeout=30, what="tick 5")
        await ctl.change_parameters(tid, {"scale": 3.0}, tick=2)  # late: before the next update
        await ctl.change_parameters(tid, {"scale": 10.0}, tick=ctl.last_tick(tid) + 8)
        assert (await ctl.wait_ended(tid, timeout=60)).reason == "max_ticks"
        fold = await read_trial(bus, tid)
    rewards = {abs(s.reward) for s in fold.samples()}
    assert {3.0, 10.0} <= rewards, rewards  # both changes reached the environment
    assert verify(fold.started, fold.samples(), bus.store, spec, fold.parameter_changes).ok
    assert not verify(fold.started, fold.samples(), bus.store, spec).ok  # without them it differs: the test can fail


async def test_a_slow_environment_slows_only_its_own_trials(bus):
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):

        async def timed(**kwargs) -> float:
            t0 = time.monotonic()
            tid = await ctl.start_trial("trialtest", **kwargs)
            assert (await ctl.wait_ended(tid, timeout=120)).reason in ("max_ticks", "environment")
            return time.monotonic() - t0

        alone = await timed(seed=1, max_ticks=20)
        slow = await ctl.start_trial("trialtest", seed=2, environment="sluggish", max_ticks=1000)  # 0.5 s per update
        await wait_for(lambda: ctl.last_tick(slow) >= 1, timeout=30, what="the slow trial under way")
        beside = await timed(seed=1, max_ticks=20)  # 20 ticks: 10 s if each waited for a 0.5 s update of the other
        await ctl.terminate(slow, hard=True)
    assert beside < max(3 * alone, 3.0), (alone, beside)
