"""TD3 for Box actions (trialog.learn.td3): sized from a Box's spaces, its actions through the
protocol and back, hand-written gradients that match finite differences, critic updates that
fit a fixed batch, and weights that round-trip through the model registry's format."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from trialog.actor import DecideRequest
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError
from trialog.learn.in_process import InProcess, train_in_process
from trialog.learn.memory import Transitions, transitions
from trialog.learn.nets import mlp
from trialog.learn.td3 import TD3Config, TD3Learner, TD3Policy, backward, forward
from trialog.learn.train import Preset, Schedule, derived_spec, load_preset
from trialog.model_registry import make_version
from trialog.protocol.codec import SchemaStore
from trialog.runtime.threads import one_blas_thread
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
PENDULUM = ROOT / "examples" / "pendulum" / "spec.yaml"
SIZED = {"observation_size": 3, "action_size": 1, "action_low": [-2.0], "action_high": [2.0]}
TINY = {"hidden": [16, 16], "batch_size": 32, "learning_starts": 100, "train_frequency": 50, "gradient_steps": 10}


def request(phase: str, tick: int = 0, observation=(1.0, 0.0, 0.5)) -> DecideRequest:
    trial = TrialInfo("t", 7, {}, (), phase=phase)
    return DecideRequest(trial, ActorInfo("agent", "agent", "td3"), tick, np.asarray(observation, np.float32))


def random_transitions(n: int, seed: int = 0) -> Transitions:
    rng = np.random.default_rng(seed)
    return Transitions(
        observations=rng.normal(size=(n, 3)).astype(np.float32),
        actions=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        rewards=rng.normal(size=n).astype(np.float32),
        next_observations=rng.normal(size=(n, 3)).astype(np.float32),
        dones=np.zeros(n, np.float32),
        versions=np.full(n, -1, np.int64),
        ends=np.ones(n, np.float32),
    )


def test_pendulum_is_sized_from_its_box_and_dqn_still_refuses_it(tmp_path):
    preset = load_preset(ROOT / "presets" / "td3_pendulum.py")
    config = yaml.safe_load(derived_spec(preset, tmp_path).read_text())["actors"]["td3"]["config"]
    assert {k: config[k] for k in SIZED} == SIZED  # Pendulum-v1: Box(3,) observations, Box(-2, 2, (1,)) torques
    assert TD3Policy(config).cfg.action_low == (-2.0,)
    with pytest.raises(TrialogError, match=r"action_size is 2 in its config, .* give 1"):
        derived_spec(dataclasses.replace(preset, agent={"action_size": 2}), tmp_path)
    dqn = dataclasses.replace(preset, implementation="dqn")
    spec = yaml.safe_load(PENDULUM.read_text())
    spec["actors"]["dqn"] = {"entry": "trialog.learn.dqn:DQNPolicy"}
    (tmp_path / "dqn.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(TrialogError, match="acts in a Discrete action space; actor class 'agent' has Box"):
        derived_spec(dataclasses.replace(dqn, spec=str(tmp_path / "dqn.yaml")), tmp_path)


def test_td3_refuses_a_discrete_action_space(tmp_path):
    spec = yaml.safe_load((ROOT / "examples" / "cartpole" / "spec.yaml").read_text())
    spec["actors"]["td3"] = {"entry": "trialog.learn.td3:TD3Policy"}
    (tmp_path / "cartpole.yaml").write_text(yaml.safe_dump(spec))
    preset = Preset(name="td3-cartpole", spec=str(tmp_path / "cartpole.yaml"), implementation="td3")
    with pytest.raises(TrialogError, match="acts in a Box action space; actor class 'agent' has Discrete"):
        derived_spec(preset, tmp_path)


def test_an_unbounded_box_is_refused_and_bounds_may_differ_per_action():
    from types import SimpleNamespace

    from trialog.learn.spaces import sized_config

    obs = {"type": "Box", "shape": [3], "dtype": "float32"}
    unbounded = {"type": "Box", "shape": [1], "dtype": "float32", "low": None, "high": 1.0}
    with pytest.raises(TrialogError, match="unbounded: wrap the environment"):
        sized_config(
            {}, [SimpleNamespace(name="agent", observation=obs, action=unbounded)], what="td3", action_space="Box"
        )
    two = {"type": "Box", "shape": [2], "dtype": "float32", "low": [-1.0, 0.0], "high": 1.0}
    config = sized_config(
        {}, [SimpleNamespace(name="agent", observation=obs, action=two)], what="td3", action_space="Box"
    )
    assert (config["action_size"], config["action_low"], config["action_high"]) == (2, [-1.0, 0.0], [1.0, 1.0])
    centre, half = TD3Config.of(config).bounds()
    assert centre.tolist() == [0.0, 0.5] and half.tolist() == [1.0, 0.5]


def test_the_policy_acts_in_the_bounds_explores_in_train_and_not_in_evaluation(tmp_path):
    policy = TD3Policy(SIZED)
    heatup = [policy.decide_batch([request("heatup", tick)])[0] for tick in range(200)]
    assert all(a.shape == (1,) and a.dtype == np.float32 for a in heatup)
    assert min(heatup) < -1.5 and max(heatup) > 1.5 and all(-2 <= a[0] <= 2 for a in heatup)  # uniform in [-2, 2]
    learner = TD3Learner(TD3Config.of({**SIZED, **TINY}))
    policy.load(make_version("m", 1, "td3", learner.tensors(), learner.metadata(), store=str(tmp_path)))
    greedy = 2.0 * np.tanh(mlp(learner.nets["actor"], request("evaluate").observation[None]))[0]
    evaluated = {float(policy.decide_batch([request("evaluate", tick)])[0][0]) for tick in range(20)}
    assert len(evaluated) == 1 and evaluated.pop() == pytest.approx(float(greedy[0]), abs=1e-6)  # no noise
    trained = np.array([policy.decide_batch([request("train", tick)])[0][0] for tick in range(200)])
    assert 0.05 < trained.std() < 0.4 and np.all(np.abs(trained) <= 2)  # noise of 0.1 half range = 0.2
    # Deterministic given the trial seed, the actor and the tick (recovery replays it).
    assert policy.decide_batch([request("train", 3)])[0] == policy.decide_batch([request("train", 3)])[0]


def test_a_box_action_goes_through_the_protocol_and_into_the_learners_memory():
    store = SchemaStore.with_builtin()
    spec = load_spec(PENDULUM, store)
    schema = store.register(spec.actor_classes["agent"].action_schema)
    action = TD3Policy(SIZED).decide_batch([request("heatup")])[0]
    decoded = store.decode(schema.encode(action), schema)
    assert decoded.dtype == np.float32 and decoded.shape == (1,) and decoded[0] == action[0]

    # The datalog's samples make float action rows (not truncated integers) ...
    from types import SimpleNamespace

    samples = [
        SimpleNamespace(tick=t, observation=np.full(3, t, np.float32), action=np.array([0.75 * t], np.float32),
                        reward=-1.0, terminated=False, policy_version=None)
        for t in range(3)
    ]  # fmt: skip
    t = transitions(samples)
    assert t.actions.dtype == np.float32 and t.actions[:, 0].tolist() == [0.0, 0.75]
    # ... which the learner keeps in [-1, 1] units.
    learner = TD3Learner(TD3Config.of({**SIZED, **TINY}))
    learner.add(t)
    assert learner.memory.actions[:2, 0].tolist() == [0.0, 0.375]


def test_backward_matches_finite_differences():
    rng = np.random.default_rng(0)
    learner = TD3Learner(TD3Config.of({**SIZED, "hidden": [5, 4]}))
    params = {k: v.astype(np.float64) for k, v in learner.nets["q1"].items()}
    x, weights = rng.normal(size=(6, 4)), rng.normal(size=(6, 1))

    def loss(p, inp):
        return float((mlp(p, inp) * weights).sum())

    out, inputs = forward(params, x)
    grads, grad_x = backward(params, inputs, weights)
    eps = 1e-6
    for key in ("w0", "b0", "w2"):
        index = (1, 0) if key == "w2" else (1, 2) if key.startswith("w") else (2,)
        bumped = {**params, key: params[key].copy()}
        bumped[key][index] += eps
        assert grads[key][index] == pytest.approx((loss(bumped, x) - loss(params, x)) / eps, rel=1e-4, abs=1e-6)
    x2 = x.copy()
    x2[3, 1] += eps
    assert grad_x[3, 1] == pytest.approx((loss(params, x2) - loss(params, x)) / eps, rel=1e-4, abs=1e-6)


def test_critic_updates_reduce_the_loss_on_a_fixed_batch_and_the_actor_climbs_q():
    learner = TD3Learner(TD3Config.of({**SIZED, **TINY}))
    learner.add(random_transitions(64))
    batch = {k: v[0] for k, v in learner.memory.sample(np.random.default_rng(1), 64).items()}

    def critic_loss() -> float:
        x = np.concatenate([batch["obs"], batch["actions"]], axis=1)
        return float(np.mean((mlp(learner.nets["q1"], x)[:, 0] - learner.target_values(batch)) ** 2))

    before = critic_loss()
    with one_blas_thread():
        for _ in range(300):
            learner.update_critics(batch)
    assert critic_loss() < 0.5 * before

    def actor_q() -> float:
        action = np.tanh(mlp(learner.nets["actor"], batch["obs"]))
        return float(mlp(learner.nets["q1"], np.concatenate([batch["obs"], action], axis=1)).mean())

    q_before = actor_q()
    for _ in range(20):
        learner.update_actor(batch["obs"])
    assert actor_q() > q_before


def test_weights_round_trip_through_the_registry_and_a_restored_learner_goes_on_alike(tmp_path):
    learner = TD3Learner(TD3Config.of({**SIZED, **TINY}))
    learner.add(random_transitions(200))
    assert learner.rounds_due() == 2  # (200 - 100) / 50
    learner.train_round()
    version = make_version("m", 1, "td3", learner.tensors(), learner.metadata(), store=str(tmp_path))
    meta = json.loads(json.dumps(version.meta))  # as the registry carries it
    assert {k: meta["config"][k] for k in ("observation_size", "action_size", "hidden")} == {
        "observation_size": 3, "action_size": 1, "hidden": [16, 16]
    }  # fmt: skip
    tensors = version.tensors()
    assert tensors["actor/w0"].shape == (3, 16) and tensors["q1/w0"].shape == (4, 16)
    restored = TD3Learner(TD3Config.of({**meta["config"]}))
    restored.restore(tensors, meta)
    assert set(restored.tensors()) == set(learner.tensors())
    for k, v in learner.tensors().items():
        np.testing.assert_array_equal(restored.tensors()[k], v)
    assert (restored.updates, restored.rounds, restored.env_steps) == (10, 1, 200)
    # An actor acts from the version's `actor/` weights alone, in plain NumPy.
    policy = TD3Policy(meta["config"])
    policy.load(version)
    for key, value in learner.policy_weights().items():
        np.testing.assert_array_equal(policy.actor[key], value)


def test_a_short_in_process_run_plays_pendulum_learns_and_writes_its_summary(tmp_path):
    preset = dataclasses.replace(
        load_preset(ROOT / "presets" / "td3_pendulum.py"),
        agent=TINY,
        schedule=Schedule(
            heatup_steps=200, steps_between_evaluations=200, evaluation_trials=1, total_steps=400, concurrency=1
        ),
    )
    run = InProcess(preset, tmp_path / "probe", quiet=True)
    assert run.learner.memory.actions.shape == (100_000, 1)
    result = train_in_process(preset, tmp_path, quiet=True)
    assert result.env_steps == 400 and [e.env_steps for e in result.evaluations] == [200, 400]
    assert result.model_version == 6  # a version after each round: 2 rounds by 200 steps, 6 by 400
    assert all(-3300 < e.mean_return < 0 for e in result.evaluations)  # Pendulum: -16.3 per step at worst
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["algorithm"] == "td3" and summary["mode"] == "in-process"
