"""Learning through the log, on the real broker: batched decisions off the event loop,
phases in the log, model versions on actions, a learner SIGKILLed mid-training."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.harness import deployment
from tests.integration import fixtures
from trialog import model_registry
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller
from trialog.datalog.replay import read_trials
from trialog.learn.memory import transitions
from trialog.learn.through_log import run_phases
from trialog.learn.train import Preset, Schedule, derived_spec
from trialog.spec import load_spec
from trialog.tools.campaign import local_services, start_service, wait_ready

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


async def _durations(
    ctl: Controller, spec: str, implementations: dict[str, str], trials: int, seed: int
) -> list[float]:
    async def one(i: int) -> float:
        t0 = time.monotonic()
        tid = await ctl.start_trial(spec, seed=seed + i, implementations=implementations)
        ended = await ctl.wait_ended(tid, timeout=120)
        assert ended.reason == "max_ticks"
        return time.monotonic() - t0

    return list(await asyncio.gather(*(one(i) for i in range(trials))))


async def test_slow_batched_decide_of_one_implementation_does_not_slow_another(kafka_settings):
    """Every service runs in this one event loop: a decide on the loop would stall them all."""
    bus = KafkaBus(kafka_settings)
    spec = load_spec(HERE / "learning.yaml", bus.store)
    async with deployment(bus, [spec]) as (_, ctl):
        alone = await _durations(ctl, spec.name, {}, 4, seed=0)
        fixtures.SlowPolicy.BATCHES.clear()
        slow_task = asyncio.create_task(_durations(ctl, spec.name, {"alice": "slow", "bob": "slow"}, 4, seed=100))
        await asyncio.sleep(1.0)  # the slow trials are under way
        beside = await _durations(ctl, spec.name, {}, 4, seed=200)
        slow = await slow_task
    # 20 ticks at >= 0.25 s per decide call: the slow trials take >= 5 s each.
    assert min(slow) >= 5.0
    # The fast trials beside them finish about as fast as alone (generous margin for a busy CI machine).
    assert max(beside) < max(2.5, 3 * max(alone)), (alone, beside)
    assert max(beside) < min(slow) / 2
    # Batched: one call decided for several trials' observations (4 trials x 2 actors pending per tick).
    assert max(fixtures.SlowPolicy.BATCHES) >= 4 and sum(fixtures.SlowPolicy.BATCHES) == 4 * 2 * 20


async def _latest(bus, model: str):
    return (await model_registry.latest_versions(bus)).get(model)


async def test_phases_versions_and_a_learner_killed_mid_training_resumes(kafka_settings, tmp_path):
    preset = Preset(
        name="itest-dqn",
        spec=str(ROOT / "examples" / "cartpole" / "spec.yaml"),
        implementation="dqn",
        agent={
            "learning_starts": 200,
            "train_frequency": 100,
            "gradient_steps": 10,
            "hidden": [16, 16],
            "exploration_steps": 1000,
        },
        schedule=Schedule(
            heatup_steps=200, steps_between_evaluations=600, evaluation_trials=2, total_steps=1200, concurrency=4
        ),
    )
    spec_file = derived_spec(preset, tmp_path)
    spec = load_spec(spec_file)
    settings = dataclasses.replace(kafka_settings, model_store=str(tmp_path / "models"))
    bus = KafkaBus(settings)
    await bus.create_topics()
    logs = tmp_path / "logs"
    logs.mkdir()
    learner_args = ["learner", "--implementation", "dqn", "--experiment", preset.name]
    with local_services(settings, str(spec_file), log_dir=str(logs), learners=[learner_args[1:]]) as procs:
        async with bus:
            first = asyncio.create_task(run_phases(settings, preset, spec, quiet=True))
            # Mid-training: once two versions are out, SIGKILL the learner and start another.
            deadline = time.monotonic() + 240
            while (v := await _latest(bus, preset.name)) is None or v.version < 2:
                assert time.monotonic() < deadline and not first.done(), "the learner published no second version"
                await asyncio.sleep(0.3)
            before = await _latest(bus, preset.name)
            os.kill(procs["learner-0"].pid, signal.SIGKILL)
            procs["learner-0"].wait()
            procs["learner-0"], port = start_service(
                settings, str(spec_file), learner_args, logs / "learner-restarted.log"
            )
            wait_ready({"learner-0": procs["learner-0"]}, {"learner-0": port}, logs)
            result = await first
            # More training after the restart: the resumed learner publishes on from the last version.
            more = dataclasses.replace(
                preset, seed=10_000, schedule=dataclasses.replace(preset.schedule, heatup_steps=0, total_steps=600)
            )
            await run_phases(settings, more, spec, quiet=True)
            after = await _latest(bus, preset.name)
            folds = [f async for f in read_trials(bus, lambda r: r.experiment == preset.name)]

    assert result.evaluations, "no evaluation ran"
    restarted_log = (logs / "learner-restarted.log").read_text()
    assert '"learner resumed from the last version"' in restarted_log
    assert f'"version":{before.version}' in restarted_log or f'"version": {before.version}' in restarted_log
    assert after.version > before.version

    # Phases in the log: every trial of the experiment says which one it belonged to.
    phases = {f.started.phase for f in folds}
    assert phases == {"heatup", "train", "evaluate"}
    # Samples carry the version that chose them: none in heatup before any model, increasing over training.
    versions = [
        s.policy_version
        for f in folds
        if f.started.phase in ("train", "evaluate")
        for s in f.samples()
        if s.action is not None
    ]
    assert versions and max(v for v in versions if v is not None) >= after.version - 1
    assert len({v for v in versions if v is not None}) >= 3
    heatup_versions = {
        s.policy_version for f in folds if f.started.phase == "heatup" for s in f.samples() if s.action is not None
    }
    assert heatup_versions <= {None, 1}
    # What the learner counted is what the log holds for heatup and train — the restart refilled its
    # memory from the log without counting those trials twice.
    logged = sum(
        len(t) for f in folds if f.started.phase in ("heatup", "train") if (t := transitions(f.samples())) is not None
    )
    assert before.meta["env_steps"] < after.meta["env_steps"] <= logged


async def test_an_evaluation_beside_training_plays_the_version_it_evaluates_in_every_trial(kafka_settings, tmp_path):
    """`evaluate_beside_training`: the next stretch of training runs while an evaluation's trials
    act with the version it evaluates, pinned, whatever newer versions the learner publishes; and
    every stretch is evaluated, though the learner (1,000 gradient steps a round) lags the actors —
    training waits at the next stretch's end until the evaluation before it has its version (it ran
    on to the budget while the first one waited: two evaluations, a slow CI run's failure)."""
    preset = Preset(
        name="itest-beside",
        spec=str(ROOT / "examples" / "cartpole" / "spec.yaml"),
        implementation="dqn",
        agent={"learning_starts": 100, "train_frequency": 50, "gradient_steps": 1000, "hidden": [16, 16]},
        schedule=Schedule(
            heatup_steps=100, steps_between_evaluations=300, evaluation_trials=3, total_steps=1200, concurrency=4,
            evaluate_beside_training=True,
        ),
    )  # fmt: skip
    spec_file = derived_spec(preset, tmp_path)
    settings = dataclasses.replace(kafka_settings, model_store=str(tmp_path / "models"))
    bus = KafkaBus(settings)
    await bus.create_topics()
    (tmp_path / "logs").mkdir()
    learner = ["--implementation", "dqn", "--experiment", preset.name]
    with local_services(settings, str(spec_file), log_dir=str(tmp_path / "logs"), learners=[learner]) as services:
        async with bus:
            # As `trialog train` runs it: an evaluation starts once the actor services serve its version,
            # not a fixed second later (a stretch of 300 steps can end within that second on a loaded machine).
            served = functools.partial(services.served_version, "dqn")
            result = await run_phases(settings, preset, load_spec(spec_file), quiet=True, served=served)
            folds = [f async for f in read_trials(bus, lambda r: r.experiment == preset.name)]
            async with Controller(bus) as ctl:
                index = {r.trial_id: r for r in await ctl.list_trials() if r.experiment == preset.name}

    evaluated = [e.model_version for e in result.evaluations]
    assert len(evaluated) >= 3 and evaluated == sorted(evaluated) and evaluated[0] >= 1, evaluated
    by_version: dict[int, int] = {}
    for f in folds:
        if f.started.phase == "evaluate":
            (version,) = {s.policy_version for s in f.samples() if s.action is not None}  # one version per trial
            by_version[version] = by_version.get(version, 0) + 1
    assert by_version == {v: 3 * evaluated.count(v) for v in evaluated}, (by_version, evaluated)
    # Training went on beside the evaluations but the last: a train trial ran while one ran (evaluating
    # between stretches, every train trial of a stretch ends before its evaluation's trials start).
    evaluations = [r for r in index.values() if r.phase == "evaluate"]
    beside = [
        t for t in index.values() if t.phase == "train"
        if any(t.created_ms < e.updated_ms and e.created_ms < t.updated_ms for e in evaluations)
    ]  # fmt: skip
    assert beside, "no training trial ran while an evaluation ran"
    # And no stretch waited for its slowest trial: when the ended trials' steps reached an evaluation's,
    # training trials were in flight, to count in the next stretch. (Were every stretch's trials ended
    # before its evaluation, no trial could start before a stretch's end and end after it.)
    trained = sorted((t for t in index.values() if t.phase in ("heatup", "train")), key=lambda t: t.updated_ms)
    ends = list(zip(itertools.accumulate(t.ticks for t in trained), (t.updated_ms for t in trained)))
    stretch_ends = [next(ms for steps, ms in ends if steps >= e.env_steps) for e in result.evaluations[:-1]]
    in_flight = [t for end in stretch_ends for t in trained if t.created_ms < end < t.updated_ms]
    assert in_flight, "every stretch's training trials had ended when its evaluation's steps were reached"
    assert result.env_steps >= 1200 and result.env_steps == sum(t.ticks for t in trained)


