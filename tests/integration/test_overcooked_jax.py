"""CoGrid's Overcooked on JAX stepped in batches (examples/overcooked/jax.yaml), on a real
broker: trials stepped together replay alone to the same bytes (``replay --verify``), and a
new environment instance that rebuilds them from the log alone finds no difference."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog import cli
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trial
from trialog.datalog.verify import verify
from trialog.runtime.environment_runtime import EnvironmentHandler
from trialog.services.environment.main import loops_for as env_loops
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
SPEC = Path(__file__).resolve().parents[2] / "examples" / "overcooked" / "jax.yaml"
TRIALS, TICKS = 6, 40


@pytest.fixture(autouse=True)
def jax_backend():
    """CoGrid's backend is one per process: JAX for these tests (the environment service runs
    in this process), unset again after them for the numpy tests."""
    from cogrid.backend import set_backend
    from cogrid.backend._dispatch import _reset_backend_for_testing

    _reset_backend_for_testing()
    set_backend("jax")
    yield
    _reset_backend_for_testing()


def flags(bus: KafkaBus) -> list[str]:
    s = bus.settings
    return ["--bootstrap-servers", s.bootstrap_servers, "--topic-prefix", s.topic_prefix, "--partitions", "4"]


async def test_trials_stepped_together_replay_alone_to_the_same_bytes(kafka_settings, capsys):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        ids = [await ctl.start_trial(spec.name, seed=100 + i, max_ticks=TICKS) for i in range(TRIALS)]
        ends = await asyncio.gather(*(ctl.wait_ended(tid, timeout=300) for tid in ids))
        folds = [await read_trial(bus, tid) for tid in ids]
        [handler] = [loop.handler for loop in d.loops if isinstance(loop.handler, EnvironmentHandler)]
    assert [(e.reason, e.tick) for e in ends] == [("max_ticks", TICKS)] * TRIALS
    # Fewer calls than steps: trials went through update_batch together.
    assert 0 < handler.batches < TRIALS * TICKS, handler.batches
    delivered = 0.0
    for fold in folds:
        verdict = verify(fold.started, fold.samples(), bus.store, spec, fold.parameter_changes)
        assert verdict.ok and verdict.ticks == TICKS + 1, verdict  # ticks 0 … TICKS observed
        delivered += sum(s.reward for s in fold.samples())
    assert delivered > 0, "the planners delivered nothing: rewards were never compared"
    assert await asyncio.to_thread(cli.main, ["replay", ids[0], "--verify", "--spec", str(SPEC), *flags(bus)]) == 0
    assert "deterministic" in capsys.readouterr().out


async def test_an_instance_taking_over_rebuilds_batched_trials_alone_without_a_difference(kafka_settings):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec, env=False) as (d, ctl):
        first = d.add(env_loops(bus, spec))
        await d.ready(timeout=120)
        ids = [await ctl.start_trial(spec.name, seed=200 + i, max_ticks=TICKS) for i in range(TRIALS)]
        await wait_for(
            lambda: all(ctl.last_tick(t) >= TICKS // 3 for t in ids), timeout=300, what="every trial a third through"
        )
        for loop in first:
            loop.stop()
        await asyncio.gather(*(d.tasks[d.loops.index(loop)] for loop in first))
        second = d.add(env_loops(bus, spec))  # catches up from the trials' starts, each trial alone
        ends = await asyncio.gather(*(ctl.wait_ended(tid, timeout=300) for tid in ids))
        folds = [await read_trial(bus, tid) for tid in ids]
    assert [(e.reason, e.tick) for e in ends] == [("max_ticks", TICKS)] * TRIALS
    assert sum(part.mismatches for loop in second for part in loop.parts.values()) == 0
    assert sum(loop.handler.batches for loop in second) > 0  # and it went on in batches once live
    for fold in folds:
        assert verify(fold.started, fold.samples(), bus.store, spec, fold.parameter_changes).ok
