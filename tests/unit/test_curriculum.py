"""Curricula (trialog.learn.curriculum), in-process: stages in turn with their partners, moving
on at their rule or their budget, every trial labelled with its stage, pools drawn per seed, the
baseline on the last evaluation's seeds, summary.json, and bad stage configs refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.unit.test_learn_in_process import Chain
from trialog.actor import Agent
from trialog.errors import SpecError, TrialogError
from trialog.learn.curriculum import STAGE, Curriculum, CurriculumResult, Stage
from trialog.learn.in_process import InProcess, train_in_process
from trialog.learn.train import Schedule, Validation
from trialog.spec import load_spec


class RecordedChain(Chain):
    """The chain, recording every trial it hosts: (seed, phase, stage, implementation per actor)."""

    trials: list[tuple[int, str, str, dict[str, str]]] = []

    def start(self):
        t = self.trial
        RecordedChain.trials.append(
            (t.seed, t.phase, t.parameters.get(STAGE, ""), {a.name: a.implementation for a in t.actors})
        )
        return super().start()


class Still(Agent):
    """A second partner (and the baseline): always action 0."""

    def decide(self, observation):
        return 0


def chain_spec(tmp_path: Path) -> str:
    spec = tmp_path / "chain.yaml"
    spec.write_text("""
name: chain
actor_classes:
  node: {observation: {type: array, items: double}, action: long, default_action: 0}
environments:
  chain: {entry: "tests.unit.test_curriculum:RecordedChain"}
actors:
  learning: {entry: "trialog.learn.dqn:DQNPolicy", config: {observation_size: 2, actions: 2}}
  partner: {entry: "tests.unit.test_learn_in_process:Partner"}
  still: {entry: "tests.unit.test_curriculum:Still"}
  person: {client: true}
  elsewhere: {external: true}
trial:
  environment: chain
  actors:
    - {name: learner, class: node, implementation: learning}
    - {name: partner, class: node, implementation: partner}
