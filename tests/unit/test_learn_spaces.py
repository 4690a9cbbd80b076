"""Network sizes from the actor class's spaces (trialog.learn.spaces): in the spec `trialog
train` derives for both modes, in the learner service, in the version a learner publishes;
a size that disagrees with the spaces, and an action space these policies cannot act in,
are clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from trialog.bus.memory import MemoryBus
from trialog.errors import TrialogError
from trialog.learn.dqn import DQNPolicy
from trialog.learn.in_process import InProcess
from trialog.learn.ppo import PPOPolicy
from trialog.learn.spaces import class_spaces, observation_size, sized_config
from trialog.learn.train import Preset, Schedule, derived_spec, load_preset
from trialog.model_registry import make_version
from trialog.services.learner.main import loop_for
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
ACROBOT = ROOT / "examples" / "acrobot" / "spec.yaml"
TINY = {"learning_starts": 50, "train_frequency": 50, "gradient_steps": 2, "hidden": [8], "batch_size": 4}


def gym_spec(tmp_path: Path, env: str) -> str:
    """A spec hosting a Gymnasium env, played by DQN or PPO, classes `auto`."""
    spec = tmp_path / f"{env}.yaml"
    spec.write_text(f"""
name: {env.lower().replace("-", "")}
actor_classes:
  agent: {{observation: auto, action: auto}}
environments:
  env: {{entry: "trialog.adapters.gymnasium:GymnasiumEnvironment", config: {{env: {env}}}}}
actors:
  dqn: {{entry: "trialog.learn.dqn:DQNPolicy"}}
  ppo: {{entry: "trialog.learn.ppo:PPOPolicy"}}
trial:
  environment: env
  actors:
    - {{name: agent, class: agent, implementation: dqn}}
