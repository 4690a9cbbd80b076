"""`trialog train PRESET --in-process`: the same preset in one process, no broker —
the phases, the learner fed as through the log, summary.json, rewards as the datalog
aggregates them, clear refusals, and every shipped preset end to end (short)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trialog.actor import Agent, Policy
from trialog.environment import Environment, RewardOut, Step
from trialog.errors import SpecError, TrialogError
from trialog.learn.in_process import InProcess, train_in_process
from trialog.learn.nets import init_mlp
from trialog.learn.report import table, write_summary
from trialog.learn.train import Preset, Schedule, Validation, load_preset, people_seated, shipped_presets
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole" / "spec.yaml")
SUMMARY_FIELDS = {"mode", "wall_s", "env_steps", "final_evaluation", "evaluations", "valid", "discarded"}


def tiny_dqn(**schedule) -> Preset:
    return Preset(
        name="tiny-dqn",
        spec=CARTPOLE,
        implementation="dqn",
        agent={"learning_starts": 200, "train_frequency": 100, "gradient_steps": 20, "hidden": [16, 16],
               "exploration_steps": 1_000, "learning_rate_decay_steps": 0, "seed": 3},
        schedule=Schedule(**{"heatup_steps": 200, "steps_between_evaluations": 400, "evaluation_trials": 3,
                             "total_steps": 800, "concurrency": 2, **schedule}),
        validation=Validation(min_reward_threshold=5),
    )  # fmt: skip


def test_dqn_in_process_runs_the_schedule_trains_the_policy_and_writes_its_summary(tmp_path):
    run = InProcess(tiny_dqn(), tmp_path)
    initial = init_mlp(np.random.default_rng(3), [4, 16, 16, 2])  # the learner's first weights (its seed)
    result = run.run()

    # The schedule: heatup then train until the budget, an evaluation after each stretch, each after
    # whole trials (the steps where trials end), of 3 greedy trials.
    assert result.mode == "in-process" and result.env_steps >= 800
    assert [e.env_steps >= s for e, s in zip(result.evaluations, (400, 800))] == [True, True]
    assert len(result.evaluations) == 2 and all(len(e.returns) == 3 for e in result.evaluations)
    assert all(e.mean_return == pytest.approx(np.mean(e.returns)) for e in result.evaluations)
    # Off-policy: every heatup and train step reached the learner, and it trained the rounds they owe.
    assert run.learner.env_steps == result.env_steps
    assert run.learner.rounds == run.learner.env_steps // 100 - 2 and result.model_version == run.learner.rounds
    # Training changed the policy: it acts with the learner's latest weights, no longer the initial ones.
    assert run.policy.policy_version == result.model_version > 0
    assert all(np.array_equal(run.policy.q[k], v) for k, v in run.learner.policy_weights().items())
    assert not all(np.allclose(run.policy.q[k], v) for k, v in initial.items())
    assert 0 < run.policy.env_steps <= run.learner.env_steps  # ε follows the steps its version saw

    summary = json.loads(write_summary(tmp_path, tiny_dqn(), result).read_text())
    assert SUMMARY_FIELDS <= set(summary)
    assert summary["mode"] == "in-process" and summary["discarded"] == 0 and summary["on_policy"] is False
    assert summary["env_steps"] == result.env_steps and summary["wall_s"] == round(result.seconds, 3) > 0
    assert summary["evaluations"] == [[e.env_steps, e.mean_return] for e in result.evaluations]
    assert summary["final_evaluation"] == result.evaluations[-1].mean_return
    assert summary["valid"] is (max(e.mean_return for e in result.evaluations) >= 5)


@pytest.mark.parametrize("beside", [False, True])
def test_training_trials_go_on_through_an_evaluation_only_when_it_runs_beside_training(beside, tmp_path):
    """As through the log (run_phases): evaluated beside training, the training trials in flight at a
    stretch's end go on after its evaluation, counted in the next stretch; otherwise every one ends first."""
    run = InProcess(tiny_dqn(evaluate_beside_training=beside, total_steps=1_600, concurrency=3), tmp_path)
    events: list[tuple[str, str]] = []  # ("start" | "end", trial ID) in the order they happen
    start, tick = run._start, run._tick

    def started(phase):
        trial = start(phase)
        events.append(("start", trial.info.trial_id))
        return trial

    def ticked(live):
        ended = tick(live)
        events.extend(("end", trial.info.trial_id) for trial, _, _ in ended)
        return ended

    run._start, run._tick = started, ticked
    result = run.run()

    evaluations = [i for i, (what, tid) in enumerate(events) if what == "start" and "-evaluate-" in tid]
    first_of_each = [i for i in evaluations if i - 1 not in evaluations]  # each evaluation starts its trials at once
    assert len(first_of_each) == len(result.evaluations) >= 3
    ends = {tid: i for i, (what, tid) in enumerate(events) if what == "end"}
    carried = [
        tid for i, (what, tid) in enumerate(events)
        if what == "start" and "-train-" in tid and any(i < e < ends[tid] for e in first_of_each)
    ]  # fmt: skip
    assert bool(carried) is beside, carried
    # Every trial started ends (the last stretch's trials before the last evaluation), and counts once.
    assert set(ends) == {tid for what, tid in events if what == "start"}
    assert result.env_steps >= 1_600 and result.episodes == sum("-evaluate-" not in t for t in ends)


