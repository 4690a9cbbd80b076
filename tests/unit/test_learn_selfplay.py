"""Self-play in-process: `presets/dqn_overcooked_selfplay.py` (shortened) plays one DQN as both
Overcooked cooks, and its learner takes the steps of both, each cook's linked to its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from trialog.learn.in_process import InProcess
from trialog.learn.train import Schedule, load_preset

ROOT = Path(__file__).resolve().parents[2]


def test_one_dqn_plays_both_cooks_and_learns_from_the_steps_of_both(tmp_path):
    base = load_preset(ROOT / "presets" / "dqn_overcooked_selfplay.py")
    preset = dataclasses.replace(
        base,
        agent={**base.agent, "learning_starts": 400, "train_frequency": 400, "gradient_steps": 5, "hidden": [16]},
        schedule=Schedule(
            heatup_steps=400, steps_between_evaluations=400, evaluation_trials=1, total_steps=400, concurrency=2
        ),
    )
    run = InProcess(preset, tmp_path)
    assert set(run.played) == {"cook_a", "cook_b"} and set(run.policies) == {"dqn"}  # one shared policy
    result = run.run()

    assert result.env_steps == 400 and result.episodes == 2  # ticks: two heatup trials of 200
    # Two transitions a tick, one per cook: one cook's alone would owe (400 - 400) // 400 = 0 rounds.
    assert run.learner.env_steps == 2 * result.env_steps == run.learner.memory.size
    assert run.learner.rounds == 1 == result.model_version == run.policy.policy_version
    # Each cook's steps are linked to its own next ones (a 3-step return never runs from one cook
    # into the other's steps): every link leads to the transition whose observation is the one
    # this transition ended on, 199 of them in each cook's trial of 200 steps.
    memory = run.learner.memory
    linked = np.flatnonzero(memory.successors[: memory.size] >= 0)
    assert len(linked) == 2 * 2 * 199
    successors = memory.successors[linked] % memory.capacity
    assert np.array_equal(memory.next_observations[linked], memory.observations[successors])
    # ... and the two cooks' views differ (each sees itself first), so a link across cooks would show.
    assert not np.array_equal(memory.observations[linked], memory.observations[linked ^ 1])
