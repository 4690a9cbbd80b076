"""`trialog train` through the log on Acrobot-v1, on the real broker: the learner service
sizes its network from the actor class's spaces (the version it publishes says 6
observations, 3 actions), and the run and the learner service write TensorBoard curves
while it runs (read back as tests/unit/test_learn_curves.py reads the in-process ones)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.training import ROOT, latest_version, train
from tests.unit.test_learn_curves import assert_curve, read_scalars

pytestmark = pytest.mark.integration


def test_trialog_train_through_the_log_sizes_the_net_from_the_spaces_and_writes_curves(kafka_settings, tmp_path):
    tb = tmp_path / "curves"
    preset = f"""
from trialog.learn.train import Preset, Schedule
preset = Preset(name="curves-acrobot", spec={str(ROOT / "examples" / "acrobot" / "spec.yaml")!r}, implementation="dqn",
                agent={{"learning_starts": 100, "train_frequency": 100, "gradient_steps": 5, "hidden": [8]}},
                schedule=Schedule(heatup_steps=100, steps_between_evaluations=1000, evaluation_trials=1, \
total_steps=1500, concurrency=2))
"""
    done = train(kafka_settings, tmp_path, preset, "--tensorboard", str(tb))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"TensorBoard curves in {tb}" in done.stderr

    version = asyncio.run(latest_version(kafka_settings, "curves-acrobot"))
    config = version.meta["config"]
    assert (config["observation_size"], config["actions"], config["hidden"]) == (6, 3, [8])

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    run = read_scalars(tb)
    returns = assert_curve(run, "train/return")
    assert len(returns) == summary["episodes"] and returns[-1][0] == summary["env_steps"]
    assert [list(p) for p in run["evaluate/mean_return"]] == summary["evaluations"]
    learner = read_scalars(tb / "learner")  # written by the learner service, another process
    assert_curve(learner, "learner/loss")
    assert_curve(learner, "learner/q_mean")
    assert max(v for _, v in assert_curve(learner, "learner/model_version")) == version.version