""")
    return str(spec)


def preset_on(spec: str, implementation: str = "dqn", **agent) -> Preset:
    schedule = Schedule(heatup_steps=50, steps_between_evaluations=100, evaluation_trials=1, total_steps=100)
    return Preset(name="sized", spec=spec, implementation=implementation, agent={**TINY, **agent}, schedule=schedule)


def test_acrobot_sizes_come_from_its_spaces_in_the_derived_spec_the_learner_and_the_version(tmp_path):
    preset = load_preset(ROOT / "presets" / "dqn_acrobot.py")
    assert "observation_size" not in preset.agent and "actions" not in preset.agent
    config = yaml.safe_load(derived_spec(preset, tmp_path).read_text())["actors"]["dqn"]["config"]
    assert (config["observation_size"], config["actions"]) == (6, 3)  # Acrobot-v1: Box(6,), Discrete(3)

    run = InProcess(dataclasses.replace(preset, agent={**preset.agent, "hidden": [8]}), tmp_path / "run")
    assert run.learner.params["w0"].shape == (6, 8) and run.learner.params["w1"].shape == (8, 3)
    assert (run.policy.cfg.observation_size, run.policy.cfg.actions) == (6, 3)
    # The version carries the net's config, which an exported model is rebuilt from.
    meta = run.learner.metadata()["config"]
    assert (meta["observation_size"], meta["actions"], meta["hidden"]) == (6, 3, (8,))


@pytest.mark.parametrize("implementation", ["dqn", "ppo"])
def test_ppo_and_dqn_on_cartpole_and_acrobot_are_sized_alike(implementation, tmp_path):
    for env, sizes in (("CartPole-v1", (4, 2)), ("Acrobot-v1", (6, 3))):
        spec = load_spec(derived_spec(preset_on(gym_spec(tmp_path, env), implementation), tmp_path))
        config = spec.actors[implementation].config
        assert (config["observation_size"], config["actions"]) == sizes


def test_a_size_set_in_the_config_must_agree_with_the_spaces(tmp_path):
    with pytest.raises(TrialogError, match=r"actions is 2 in its config, but the spaces of actor class 'agent' give 3"):
        derived_spec(
            dataclasses.replace(load_preset(ROOT / "presets" / "dqn_acrobot.py"), agent={"actions": 2}), tmp_path
        )
    with pytest.raises(TrialogError, match=r"observation_size is 4 in its config, .* give 6"):
        derived_spec(preset_on(str(ACROBOT), observation_size=4), tmp_path)
    # A value that agrees is kept.
    config = yaml.safe_load(derived_spec(preset_on(str(ACROBOT), actions=3), tmp_path).read_text())
    assert config["actors"]["dqn"]["config"]["actions"] == 3


@pytest.mark.parametrize("implementation", ["dqn", "ppo"])
def test_an_action_space_that_is_not_discrete_is_refused_naming_it(implementation, tmp_path):
    spec = gym_spec(tmp_path, "Pendulum-v1")  # Box(-2, 2, (1,)) torques
    with pytest.raises(TrialogError, match=r"acts in a Discrete action space; actor class 'agent' has Box .*\[1\]"):
        derived_spec(preset_on(spec, implementation), tmp_path)


def test_sizes_the_spaces_do_not_give_must_be_set(tmp_path):
    unknown = SimpleNamespace(name="node", observation=None, action=None)
    with pytest.raises(TrialogError, match="do not say its observation_size .* set observation_size"):
        sized_config({"actions": 2}, [unknown], what="dqn")
    assert sized_config({"observation_size": 2, "actions": 2}, [unknown], what="dqn")["actions"] == 2
    # An enum action (rock, paper, scissors) is no Discrete space of integers either.
    rps = load_spec(ROOT / "examples" / "rps" / "spec.yaml")
    with pytest.raises(TrialogError, match="has Enum"):
        sized_config({}, [class_spaces(rps, next(iter(rps.actor_classes)))], what="dqn")


def test_observation_sizes_of_nested_spaces():
    box = {"type": "Box", "shape": [2, 3], "dtype": "float32"}
    nested = {"type": "Dict", "fields": [{"name": "a", "space": box}, {"name": "b", "space": {"type": "Discrete"}}]}
    assert observation_size(nested) == 7
    assert observation_size({"type": "Tuple", "items": [box, {"type": "MultiDiscrete", "nvec": [3, 3]}]}) == 8
    with pytest.raises(TrialogError, match="no fixed size"):
        observation_size({"type": "Text", "max_length": 5})


def test_the_learner_service_sizes_its_learner_from_its_spec(memory_settings):
    bus = MemoryBus(memory_settings)
    handler = loop_for(bus, load_spec(ACROBOT, bus.store), "dqn").handler
    assert (handler.learner.cfg.observation_size, handler.learner.cfg.actions) == (6, 3)
    assert handler.learner.params["w0"].shape[0] == 6


def test_a_policy_without_actions_takes_them_from_its_model_and_says_when_it_has_neither(tmp_path):
    from trialog.actor import DecideRequest
    from trialog.environment import ActorInfo, TrialInfo
    from trialog.learn.nets import init_mlp

    trial = TrialInfo("t", 1, {}, (), phase="heatup")
    request = DecideRequest(trial, ActorInfo("agent", "agent", "dqn"), 0, np.zeros(6, np.float32))
    for cls in (DQNPolicy, PPOPolicy):
        with pytest.raises(TrialogError, match="has no actions: set it in the implementation's config"):
            cls({"model": "m"}).decide_batch([request])
    policy = DQNPolicy({"model": "m"})
    q = init_mlp(np.random.default_rng(0), [6, 8, 3])
    policy.load(make_version("m", 1, "dqn", {f"q/{k}": v for k, v in q.items()}, {}, store=str(tmp_path)))
    actions = {policy.decide_batch([dataclasses.replace(request, tick=t)])[0] for t in range(200)}
    assert actions == {0, 1, 2}  # heatup explores among the network's 3 outputs
