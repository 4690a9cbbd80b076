"""A curriculum through the log, on the real broker: `trialog train` runs a short curriculum's
stages — a partner model made and published before them, a fixed partner, then a pool with the
model's clone in it, then a person, played by a scripted stand-in through the real gateway — with the
services and a learner; every trial in the log records its stage and plays its stage's partners, the
clone acts with the published version, the person's actions come through the gateway under its seat,
and summary.json says per stage what ran and whether its rule held."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trials
from trialog.learn.curriculum import STAGE
from trialog.learn.train import load_preset

pytestmark = pytest.mark.integration

SPEC = """
name: chain
actor_classes:
  node: {observation: {type: array, items: double}, action: long, default_action: 0}
environments:
  chain: {entry: "tests.unit.test_curriculum:RecordedChain"}
actors:
  learning: {entry: "trialog.learn.dqn:DQNPolicy", config: {observation_size: 2, actions: 2}}
  partner: {entry: "tests.unit.test_learn_in_process:Partner"}
  clone: {entry: "trialog.learn.bc:BCPolicy", config: {model: chain-clone, actions: 2}}
  person: {client: true}
trial:
  environment: chain
  actors:
    - {name: learner, class: node, implementation: learning}
    - {name: partner, class: node, implementation: partner}
  max_ticks: 50
"""

PRESET = """
from trialog.learn.curriculum import Curriculum, Stage, behaviour_clone
from trialog.learn.train import Schedule, Validation

def schedule(total, heatup=0):
    return Schedule(heatup_steps=heatup, steps_between_evaluations=16, evaluation_trials=2, total_steps=total,
                    concurrency=2)

preset = Curriculum(
    name="chain-curriculum",
    spec="chain.yaml",
    implementation="learning",
    actors=("learner",),
    agent={"learning_starts": 8, "train_frequency": 8, "gradient_steps": 2, "hidden": [4], "batch_size": 4},
    stages=(
        Stage("warm", {"partner": "partner"}, schedule(400, heatup=8), Validation(min_reward_threshold=10)),
        Stage("mixed", {"partner": {"partner": 1, "clone": 1}}, schedule(48), Validation(min_reward_threshold=11)),
        Stage("people", {"partner": "person"}, schedule(32), Validation(min_reward_threshold=11)),
    ),
    person="tests.integration.test_curriculum:steady_person",
    models={"chain-clone": behaviour_clone("partner", trials=2, epochs=3, actions=2, hidden=(8,), batch_size=4)},
    baseline="partner",
)
"""


def steady_person(page) -> int:
    """The people stage's stand-in: through the gateway's seat socket, always action 1 (as the partner)."""
    return 1


async def test_a_curriculum_runs_its_stages_through_the_log(kafka_settings, tmp_path):
    (tmp_path / "chain.yaml").write_text(SPEC)
    (tmp_path / "preset.py").write_text(PRESET)
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(tmp_path / "preset.py"), "--out", str(out),
         "--topic-prefix", kafka_settings.topic_prefix, "--bootstrap-servers", kafka_settings.bootstrap_servers],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # the last stage's rule (11) cannot hold: every return is 10
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "log"
    warm, mixed, people = summary["stages"]
    assert (warm["name"], warm["met"], warm["ended_by"]) == ("warm", True, "rule")
    assert warm["env_steps"] < 400 and len(warm["evaluations"]) == 1
    assert (mixed["name"], mixed["met"], mixed["ended_by"]) == ("mixed", False, "budget")
    assert mixed["env_steps"] >= 48 and len(mixed["evaluations"]) == 3
    assert (people["name"], people["met"], people["ended_by"]) == ("people", False, "budget")
    assert people["env_steps"] >= 32 and people["partners"] == {"partner": {"person": 1.0}}
    assert summary["env_steps"] == warm["env_steps"] + mixed["env_steps"] + people["env_steps"]
    assert "seat partner: open" not in done.stderr  # the stand-in plays the seats: no links for people
    assert "published partner model chain-clone v1 (16 demonstrations of partner" in done.stderr
    assert summary["partner_models"]["chain-clone"]["version"] == 1  # 2 trials × 4 ticks × 2 actors
    assert "mixed" in done.stdout and "not met" in done.stdout  # the stages' table

    stages = load_preset(tmp_path / "preset.py").stages
    bus = KafkaBus(kafka_settings)
    folds = [f async for f in read_trials(bus, lambda r: r.experiment == "chain-curriculum")]
    by_stage: dict[str, list] = {}
    for fold in folds:
        by_stage.setdefault(json.loads(fold.started.parameters)[STAGE], []).append(fold)
    assert set(by_stage) == {"warm", "mixed", "people", "baseline"}
    # Every trial plays its stage's partners: warm the partner, mixed the pool's draw for its seed.
    for fold in by_stage["warm"]:
        assert {a.name: a.implementation for a in fold.started.actors} == {"learner": "learning", "partner": "partner"}
    drawn = []
    for fold in by_stage["mixed"]:
        implementation = fold.started.actor("partner").implementation
        assert implementation == stages[1].draw(fold.started.seed)["partner"]
        drawn.append(implementation)
        if implementation == "clone":  # the clone acts with the model published before the stages
            versions = {s.policy_version for s in fold.samples() if s.actor == "partner" and s.action is not None}
            assert versions == {1}, versions
    assert set(drawn) == {"partner", "clone"}
    # Heatup only in the first stage; evaluations in both; the seeds never repeat but for the baseline's.
    assert {f.started.phase for f in by_stage["warm"]} == {"heatup", "train", "evaluate"}
    assert {f.started.phase for f in by_stage["mixed"]} == {"train", "evaluate"}
    # The people stage: the partner's seat held through the gateway, every tick's action the stand-in's.
    for fold in [*by_stage["people"], *by_stage["baseline"]]:
        assert fold.started.actor("partner").implementation == "person" and fold.ended.reason != "error"
        acted = [s for s in fold.samples() if s.actor == "partner"]
        assert acted and all(s.action == 1 for s in acted[:-1]), [(s.tick, s.action) for s in acted]
    assert {f.started.phase for f in by_stage["people"]} == {"train", "evaluate"}
    seeds = [f.started.seed for s in ("warm", "mixed", "people") for f in by_stage[s]]
    assert len(seeds) == len(set(seeds))
    assert sorted(f.started.seed for f in by_stage["baseline"]) == summary["baseline"]["seeds"]
    assert all(f.started.actor("learner").implementation == "partner" for f in by_stage["baseline"])
