"""The benchmark's internals on the in-memory bus, for a few ticks: they run, and
their completeness checks hold. No timing assertions — figures come from a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import core
from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "bench" / "trivial.yaml"


async def test_trivial_trials_are_measured_and_replayed(memory_settings):
    bus = MemoryBus(memory_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_d, ctl):
        run = await core.run_trials(ctl, spec.name, 3, 5, timeout=30)
    records = await core.read_records(bus, run.trial_ids)
    core.check_complete(run, records)
    assert run.events == 3 * (4 * 5 + 2 + 3)  # observations, actions, started, environment.done, ended
    assert len(core.tick_latencies_ms(bus, [r for r in records if r.key == run.trial_ids[0].encode()])) == 5
    _, events, samples = await core.timed_replay(bus, run.trial_ids)
    assert (events, samples) == (run.events, 3 * 2 * 6)  # a sample per actor per tick, the final one included


async def test_incomplete_runs_are_refused(memory_settings):
    bus = MemoryBus(memory_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_d, ctl):
        run = await core.run_trials(ctl, spec.name, 1, 3, timeout=30)
    records = await core.read_records(bus, run.trial_ids)
    with pytest.raises(core.IncompleteRun):
        core.check_complete(run, [r for r in records if r.header("kind") != "action"])


def test_orchestrator_memory_is_measured(memory_settings):
    bus = MemoryBus(memory_settings)
    per_trial, live = core.orchestrator_bytes_per_trial(bus, load_spec(SPEC, bus.store), 50)
    assert live == 51 and per_trial > 0


def test_cpu_table_puts_each_process_beside_the_other_version():
    from bench import cpu

    ours = [{"orchestrator": 50, "environment": 300, "actors": 250, "controller": 40, "ticks_per_s": 1000}] * 3
    theirs = [{"orchestrator": 40, "environment": 200, "actors": 200, "controller": 40, "ticks_per_s": 1500}]
    text = cpu.table({"this version": ours, "HEAD~1": theirs})
    assert "| environment | 300 | 200 | 1.50 |" in text
    assert "| total | 640 | 480 | 1.33 |" in text
    assert "| ticks/s | 1000 | 1500 | 0.67 |" in text


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--trials", "-1"], ["--against", "no-such-revision-here"]])
def test_cpu_refuses_what_it_cannot_measure(argv, capsys):
    from bench import cpu

    with pytest.raises(SystemExit) as exc:
        cpu.main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


async def test_budget_times_every_service_by_record_kind():
    from bench import budget

    meter, cpu, ticks, records = await budget.trialog_alone(4, 10)
    assert ticks == 40 and cpu > 0
    # Two actors: per tick two observations and two actions, each written once and read by every service.
    # ticks 0..10 of the 4 trials and of the 2 of the warm-up
    assert sum(1 for r in records if r.header("kind") == "observation") == (4 + 2) * 11 * 2
    read = {(s, k) for (s, k, what), n in meter.counts.items() if what == "read" and n}
    written = {(s, k) for (s, k, what), n in meter.counts.items() if what == "written" and n}
    assert {("environment", "action"), ("actors", "observation"), ("orchestrator", "observation")} <= read
    assert {("environment", "observation"), ("actors", "action")} <= written
    text, figures = budget.table(meter, cpu, ticks, produce_us=20.0, consume_us=4.0)
    assert "| environment   | observation | written |" in text
    assert figures["kafka_us_per_tick"] > 0 and figures["trialog_us_per_tick"] > 0


async def test_the_raw_tick_shape_writes_a_tick_only_once_its_actions_are_read(capsys):
    """bench/topology.py's environment and actors, over a stand-in for the topic that hands every
    written record to the next poll: the logged records of real trials come out once each, and a
    trial's observations of tick t+1 only after both its actions of tick t were read."""
    from types import SimpleNamespace

    from bench import budget, topology

    _, _, _, records = await budget.trialog_alone(3, 5)
    plain = topology._plain(records)
    answers = topology._answers(plain)
    written, to_read, actions_read = [], [], set()

    async def send(items):
        for r in items:
            if r[3] == "observation" and r[4] > 0:  # its trial's actions of the tick before were read
                assert {(r[0], actor, r[4] - 1) for actor in ("a", "b")} <= actions_read
            written.append(r)
            to_read.append(SimpleNamespace(key=r[0], headers=r[2]))

    class Topic:
        async def getmany(self, timeout_ms):
            polled = to_read[:]
            to_read.clear()
            answered = [a for m in polled if (a := topology._answer(answers, m)) is not None]
            for a in answered:  # the actors' answers, read by the environment's next poll
                actions_read.add((a[0], a[5], a[4]))
                to_read.append(SimpleNamespace(key=a[0], headers=a[2]))
            written.extend(answered)
            return {"p": polled}

    await topology._environment(Topic(), send, plain, iter(range(10**6)).__next__)
    assert sorted(map(repr, written)) == sorted(map(repr, plain))  # each record once, none made up
    assert capsys.readouterr().out.splitlines()[-1].startswith(topology.DONE)