def test_ppo_in_process_collects_by_version_and_trains_on_every_transition(tmp_path):
    def ppo(concurrency: int) -> Preset:
        return Preset(
            name=f"tiny-ppo-{concurrency}",
            spec=CARTPOLE,
            implementation="ppo",
            agent={"rollout_steps": 128, "hidden": [16], "minibatches": 2, "update_epochs": 2},
            schedule=Schedule(heatup_steps=0, steps_between_evaluations=600, evaluation_trials=2, total_steps=600,
                              concurrency=concurrency),
        )  # fmt: skip

    for concurrency in (1, 4):
        run = InProcess(ppo(concurrency), tmp_path / str(concurrency))
        batches = []
        train_round = run.learner.train_round

        def recorded(train_round=train_round, batches=batches, learner=run.learner):
            loss = train_round()
            batches.append(int(learner.round_scalars["batch"]))
            return loss

        run.learner.train_round = recorded
        result = run.run()
        # Several trials at once too: a version is made at a tick boundary and the next tick acts with
        # it, so every transition is the version's being collected — none late, none discarded.
        assert result.discarded == 0 and run.learner.late == 0 and result.on_policy
        assert run.learner.env_steps == result.env_steps
        # Each batch is all of its version's transitions (at least the rollout, at most a tick's more),
        # and every step so far was trained on but those of the version still collecting.
        assert len(batches) == run.learner.rounds >= 3 and result.model_version == run.learner.rounds + 1
        assert all(128 <= b < 128 + concurrency for b in batches)
        assert sum(batches) + run.learner.current == result.env_steps


# --- any environment a spec can host: a two-actor environment that is no Gymnasium env ----------------


class Chain(Environment):
    """Two actors; each tick a reward for everyone from one source and one for `learner` alone
    from another, with more confidence; `learner` ends (terminated) at tick 4."""

    def start(self):
        return {a: [0.0, 0.0] for a in self.trial.actor_names}

    def update(self, actions):
        self.tick = getattr(self, "tick", 0) + 1
        done = self.tick >= 4
        rewards = [RewardOut("*", 1.0, source="a"), RewardOut("learner", 3.0, confidence=3.0, source="b")]
        observations = {a: [float(self.tick), float(actions[a])] for a in actions}
        return Step(observations, rewards, terminated={"learner": done, "partner": done})


class BatchedChain(Chain):
    batches: list[int] = []

    @classmethod
    def update_batch(cls, envs, actions):
        cls.batches.append(len(envs))
        return [env.update(a) for env, a in zip(envs, actions)]


class Partner(Agent):
    rewards: list = []

    def decide(self, observation):
        return 1

    def on_reward(self, reward):
        Partner.rewards.append((self.trial.trial_id, reward.tick, reward.value, reward.sender))


