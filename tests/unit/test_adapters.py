"""The PettingZoo and Gymnasium adapters host real environments as Trialog
environments: schemas derived from spaces, observations that survive the Avro
round trip, actors mapped onto agents, terminated and truncated kept apart.

Every environment tested here encodes its observations with the schemas its
``describe`` gave, through a real :class:`~trialog.protocol.codec.SchemaStore`, and checks
they decode back equal.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from trialog.adapters.gymnasium import GymnasiumEnvironment
from trialog.adapters.pettingzoo import PettingZooEnvironment
from trialog.adapters.spaces import avro_name, space_codec
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import SpecError, TrialError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.spaces import SPACE_PROPERTY, sample_action
from trialog.tools.check import _same

RPS = {"env": "pettingzoo.classic.rps_v2:parallel_env", "kwargs": {"max_cycles": 5}}
OVERCOOKED = {
    "env": "cogrid.envs.registry:make",
    "kwargs": {"environment_id": "Overcooked-CrampedRoom-V0"},
    "name": "overcooked",
}


def actors(*names: str, actor_class: str = "player") -> tuple[ActorInfo, ...]:
    return tuple(ActorInfo(n, actor_class, "test") for n in names)


def trial(config: dict, cast: tuple[ActorInfo, ...], seed: int = 7, **extra) -> TrialInfo:
    return TrialInfo("trial-1", seed, config, cast, **extra)


class RoundTrip:
    """Encodes observations with the schemas ``describe`` gave, as the runtime will."""

    def __init__(self, cls: type, config: dict, actor_class: str = "player") -> None:
        self.store = SchemaStore.with_builtin()
        self.described = cls.describe(config, actor_class)
        self.observation = self.store.register(self.described["observation"])
        self.action = self.store.register(self.described["action"])

    def __call__(self, value):
        back = self.store.decode(self.observation.encode(value))
        assert _same(back, value), f"{value!r} came back as {back!r}"
        return back


# --- PettingZoo ------------------------------------------------------------------


def test_rock_paper_scissors_parallel_runs_to_truncation_with_round_trips():
    rt = RoundTrip(PettingZooEnvironment, RPS)
    assert rt.described["action"] == {"type": "long", SPACE_PROPERTY: {"type": "Discrete", "n": 3, "start": 0}}
    env = PettingZooEnvironment(trial(RPS, actors("alice", "bob")))
    observations = env.start()
    assert set(observations) == {"alice", "bob"}
    for value in observations.values():
        rt(value)
    ticks = 0
    while True:
        step = env.update({"alice": 0, "bob": 1})  # rock vs paper
        ticks += 1
        for value in step.observations.values():
            rt(value)
        assert step.rewards == {"alice": -1.0, "bob": 1.0}
        if step.done:
            break
        assert step.terminated == {"alice": False, "bob": False} and step.truncated == {"alice": False, "bob": False}
    assert ticks == 5
    assert step.truncated == {"alice": True, "bob": True} and step.terminated == {"alice": False, "bob": False}
    env.end()


def test_aec_env_is_converted_when_parallelizable():
    config = {"env": "pettingzoo.classic.rps_v2:env", "kwargs": {"max_cycles": 3}}
    rt = RoundTrip(PettingZooEnvironment, config)
    env = PettingZooEnvironment(trial(config, actors("alice", "bob")))
    for value in env.start().values():
        rt(value)
    step = env.update({"alice": 2, "bob": 1})  # scissors beat paper
    assert step.rewards == {"alice": 1.0, "bob": -1.0}
    assert step.observations == {"alice": 1, "bob": 2}  # each sees the other's move


def test_turn_based_aec_env_needs_turn_based_and_masks_pass_through():
    config = {"env": "pettingzoo.classic.tictactoe_v3:env"}
    with pytest.raises(SpecError, match="turn_based"):
        PettingZooEnvironment(trial(config, actors("x", "o")))

    config = {**config, "turn_based": True}
    rt = RoundTrip(PettingZooEnvironment, config)
    assert [f["name"] for f in rt.described["observation"]["fields"]] == ["action_mask", "observation"]
    env = PettingZooEnvironment(trial(config, actors("x", "o")))
    observations = env.start()
    rng = np.random.default_rng(0)
    space = rt.described["action_space"]
    for _ in range(9):
        mover = next(a for a, obs in observations.items() if obs["action_mask"].any())
        action = sample_action(space, rng, observations[mover])
        assert observations[mover]["action_mask"][action] == 1  # the sampler honours the mask
        step = env.update({"x": action, "o": action})  # the other's action is ignored: not its turn
        observations = {a: rt(v) for a, v in step.observations.items()}
        if step.done:
            break
    assert step.done and any(step.terminated.values())


# --- CoGrid's Overcooked ---------------------------------------------------------


def test_overcooked_infers_its_observation_space_and_maps_integer_agent_ids():
    rt = RoundTrip(PettingZooEnvironment, OVERCOOKED, "cook")
    assert rt.described["observation"] == "trialog.Tensor"  # CoGrid declares no observation space
    assert rt.described["observation_space"] == {
        "type": "Box",
        "shape": [892],
        "dtype": "float32",
        "low": None,
        "high": None,
    }
    assert rt.described["action_space"] == {"type": "Discrete", "n": 7, "start": 0}

    # YAML may say "1" for CoGrid's agent 1; alice plays agent 1 here.
    config = {**OVERCOOKED, "agents": {"alice": "1", "bob": 0}}
    env = PettingZooEnvironment(trial(config, actors("alice", "bob", actor_class="cook"), seed=3))
    assert env.agent_of == {"alice": 1, "bob": 0}
    observations = env.start()
    for value in observations.values():
        assert value.shape == (892,) and value.dtype == np.float32
        rt(value)

    from cogrid.envs import registry

    direct = registry.make("Overcooked-CrampedRoom-V0")
    expected, _ = direct.reset(seed=3)  # the adapter seeds reset() with the trial seed
    np.testing.assert_array_equal(observations["alice"], expected[1])
    rng = np.random.default_rng(1)
    for _ in range(30):
        a, b = (int(x) for x in rng.integers(0, 7, size=2))
        step = env.update({"alice": a, "bob": b})
        expected, rewards, *_ = direct.step({1: a, 0: b})
        np.testing.assert_array_equal(step.observations["alice"], expected[1])
        np.testing.assert_array_equal(step.observations["bob"], expected[0])
        assert step.rewards == {"alice": rewards[1], "bob": rewards[0]}
        rt(step.observations["bob"])


# --- Gymnasium -------------------------------------------------------------------


def test_cartpole_runs_until_terminated():
    config = {"env": "CartPole-v1"}
    rt = RoundTrip(GymnasiumEnvironment, config, "balancer")
    assert rt.described["observation"] == "trialog.Tensor"
    assert rt.described["observation_space"]["shape"] == [4]
    assert rt.described["action"][SPACE_PROPERTY] == {"type": "Discrete", "n": 2, "start": 0}
    env = GymnasiumEnvironment(trial(config, actors("pole", actor_class="balancer")))
    rt(env.start()["pole"])
    for _ in range(500):
        step = env.update({"pole": 1})  # always push right: falls within a few dozen ticks
        rt(step.observations["pole"])
        if step.done:
            break
    assert step.terminated == {"pole": True} and step.truncated == {"pole": False}


def test_gymnasium_hosts_exactly_one_actor():
    with pytest.raises(SpecError, match="1 agents"):
        GymnasiumEnvironment(trial({"env": "CartPole-v1"}, actors("a", "b")))


def test_unknown_gymnasium_id_is_a_spec_error():
    with pytest.raises(SpecError, match="NoSuchEnv-v0"):
        GymnasiumEnvironment(trial({"env": "NoSuchEnv-v0"}, actors("a")))


# --- spaces ----------------------------------------------------------------------


def test_every_supported_space_round_trips_with_sanitized_deterministic_names():
    space = spaces.Dict(
        {
            "a-b": spaces.Box(-1.0, 1.0, shape=(2, 3), dtype=np.float64),
            "1st": spaces.Discrete(4, start=-2),
            "grid": spaces.MultiDiscrete([3, 5]),
            "bits": spaces.MultiBinary(4),
            "pair": spaces.Tuple((spaces.Discrete(2), spaces.Text(8))),
            "a_b": spaces.Box(0, 255, shape=(), dtype=np.uint8),
        }
    )
    first = space_codec(space, namespace="trialog.env.my-env.cook", name="Observation", where="test")
    again = space_codec(space, namespace="trialog.env.my-env.cook", name="Observation", where="test")
    assert json.dumps(first.schema) == json.dumps(again.schema)
    assert first.schema["name"] == "trialog.env.my_env.cook.Observation"
    names = [f["name"] for f in first.schema["fields"]]
    assert names == [avro_name(k) for k in ("1st", "a-b")] + ["a_b_", "bits", "grid", "pair"]  # gymnasium sorts keys

    store = SchemaStore.with_builtin()
    schema = store.register(first.schema)
    value = space.sample()
    back = first.from_payload(store.decode(schema.encode(first.to_payload(value))))
    assert space.contains(back)
    assert set(back) == set(value)
    np.testing.assert_array_equal(back["a-b"], value["a-b"])
    assert back["1st"] == value["1st"] and back["pair"] == value["pair"]
    # The description is enough to sample valid values without the gym space.
    sampled = sample_action(first.description, np.random.default_rng(0))
    assert space.contains(first.from_payload(sampled))


class OddSpaces(ParallelEnv):
    """Declares a space Trialog cannot carry."""

    metadata = {"name": "odd_v0"}
    possible_agents = ["walker"]

    def __init__(self, bad: str = "observation"):
        self.bad = bad

    def observation_space(self, agent):
        return spaces.Sequence(spaces.Discrete(3)) if self.bad == "observation" else spaces.Discrete(3)

    def action_space(self, agent):
        return spaces.Graph(spaces.Discrete(2), None) if self.bad == "action" else spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {"walker": (1, 2)}, {"walker": {}}


@pytest.mark.parametrize("bad, space", [("observation", "Sequence"), ("action", "Graph")])
def test_unsupported_spaces_fail_at_start_naming_space_and_agent(bad, space):
    env = PettingZooEnvironment(trial({"env": f"{__name__}:OddSpaces", "kwargs": {"bad": bad}}, actors("pat")))
    with pytest.raises(SpecError) as caught:
        env.start()
    message = str(caught.value)
    assert space in message and "'walker'" in message and f"{bad} space" in message and "supported spaces" in message


class MaskInInfo(ParallelEnv):
    """Gives its action mask in ``info``, as many PettingZoo envs do."""

    metadata = {"name": "mask_in_info_v0"}
    possible_agents = ["p"]

    def observation_space(self, agent):
        return spaces.Box(0, 1, shape=(2,), dtype=np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents = ["p"]
        return {"p": np.zeros(2, np.float32)}, {"p": {"action_mask": np.array([0, 1, 0], np.int8)}}

    def step(self, actions):
        return (
            {"p": np.ones(2, np.float32)},
            {"p": 0.0},
            {"p": False},
            {"p": False},
            {"p": {"action_mask": np.array([1, 0, 0], np.int8)}},
        )


def test_an_action_mask_in_info_is_folded_into_the_observation():
    config = {"env": f"{__name__}:MaskInInfo"}
    rt = RoundTrip(PettingZooEnvironment, config)
    env = PettingZooEnvironment(trial(config, actors("solo")))
    first = rt(env.start()["solo"])
    np.testing.assert_array_equal(first["action_mask"], [0, 1, 0])
    assert sample_action(rt.described["action_space"], np.random.default_rng(0), first) == 1
    second = rt(env.update({"solo": 1}).observations["solo"])
    np.testing.assert_array_equal(second["action_mask"], [1, 0, 0])
    np.testing.assert_array_equal(second["observation"], [1, 1])


def test_actions_outside_the_space_are_refused_with_the_actor_named():
    env = PettingZooEnvironment(trial(RPS, actors("alice", "bob")))
    env.start()
    with pytest.raises(TrialError, match="'bob' sent 7"):
        env.update({"alice": 0, "bob": 7})
    with pytest.raises(TrialError, match=r"no action from \['bob'\]"):
        env.update({"alice": 0})


def test_actor_mapping_errors_say_how_to_fix_them():
    with pytest.raises(SpecError, match="map them with `agents"):
        PettingZooEnvironment(trial(RPS, actors("solo")))
    with pytest.raises(SpecError, match="not an agent of this environment"):
        PettingZooEnvironment(
            trial({**RPS, "agents": {"alice": "player_0", "bob": "player_9"}}, actors("alice", "bob"))
        )
    with pytest.raises(SpecError, match="unknown keys"):
        PettingZooEnvironment(trial({**RPS, "kwarg": {}}, actors("alice", "bob")))


def test_describe_refuses_a_class_whose_agents_differ():
    config = {"env": "pettingzoo.classic.rps_v2:parallel_env", "agent_classes": {"player": ["player_0"]}}
    assert PettingZooEnvironment.describe(config, "player")["action"]["type"] == "long"
    with pytest.raises(SpecError, match="not in agent_classes"):
        PettingZooEnvironment.describe(config, "referee")


def test_the_specs_in_the_docs_load_and_carry_the_action_space():
    import re
    from pathlib import Path

    import yaml

    from trialog.spec import parse_spec

    text = (Path(__file__).resolve().parents[2] / "docs" / "environments.md").read_text()
    specs = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]
    loaded = {
        spec.name: spec for spec in (parse_spec(raw, file="docs/environments.md") for raw in specs if "name" in raw)
    }
    assert set(loaded) == {"rps-pettingzoo", "overcooked", "first_env"}
    guesser = loaded["first_env"].actor_classes["guesser"]  # from declared Gymnasium spaces
    assert json.loads(guesser.action_schema)[SPACE_PROPERTY] == {"type": "Discrete", "n": 100, "start": 1}
    cook = loaded["overcooked"].actor_classes["cook"]
    assert json.loads(cook.action_schema)[SPACE_PROPERTY] == {"type": "Discrete", "n": 7, "start": 0}