def test_trialog_train_runs_a_preset_and_its_exit_code_is_the_validation_rule(kafka_settings, tmp_path):
    """`trialog train PRESET` as documented: progress, a table, a plot with its data; exit 0 when the rule holds."""
    from tests.integration.training import train

    preset = f"""
from trialog.learn.train import Preset, Schedule, Validation
preset = Preset(name="tiny", spec={str(ROOT / "examples" / "cartpole" / "spec.yaml")!r}, implementation="dqn",
                agent={{"learning_starts": 100, "train_frequency": 100, "gradient_steps": 5, "hidden": [8]}},
                schedule=Schedule(heatup_steps=100, steps_between_evaluations=300, evaluation_trials=2, \
total_steps=300, concurrency=4),
                validation=Validation(min_reward_threshold=5))
"""
    done = train(kafka_settings, tmp_path, preset, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "eval return" in done.stdout and "validation: mean eval return ≥ 5" in done.stdout and "PASSED" in done.stdout
    )
    assert "heatup" in done.stderr and "evaluation" in done.stderr  # the progress lines name the phase
    assert "mean return" in done.stderr  # a line per evaluation
    for suffix in ("png", "csv", "json"):
        assert (tmp_path / "run" / f"eval_return.{suffix}").stat().st_size > 0
    # summary.json, with the fields `--in-process` writes too (tests/unit/test_learn_in_process.py).
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["mode"] == "log" and summary["valid"] is True and summary["on_policy"] is False
    assert summary["env_steps"] >= 300 and summary["wall_s"] > 0 and summary["discarded"] == 0
    assert summary["evaluations"] and summary["final_evaluation"] == summary["evaluations"][-1][1]
    assert summary["model_version"] >= 1 and "tiny (through Trialog)" in done.stdout
    assert summary["resumed_from"] == 0

    # Again under the same topic prefix: the first run's model is there, and the learner would
    # train on from it. Refused, with the way out, before anything starts...
    again = train(kafka_settings, tmp_path, preset, "--out", str(tmp_path / "again"), timeout=300)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "model 'tiny' already has versions" in again.stderr and "--resume" in again.stderr
    assert not (tmp_path / "again" / "logs").exists()
    # ...and with --resume, trained on from it and said so.
    resumed = train(kafka_settings, tmp_path, preset, "--out", str(tmp_path / "resumed"), "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "training on from v" in resumed.stderr
    again_summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert again_summary["resumed_from"] >= summary["model_version"]
    assert again_summary["model_version"] > again_summary["resumed_from"]
