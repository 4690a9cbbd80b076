"""`trialog train` through the log with TD3 on Pendulum-v1, on the real broker: the policy's
float actions travel as trialog.Tensors to the environment service and back to the learner
service, which sizes its networks from the Box (3 observations, 1 action in [-2, 2]), trains
and publishes versions the actor service loads. The full run's figures are in docs/learning.md."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.training import ROOT, latest_version, train

pytestmark = pytest.mark.integration


def test_td3_trains_on_pendulum_through_the_log(kafka_settings, tmp_path):
    preset = f"""
from trialog.learn.train import Preset, Schedule
preset = Preset(name="td3-smoke", spec={str(ROOT / "examples" / "pendulum" / "spec.yaml")!r}, implementation="td3",
                agent={{"learning_starts": 200, "train_frequency": 100, "gradient_steps": 10, "hidden": [16],
                        "batch_size": 32}},
                schedule=Schedule(heatup_steps=200, steps_between_evaluations=400, evaluation_trials=1, \
total_steps=600, concurrency=2))
"""
    done = train(kafka_settings, tmp_path, preset)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["algorithm"] == "td3" and summary["mode"] == "log", done.stderr[-3000:]
    assert summary["env_steps"] >= 600 and summary["evaluations"], done.stderr[-3000:]
    # Pendulum's returns lie in [-16.3 * 200, 0]: the evaluation played whole trials of torques.
    assert all(-3300 < mean < 0 for _, mean in summary["evaluations"])

    version = asyncio.run(latest_version(kafka_settings, "td3-smoke"))
    config = version.meta["config"]
    assert (config["observation_size"], config["action_size"]) == (3, 1)
    assert (config["action_low"], config["action_high"]) == ([-2.0], [2.0])
    assert version.meta["updates"] >= 10 and version.algorithm == "td3"
    assert summary["evaluation_details"][-1]["model_version"] >= 1  # the actors acted with a learned version