""")
    return str(spec)


def schedule(total: int, heatup: int = 0, between: int = 8) -> Schedule:
    return Schedule(
        heatup_steps=heatup, steps_between_evaluations=between, evaluation_trials=2, total_steps=total, concurrency=2
    )


def curriculum(tmp_path: Path, *stages: Stage, **changes) -> Curriculum:
    """A DQN learner playing `learner` in the chain (4 ticks a trial, its return always 10)."""
    return Curriculum(
        name="chain-curriculum",
        spec=chain_spec(tmp_path),
        implementation="learning",
        actors=("learner",),
        agent={"learning_starts": 8, "train_frequency": 8, "gradient_steps": 2, "hidden": [4], "batch_size": 4},
        stages=stages,
        **changes,
    )  # fmt: skip


def two_stages(tmp_path: Path, **changes) -> Curriculum:
    return curriculum(
        tmp_path,
        # met at its first evaluation (every return is 10): moves on long before its budget
        Stage("warm", {"partner": "partner"}, schedule(400, heatup=8), Validation(min_reward_threshold=10)),
        # never met: runs its whole budget
        Stage("mixed", {"partner": {"partner": 1, "still": 3}}, schedule(40), Validation(min_reward_threshold=11)),
        **changes,
    )


@pytest.fixture(autouse=True)
def _fresh_record():
    RecordedChain.trials = []


def test_stages_run_in_turn_moving_on_at_their_rule_or_their_budget(tmp_path):
    preset = two_stages(tmp_path)
    result = train_in_process(preset, tmp_path / "run", quiet=True)
    assert isinstance(result, CurriculumResult)
    warm, mixed = result.stages
    # warm: heatup (8 steps: 2 trials of 4), train to its first evaluation at 8, met (10 ≥ 10): done.
    assert warm["name"] == "warm" and warm["met"] is True and warm["ended_by"] == "rule"
    assert warm["env_steps"] == 8 and len(warm["evaluations"]) == 1
    # mixed: its 40 steps, an evaluation every 8, never met.
    assert mixed["met"] is False and mixed["ended_by"] == "budget"
    assert mixed["env_steps"] == 40 and len(mixed["evaluations"]) == 5
    assert result.env_steps == 48 and len(result.evaluations) == 6 and result.valid is False
    # The evaluations' env steps go on from stage to stage (the learner's counter is the run's).
    assert [e.env_steps for e in result.evaluations] == [8, 16, 24, 32, 40, 48]

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["warm", "mixed"]
    assert [(s["env_steps"], len(s["evaluations"]), s["met"]) for s in summary["stages"]] == [
        (8, 1, True),
        (40, 5, False),
    ]
    assert summary["stages"][1]["partners"] == {"partner": {"partner": 1.0, "still": 3.0}}
    assert summary["valid"] is False and summary["env_steps"] == 48


def test_a_stage_without_a_rule_runs_its_whole_budget(tmp_path):
    preset = curriculum(
        tmp_path,
        Stage("first", {"partner": "partner"}, schedule(16, heatup=8)),
        Stage("second", {"partner": "still"}, schedule(24)),
    )
    result = train_in_process(preset, tmp_path / "run", quiet=True)
    assert [(s["env_steps"], len(s["evaluations"]), s["met"], s["ended_by"]) for s in result.stages] == [
        (16, 2, None, "budget"),
        (24, 3, None, "budget"),
    ]
    assert result.valid is None


def test_every_trial_records_its_stage_and_plays_its_stages_partners(tmp_path):
    preset = two_stages(tmp_path)
    train_in_process(preset, tmp_path / "run", quiet=True)
    trials = RecordedChain.trials
    # Seeds go on across stages, one per trial, in the order trials start.
    assert sorted(seed for seed, *_ in trials) == list(range(len(trials)))
    stages = [stage for _, _, stage, _ in sorted(trials)]
    first_mixed = stages.index("mixed")
    assert set(stages[:first_mixed]) == {"warm"} and set(stages[first_mixed:]) == {"mixed"}
    mixed_stage = preset.stages[1]
    for seed, phase, stage, implementations in trials:
        assert implementations["learner"] == "learning" and phase in ("heatup", "train", "evaluate")
        if stage == "warm":
            assert implementations["partner"] == "partner"
        else:  # the pool's draw for the trial's seed
            assert implementations["partner"] == mixed_stage.draw(seed)["partner"]
    # The pool gives both, about by weight (1:3).
    drawn = [i["partner"] for _, _, stage, i in trials if stage == "mixed"]
    assert {"partner", "still"} == set(drawn) and drawn.count("still") > drawn.count("partner")


def test_pool_draws_are_by_seed_and_by_weight():
    stage = Stage("s", {"b": {"x": 1, "y": 1}, "c": "z"}, schedule(8))
    draws = [stage.draw(seed) for seed in range(400)]
    assert draws == [stage.draw(seed) for seed in range(400)]  # the same draw for the same seed, always
    assert all(d["c"] == "z" for d in draws)
    xs = sum(d["b"] == "x" for d in draws)
    assert 150 < xs < 250  # even weights: about half
    heavy = Stage("s", {"b": {"x": 1, "y": 9}}, schedule(8))
    assert sum(heavy.draw(seed)["b"] == "x" for seed in range(400)) < 80


def test_the_baseline_replays_the_last_evaluation_with_the_same_seeds_and_partners(tmp_path):
    preset = two_stages(tmp_path, baseline="still")
    result = train_in_process(preset, tmp_path / "run", quiet=True)
    b = result.baseline
    assert b is not None and b["implementation"] == "still" and len(b["returns"]) == 2
    last_eval = sorted(
        (seed, i) for seed, phase, stage, i in RecordedChain.trials if phase == "evaluate" and stage == "mixed"
    )[-2:]
    assert b["seeds"] == [seed for seed, _ in last_eval]
    baseline = [(seed, i) for seed, _, stage, i in RecordedChain.trials if stage == "baseline"]
    assert sorted(seed for seed, _ in baseline) == b["seeds"]
    for seed, implementations in baseline:  # still in the learner's seat, the same partner as the trained cook had
        assert implementations["learner"] == "still"
        assert implementations["partner"] == dict(last_eval)[seed]["partner"]
    assert b["returns"] == [10.0, 10.0] and b["trained_returns"] == result.evaluations[-1].returns
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["baseline"]["seeds"] == b["seeds"]


def test_a_shorter_total_is_shared_among_the_stages_as_their_budgets_are(tmp_path):
    preset = curriculum(
        tmp_path,
        Stage("a", {"partner": "partner"}, schedule(3_000, heatup=1_000, between=2_000)),
        Stage("b", {"partner": "still"}, schedule(1_000, between=500)),
    )
    assert preset.schedule.total_steps == 4_000 and preset.validation is None
    short = dataclasses.replace(preset, schedule=dataclasses.replace(preset.schedule, total_steps=400))
    a, b = short.stages
    assert (a.schedule.total_steps, a.schedule.heatup_steps, a.schedule.steps_between_evaluations) == (300, 300, 300)
    assert (b.schedule.total_steps, b.schedule.steps_between_evaluations) == (100, 100)
    assert short.schedule.total_steps == 400
    # Replacing anything else keeps the stages as they are.
    assert dataclasses.replace(preset, seed=5).stages == preset.stages
    with pytest.raises(TrialogError, match="total_steps must be at least 2"):
        dataclasses.replace(preset, schedule=dataclasses.replace(preset.schedule, total_steps=1))


def test_bad_stage_configs_are_refused_with_the_reason(tmp_path):
    ok = Stage("a", {"partner": "partner"}, schedule(8))
    with pytest.raises(TrialogError, match="stages must be a non-empty tuple of Stage"):
        curriculum(tmp_path)
    with pytest.raises(TrialogError, match="stage names must be unique"):
        curriculum(tmp_path, ok, ok)
    with pytest.raises(TrialogError, match="weights must be positive numbers"):
        Stage("a", {"partner": {"partner": 0}}, schedule(8))
    with pytest.raises(TrialogError, match="must be an implementation or a non-empty"):
        Stage("a", {"partner": {}}, schedule(8))
    with pytest.raises(TrialogError, match="schedule must be a Schedule"):
        Stage("a", {"partner": "partner"}, {"total_steps": 8})
    # Against the spec, when the run starts (both modes): before any trial.
    for stage, problem in [
        (Stage("a", {"carol": "partner"}, schedule(8)), "no actor 'carol' in the trial"),
        (Stage("a", {"learner": "partner"}, schedule(8)), "'learner' is played by the learning implementation"),
        (Stage("a", {"partner": "nobody"}, schedule(8)), "partner 'nobody' is no actor implementation"),
        (Stage("a", {"partner": "elsewhere"}, schedule(8)), "is an external implementation: stages take"),
    ]:
        with pytest.raises(SpecError, match=problem):
            InProcess(curriculum(tmp_path, stage), tmp_path / "bad")
    # A stage of people is checked as any (a person's seat is a partner), and runs through the log only.
    people = curriculum(tmp_path, Stage("a", {"partner": "person"}, schedule(8)))
    assert people.partners_of(load_spec(chain_spec(tmp_path))) == {"partner": ("person",)}
    with pytest.raises(TrialogError, match="'person', a person .client seat.: in-process mode plays only"):
        InProcess(people, tmp_path / "bad")
    assert RecordedChain.trials == []


def test_a_stand_in_that_does_not_load_fails_before_anything_runs(tmp_path, capsys):
    """`trialog train --person` names the scripted stand-in for the trials' seats of people: a
    name that does not load is refused with the reason before a service or trial starts."""
    from trialog.cli import main as cli_main

    out = tmp_path / "run"
    for name, reason in [("nope", "is named module:function"), ("trialog.tools.person:nobody", "cannot load")]:
        assert cli_main(["train", "dqn_cartpole", "--person", name, "--in-process", "--out", str(out)]) != 0
        assert reason in capsys.readouterr().err
    assert not out.exists()