class NoLearner(Policy):
    def decide_batch(self, requests):
        return [0] * len(requests)


def chain_spec(tmp_path: Path, learner_entry: str = "trialog.learn.dqn:DQNPolicy", env: str = "Chain") -> str:
    spec = tmp_path / f"chain-{env}.yaml"
    spec.write_text(f"""
name: chain
actor_classes:
  node: {{observation: {{type: array, items: double}}, action: long, default_action: 0}}
environments:
  chain: {{entry: "tests.unit.test_learn_in_process:{env}"}}
actors:
  learning: {{entry: "{learner_entry}", config: {{observation_size: 2, actions: 2}}}}
  partner: {{entry: "tests.unit.test_learn_in_process:Partner"}}
  random: {{entry: "trialog.agents.random_agent:RandomAgent"}}
trial:
  environment: chain
  actors:
    - {{name: learner, class: node, implementation: random}}
    - {{name: partner, class: node, implementation: partner}}
""")
    return str(spec)


def chain_preset(tmp_path: Path, **changes) -> Preset:
    return Preset(
        name="chain",
        spec=chain_spec(tmp_path),
        implementation="learning",
        actors=("learner",),
        agent={"learning_starts": 8, "train_frequency": 8, "gradient_steps": 2, "hidden": [4], "batch_size": 4},
        schedule=Schedule(heatup_steps=8, steps_between_evaluations=8, evaluation_trials=2, total_steps=16,
                          concurrency=2),
        **changes,
    )  # fmt: skip


def test_in_process_hosts_any_spec_environment_with_its_other_actors_and_aggregates_rewards(tmp_path):
    Partner.rewards = []
    run = InProcess(chain_preset(tmp_path), tmp_path / "run")
    result = run.run()
    # Four ticks a trial; the learner's reward per tick is the confidence-weighted mean of the two
    # sources reaching it, (1·1 + 3·3) / (1 + 3) = 2.5 (I-4); the partner only gets `*`'s.
    assert result.env_steps == 4 * result.episodes >= 16
    assert [e.returns for e in result.evaluations] == [[10.0, 10.0]] * len(result.evaluations)
    memory = run.learner.memory
    assert memory.rewards[: memory.size].tolist() == [2.5] * memory.size == [2.5] * result.env_steps
    assert memory.dones[: memory.size].sum() == result.episodes  # each trial's last step terminated (tick 4)
    # What the partner (a decide-style agent, one per trial) received, as an actor service delivers it.
    trials = {t for t, *_ in Partner.rewards}
    assert len(trials) == result.episodes + 2 * len(result.evaluations)
    assert {(tick, value, sender) for _, tick, value, sender in Partner.rewards} == {
        (t, 1.0, "env/a") for t in range(4)
    }
    # Deterministic: the same preset again trains the very same weights (the baseline reproduces).
    again = InProcess(chain_preset(tmp_path), tmp_path / "again")
    again.run()
    assert run.learner.rounds == again.learner.rounds > 0
    assert all(np.array_equal(v, again.policy.q[k]) for k, v in run.policy.q.items())


def test_trials_in_flight_step_in_one_update_batch_when_the_environment_batches(tmp_path):
    BatchedChain.batches = []
    preset = dataclasses.replace(chain_preset(tmp_path), spec=chain_spec(tmp_path, env="BatchedChain"))
    result = InProcess(preset, tmp_path / "run").run()
    # Trials run 4 ticks in lockstep: 2 at a time in heatup and train, 2 in each evaluation.
    assert sum(BatchedChain.batches) == 4 * (result.episodes + 2 * len(result.evaluations))
    assert set(BatchedChain.batches) == {2}
    assert [e.returns for e in result.evaluations] == [[10.0, 10.0]] * len(result.evaluations)


