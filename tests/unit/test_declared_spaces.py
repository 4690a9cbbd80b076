"""An environment that declares its actor classes' spaces with Gymnasium spaces
(trialog.adapters.declared.SpacesEnvironment): the schemas, default actions and random
sampler derived from them, the conversions both ways, and the errors that say what is wrong.
The spec and the check that use it: examples/first_env, docs/environments.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from trialog.adapters.declared import SpacesEnvironment
from trialog.cli import main as cli_main
from trialog.environment import ActorInfo, Environment, Step, TrialInfo
from trialog.errors import SpecError, TrialError
from trialog.protocol.codec import HEADER_SIZE, SchemaStore
from trialog.protocol.spaces import SPACE_PROPERTY, action_space_of, sample_action, space_codec
from trialog.spec import parse_spec
from trialog.tools.check import _same

ROOT = Path(__file__).resolve().parents[2]

SPACES = {
    "discrete": (spaces.Discrete(5, start=-2), -2),
    "box": (spaces.Box(-1.0, 2.0, shape=(2, 3), dtype=np.float32), np.zeros((2, 3), np.float32)),
    "box_above_zero": (spaces.Box(3, 9, shape=(2,), dtype=np.int64), np.array([3, 3])),
    "multi_discrete": (spaces.MultiDiscrete([3, 4], start=[1, 1]), np.array([1, 1])),
    "multi_binary": (spaces.MultiBinary(4), np.zeros(4, np.int8)),
    "dict": (
        spaces.Dict({"move-to": spaces.Discrete(3), "speed": spaces.Box(0.5, 1.0, shape=(), dtype=np.float64)}),
        {"move_to": 0, "speed": np.array(0.5)},
    ),
    "tuple": (spaces.Tuple([spaces.Discrete(2), spaces.MultiBinary(2)]), {"item0": 0, "item1": np.zeros(2, np.int8)}),
    "text": (spaces.Text(max_length=5, min_length=2, charset="ab"), "aa"),
}


def declaring(action: spaces.Space, observation: spaces.Space | None = None) -> type[SpacesEnvironment]:
    class Declared(SpacesEnvironment):
        observation_spaces = {"player": observation or spaces.Discrete(3)}
        action_spaces = {"player": action}

    return Declared


@pytest.mark.parametrize("name", SPACES)
def test_schemas_default_action_and_sampler_round_trip_through_the_codec(name):
    space, default = SPACES[name]
    described = declaring(space).describe({}, "player")
    store = SchemaStore.with_builtin()
    action = store.register(described["action"])
    if described["action"] == "trialog.Tensor":  # bare: no object to carry it, describe gives it beside
        assert described["action_space"]["type"] in ("Box", "MultiDiscrete", "MultiBinary")
    else:
        assert action_space_of(described["action"]) == described["action_space"]
    # The default action is JSON (it travels in trial.started), encodes in the schema and is the
    # value of the space nearest to zero.
    wire_default = store.decode(action.encode(described["default_action"]), action)
    assert _equal(wire_default, default), (wire_default, default)
    env = declaring(space)(TrialInfo("t", 0, {}, (ActorInfo("p", "player", "x"),)))
    assert space.contains(env.native_actions({"p": wire_default})["p"])
    rng = np.random.default_rng(0)
    for _ in range(20):
        sampled = sample_action(described["action_space"], rng)
        back = action.decode_body(action.encode(sampled), HEADER_SIZE)
        assert space.contains(env.native_actions({"p": back})["p"]), (sampled, back)


def _equal(a, b):
    """Equal values; arrays by their elements (a default read back from JSON has lost its dtype,
    which the environment's conversion restores)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else a == b


def test_the_space_travels_with_a_record_schema_and_names_are_deterministic():
    described = declaring(SPACES["dict"][0]).describe({}, "player")
    assert described["action"]["name"] == "trialog.env.Declared.player.Action"
    assert described["action"][SPACE_PROPERTY] == described["action_space"]
    assert declaring(SPACES["dict"][0]).describe({}, "player") == described


class Tuples(SpacesEnvironment):
    """Sees and returns Gymnasium values: a tuple action, a tuple observation."""

    space_name = "tuples"
    observation_spaces = {"player": spaces.Tuple([spaces.Discrete(4), spaces.Box(0, 1, shape=(2,))])}
    action_spaces = {"player": spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)])}

    def start(self):
        return {a: (0, [0.5, 0.5]) for a in self.trial.actor_names}

    def update(self, actions):
        self.seen = actions
        return Step(observations={a: (sum(v), np.ones(2)) for a, v in actions.items()})


def trial_of(cls, *names, actor_class="player"):
    return cls(TrialInfo("t", 1, {}, tuple(ActorInfo(n, actor_class, "x") for n in names)))


