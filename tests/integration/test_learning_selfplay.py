"""Self-play on Overcooked through the log, on the real broker: `presets/dqn_overcooked_selfplay.py`
(shortened) plays one DQN as both cooks; the learner service takes the steps of both, trains,
publishes versions, and both cooks act with them in the evaluation. The runs' figures are in
docs/learning.md ("Self-play on Overcooked")."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.training import ROOT, latest_version, train
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trials

pytestmark = pytest.mark.integration
NAME = "selfplay-smoke"


def test_both_cooks_steps_reach_one_learner_and_both_act_with_its_versions(kafka_settings, tmp_path):
    # The shipped preset, smaller: heatup trials of 200 ticks, 2 at a time, until 400 ticks have
    # ended (a trial starting while another ends can add one or two), a round every 400
    # transitions after the first 400, then one evaluation trial.
    preset = f"""
import dataclasses
from trialog.learn.train import Schedule, load_preset
base = load_preset({str(ROOT / "presets" / "dqn_overcooked_selfplay.py")!r})
preset = dataclasses.replace(
    base, name={NAME!r},
    agent={{**base.agent, "learning_starts": 400, "train_frequency": 400, "gradient_steps": 20, "hidden": [32]}},
    schedule=Schedule(heatup_steps=400, steps_between_evaluations=400, evaluation_trials=1, total_steps=400,
                      concurrency=2),
)
"""
    done = train(kafka_settings, tmp_path, preset)
    assert done.returncode == 0, done.stderr[-3000:]  # the preset has no validation rule: 0 once it has run
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["mode"] == "log" and summary["algorithm"] == "dqn", done.stderr[-3000:]
    ticks, trials = summary["env_steps"], summary["episodes"]
    assert ticks == 200 * trials and trials >= 2  # env steps are ticks, each heatup trial's 200
    assert len(summary["evaluation_details"]) == 1 and len(summary["evaluation_details"][0]["returns"]) == 1

    version = asyncio.run(latest_version(kafka_settings, NAME))
    # The learner counts transitions, both cooks' (2 per tick), and publishes a version per round:
    # one after every 400 past the first 400. One cook's alone would be `ticks` transitions.
    rounds = 2 * ticks // 400 - 1
    assert 2 * ticks - 400 < version.meta["env_steps"] <= 2 * ticks, (ticks, version.meta)
    assert version.meta["rounds"] == rounds and version.version == rounds, (ticks, version.meta)
    assert summary["model_version"] == rounds and summary["evaluation_details"][0]["model_version"] >= 1

    async def folds():
        bus = KafkaBus(kafka_settings)
        return [f async for f in read_trials(bus, lambda r: r.experiment == NAME)]

    folded = asyncio.run(folds())
    assert sorted(f.started.phase for f in folded) == ["evaluate"] + ["heatup"] * trials
    for fold in folded:
        assert {a.implementation for a in fold.started.actors} == {"dqn"}
        samples = [s for s in fold.samples() if s.action is not None]
        by_actor = {a: [s for s in samples if s.actor == a] for a in ("cook_a", "cook_b")}
        assert all(len(s) == 200 for s in by_actor.values()), {a: len(s) for a, s in by_actor.items()}
        if fold.started.phase == "evaluate":  # both cooks acted with a learned version
            assert all((s.policy_version or 0) >= 1 for s in samples), fold.trial_id