def test_a_preset_that_cannot_train_in_process_is_refused_with_the_reason(tmp_path):
    with pytest.raises(SpecError, match="'random'.*is not a trialog.actor.Policy: nothing to learn"):
        InProcess(dataclasses.replace(chain_preset(tmp_path), implementation="random"), tmp_path / "a")
    with pytest.raises(SpecError, match="no actor implementation 'nope'"):
        InProcess(dataclasses.replace(chain_preset(tmp_path), implementation="nope"), tmp_path / "b")
    with pytest.raises(SpecError, match="names actors the trial does not have: 'carol'"):
        InProcess(dataclasses.replace(chain_preset(tmp_path), actors=("carol",)), tmp_path / "c")
    no_learner = dataclasses.replace(
        chain_preset(tmp_path), spec=chain_spec(tmp_path, "tests.unit.test_learn_in_process:NoLearner"), agent={}
    )
    with pytest.raises(SpecError, match="NoLearner has no learner"):
        InProcess(no_learner, tmp_path / "d")
    with pytest.raises(TrialogError, match="unknown key"):
        InProcess(dataclasses.replace(chain_preset(tmp_path), agent={"learning_rat": 1e-3}), tmp_path / "e")
    with pytest.raises(TrialogError, match="not found: name a preset file, or a shipped preset .*dqn_cartpole"):
        load_preset(tmp_path / "none.py")


def test_an_action_outside_its_schema_is_an_error_naming_the_actor(tmp_path):
    class Wrong(Agent):
        def decide(self, observation):
            return "left"

    run = InProcess(chain_preset(tmp_path), tmp_path / "run")
    run.agent_classes["partner"] = Wrong
    with pytest.raises(TrialogError, match="the action of partner .* at tick 0 does not match the action schema"):
        run.run()


# --- every shipped preset, and the command line ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.stem for p in shipped_presets().glob("*.py")))
def test_every_shipped_preset_runs_in_process(name, tmp_path):
    """Every shipped preset runs in-process, but one whose trials seat people (they play through
    the gateway): that one is refused with the reason before any trial."""
    preset = load_preset(shipped_presets() / f"{name}.py")
    if people_seated(preset, load_spec(preset.spec)):
        with pytest.raises(TrialogError, match="a person .client seat.: in-process mode plays only"):
            train_in_process(preset, tmp_path, quiet=True)
        assert not (tmp_path / "summary.json").exists()
        return
    heatup = min(preset.schedule.heatup_steps, 500)
    short = dataclasses.replace(
        preset.schedule, total_steps=1_500, steps_between_evaluations=1_500, heatup_steps=heatup
    )
    result = train_in_process(dataclasses.replace(preset, schedule=short), tmp_path, quiet=True)
    evaluations = len(getattr(preset, "stages", ())) or 1  # a curriculum evaluates once a stage at least
    assert result.env_steps >= 1_500 and len(result.evaluations) == evaluations and result.model_version > 0
    assert f"{preset.name} (in-process)" in table(preset, result)
    assert json.loads((tmp_path / "summary.json").read_text())["mode"] == "in-process"


def test_trialog_train_in_process_from_the_command_line_writes_summary_json(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(ROOT / "presets" / "dqn_cartpole.py"), "--in-process",
         "--total-steps", "1200", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    # The exit code is the preset's validation rule (475 is out of reach in 1,200 steps).
    assert done.returncode == (0 if summary["valid"] else 1), done.stdout + done.stderr
    assert SUMMARY_FIELDS <= set(summary) and summary["mode"] == "in-process" and summary["env_steps"] >= 1200
    assert "dqn-cartpole (in-process)" in done.stdout and "eval return" in done.stdout
    assert "evaluation" in done.stderr and "mean return" in done.stderr  # a progress line per evaluation
    for suffix in ("png", "csv", "json"):
        assert (out / f"eval_return.{suffix}").stat().st_size > 0


def test_resume_is_refused_in_process_before_anything_runs(tmp_path, capsys):
    """An in-process run keeps no model between runs: `--resume` there is a mistake, said at once."""
    from trialog.cli import main

    out = tmp_path / "out"
    assert main(["train", "dqn_cartpole", "--in-process", "--resume", "--out", str(out)]) == 1
    assert "--resume is for runs through the log" in capsys.readouterr().err
    assert not out.exists()