def test_start_and_update_deal_in_gymnasium_values_and_the_log_in_payloads():
    env = trial_of(Tuples, "a")
    start = env.start()
    assert start["a"]["item0"] == 0 and start["a"]["item1"].dtype == np.float32
    step = env.update({"a": {"item0": 1, "item1": 2}})
    assert env.seen == {"a": (1, 2)}
    assert step.observations["a"]["item0"] == 3 and step.observations["a"]["item1"].tolist() == [1.0, 1.0]
    schema = SchemaStore.with_builtin().register(Tuples.describe({}, "player")["observation"])
    assert schema.name == "trialog.env.tuples.player.Observation"
    assert _same(schema.decode_body(schema.encode(step.observations["a"]), HEADER_SIZE), step.observations["a"])


class Louder(Tuples):
    """An override that calls its parent's update: converted once, not twice."""

    def update(self, actions):
        return super().update(actions)


def test_an_override_calling_super_converts_once():
    env = trial_of(Louder, "a")
    env.start()
    assert env.update({"a": {"item0": 0, "item1": 1}}).observations["a"]["item0"] == 1
    assert env.seen == {"a": (0, 1)}


def test_an_action_outside_its_space_is_refused_naming_actor_and_space():
    env = trial_of(Tuples, "a")
    env.start()
    with pytest.raises(TrialError, match=r"actor 'a' sent .*outside its action space Tuple") as caught:
        env.update({"a": {"item0": 5, "item1": 0}})
    assert caught.value.reason == "invalid_action"


class Overflowing(Tuples):
    def start(self):
        return {a: (7, [0.5, 0.5]) for a in self.trial.actor_names}


def test_an_observation_outside_its_space_fails_naming_actor_and_space():
    with pytest.raises(TrialError, match=r"the observation of 'a' is \(7, .*outside its observation space Tuple"):
        trial_of(Overflowing, "a").start()


def test_errors_name_the_class_the_space_and_what_is_supported():
    with pytest.raises(
        SpecError, match=r"action space of actor class .player. of Declared: Sequence.*supported spaces: Box"
    ):
        declaring(spaces.Sequence(spaces.Discrete(2))).describe({}, "player")
    with pytest.raises(SpecError, match=r"no space for actor class 'cook' in observation_spaces and action_spaces.*"):
        Tuples.describe({}, "cook")
    with pytest.raises(TrialError, match="'zed' is not an actor of the trial"):
        trial_of(Tuples, "a").update({"zed": {"item0": 0, "item1": 0}})

    class Plain(Environment):  # the attributes alone do nothing on a plain Environment: say so
        observation_spaces = {"player": spaces.Discrete(2)}

    with pytest.raises(NotImplementedError, match="subclass of trialog.adapters.declared.SpacesEnvironment"):
        Plain.describe({}, "player")


def spec_of(entry: str, **actor_class) -> dict:
    return {
        "name": "declared",
        "actor_classes": {"player": {"observation": "auto", "action": "auto", **actor_class}},
        "environments": {"env": {"entry": entry}},
        "actors": {"random": {"entry": "trialog.agents.random_agent:RandomAgent"}},
        "trial": {"environment": "env", "actors": [{"name": "a", "class": "player", "implementation": "random"}]},
    }


def test_a_spec_derives_the_default_action_unless_it_sets_one():
    derived = parse_spec(spec_of(f"{__name__}:Tuples")).actor_classes["player"]
    assert derived.has_default_action and derived.default_action == {"item0": 0, "item1": 0}
    assert derived.wire().default_action == '{"item0":0,"item1":0}'
    chosen = parse_spec(spec_of(f"{__name__}:Tuples", default_action={"item0": 1, "item1": 2}))
    assert chosen.actor_classes["player"].default_action == {"item0": 1, "item1": 2}


class PlainWithSpaces(Environment):
    observation_spaces = {"player": spaces.Discrete(2)}
    action_spaces = {"player": spaces.Discrete(2)}


def test_auto_on_an_environment_that_cannot_derive_says_why():
    with pytest.raises(SpecError, match=r"actor_classes\.player\.observation.*SpacesEnvironment"):
        parse_spec(spec_of(f"{__name__}:PlainWithSpaces"))


