"""`trialog train` through the log on Acrobot-v1, on the real broker: the learner service
sizes its network from the actor class's spaces (the version it publishes says 6
observations, 3 actions), and the run and the learner service write TensorBoard curves
while it runs (read back as tests/unit/test_learn_curves.py reads the in-process ones)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_learn_curves import assert_curve, read_scalars
from trialog import model_registry
from trialog.bus.kafka import KafkaBus
from trialog.tools.campaign import _settings_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


async def _latest(settings, model: str):
    async with KafkaBus(settings) as bus:
        return (await model_registry.latest_versions(bus)).get(model)


def test_trialog_train_through_the_log_sizes_the_net_from_the_spaces_and_writes_curves(kafka_settings, tmp_path):
    preset = tmp_path / "acrobot.py"
    preset.write_text(f"""
from trialog.learn.train import Preset, Schedule
preset = Preset(name="curves-acrobot", spec={str(ROOT / "examples" / "acrobot" / "spec.yaml")!r}, implementation="dqn",
                agent={{"learning_starts": 100, "train_frequency": 100, "gradient_steps": 5, "hidden": [8]}},
                schedule=Schedule(heatup_steps=100, steps_between_evaluations=1000, evaluation_trials=1, \
total_steps=1500, concurrency=2))
""")
    tb = tmp_path / "curves"
    env = {**_settings_env(kafka_settings), "TRIALOG_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(preset), "--out", str(tmp_path / "run"),
         "--tensorboard", str(tb)],
        env=env, capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"TensorBoard curves in {tb}" in done.stderr

    version = asyncio.run(_latest(kafka_settings, "curves-acrobot"))
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