def test_trialog_check_spec_passes_the_first_env_example(capsys):
    assert cli_main(["check", "--spec", str(ROOT / "examples/first_env/spec.yaml"), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "of environment 'guess' (trialog.examples.first_env.game:GuessTheNumber)" in out
    assert re.search(r"PASS  spec +2 actors: alice \(guesser, bisect\), bob \(guesser, random\)", out)
    assert re.search(r"PASS  episodes +3 more \(seeds 1–3\)", out) and "12 passed, 0 failed" in out


def _block(text: str, after: str, language: str) -> str:
    return re.search(rf"```{language}\n(.*?)```", text[text.index(after) :], re.S).group(1)


def test_the_docs_show_the_first_env_example_verbatim_and_its_check_as_it_prints(capsys, monkeypatch):
    docs = (ROOT / "docs/environments.md").read_text()
    section = "## Your own environment with Gymnasium spaces"
    example = ROOT / "examples/first_env"
    assert _block(docs, section, "python") == (example / "game.py").read_text()
    assert _block(docs, section, "yaml") == (example / "spec.yaml").read_text()
    command = _block(docs, section, "bash").strip()
    assert command == "trialog check --spec examples/first_env/spec.yaml"
    monkeypatch.chdir(ROOT)
    assert cli_main(command.split()[1:]) == 0
    printed = capsys.readouterr().out.splitlines()
    shown = [line for line in _block(docs, section, "text").splitlines() if line.strip() != "..."]
    assert all(line in printed for line in shown), sorted(set(shown) - set(printed))


class Misnumbered(Tuples):
    """Its third update returns a number outside the observation space."""

    def update(self, actions):
        self.ticks = getattr(self, "ticks", 0) + 1
        return Step(observations={a: (9 if self.ticks == 3 else 0, np.ones(2)) for a in actions})


def test_trialog_check_spec_fails_with_where_and_why(tmp_path, capsys):
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_of(f"{__name__}:Misnumbered")))
    assert cli_main(["check", "--spec", str(spec), "--steps", "5"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL  update +tick 2: .*the observation of 'a' is \(9, .*outside its observation space", out)
    assert cli_main(["check", "--spec", str(spec), "--environment", "nope"]) == 1
    assert "FAIL  spec  the spec has no environment 'nope'; it has env" in capsys.readouterr().out
    assert cli_main(["check"]) == 1
    assert "give an environment entry (module:Class) or --spec SPEC" in capsys.readouterr().err


BOARD = spaces.MultiBinary([3, 3])


def move_space():
    return spaces.Discrete(9)


def test_a_spec_actor_class_declares_its_own_spaces_for_any_environment():
    raw = spec_of("trialog.examples.rps.game:RockPaperScissors")  # no describe: the class says it all
    raw["actor_classes"]["player"] = {
        "observation": {"space": f"{__name__}:BOARD"},
        "action": {"space": f"{__name__}:move_space"},
    }
    player = parse_spec(raw, file="declared.yaml").actor_classes["player"]
    assert json.loads(player.observation_schema)["name"] == "trialog.Tensor"  # a bare tensor: nothing to name
    action = json.loads(player.action_schema)
    assert action[SPACE_PROPERTY] == {"type": "Discrete", "n": 9, "start": 0}
    assert player.has_default_action and player.default_action == 0
    raw["actor_classes"]["player"]["default_action"] = 4
    assert parse_spec(raw).actor_classes["player"].default_action == 4


def test_a_spec_space_that_is_not_one_says_where_and_why():
    raw = spec_of("trialog.examples.rps.game:RockPaperScissors", observation={"space": f"{__name__}:ROOT"})
    raw["actor_classes"]["player"]["action"] = {"space": f"{__name__}:move_space"}
    with pytest.raises(SpecError, match=r"actor_classes\.player\.observation\.space.*has no Avro mapping.*supported"):
        parse_spec(raw, file="declared.yaml")
    raw["actor_classes"]["player"]["observation"] = {"space": 3}
    with pytest.raises(SpecError, match=r"actor_classes\.player\.observation\.space.*import path"):
        parse_spec(raw, file="declared.yaml")
    raw["actor_classes"]["player"]["observation"] = {"space": f"{__name__}:NOWHERE"}
    with pytest.raises(SpecError, match=r"has no attribute 'NOWHERE'"):
        parse_spec(raw, file="declared.yaml")


@pytest.mark.parametrize("space", [spaces.Discrete(3), spaces.Discrete(5, start=-2), spaces.Box(-1, 1, (2,))])
def test_a_codec_says_what_gymnasium_says_of_a_value_in_its_space(space):
    """SpaceCodec.contains checks a Discrete space's ints itself (gymnasium's check costs
    more than a tick's decoding); for every value it answers as gymnasium does."""
    codec = space_codec(space, namespace="t", name="a", where="test")
    values = [-3, -2, -1, 0, 1, 2, 3, 4, np.int64(1), np.int64(9), True, False, 1.0, "1", None, np.zeros(2, np.float32)]
    for value in values:
        assert codec.contains(value) == bool(space.contains(value)), (space, value)
