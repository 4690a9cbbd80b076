"""Network sizes from the spaces of the actor classes an implementation plays.

DQN and PPO size their networks by ``observation_size`` (the length of a flattened
observation, :func:`trialog.learn.memory.flat_observation`) and ``actions`` (a Discrete
action space's ``n``). Both come from the actor class's spaces, so that a preset for
another Gymnasium env names no size:

- each space is the description its schema carries (``trialog.space``, written by the
  adapters; :func:`trialog.protocol.spaces.action_space_of` for actions), or else the one
  the environment gives for the class (an adapter's ``describe(config, actor_class)``: a
  Box is a bare ``trialog.Tensor`` reference, which carries none).

TD3 (:mod:`trialog.learn.td3`) acts in a Box instead: its policy class says
``action_space = "Box"`` and gets ``observation_size``, ``action_size`` (the Box's
flattened length) and finite bounds ``action_low``/``action_high`` (one number per action)
in their place; DQN and PPO keep refusing anything but a Discrete space.

A size the config sets and the spaces also give must agree (a clear error names both
numbers); a size the spaces do not give (a hand-written schema without a space) must be
set in the config. :func:`sized_config` is applied where a spec is at hand: the derived
spec ``trialog train`` writes for both modes (so the services' policies get the sizes
too) and the learner service.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trialog.errors import TrialogError
from trialog.protocol.spaces import SPACE_PROPERTY, action_space_of
from trialog.spec import Spec, load_entry

SIZES = ("observation_size", "actions")  # an implementation acting in a Discrete space
BOX_SIZES = ("observation_size", "action_size", "action_low", "action_high")  # in a Box (action_space = "Box")


@dataclass(frozen=True)
class ClassSpaces:
    """An actor class's space descriptions (None: neither its schema nor its environment says)."""

    name: str
    observation: Mapping[str, Any] | None
    action: Mapping[str, Any] | None


def class_spaces(spec: Spec, actor_class: str) -> ClassSpaces:
    cls = spec.actor_classes[actor_class]
    observation = json.loads(cls.observation_schema).get(SPACE_PROPERTY)
    try:
        action = action_space_of(cls.action_schema)
    except TrialogError:  # a plain `long`: no space said
        action = None
    if observation is None or action is None:
        described = _described(spec, actor_class)
        observation = observation or described.get("observation_space")
        action = action or described.get("action_space")
    return ClassSpaces(actor_class, observation, action)


def _described(spec: Spec, actor_class: str) -> Mapping[str, Any]:
    """What the trial's environment says of the class's spaces ({} when it cannot say)."""
    env = spec.environments[spec.trial.environment]
    if env.external:
        return {}
    describe = getattr(load_entry(env.entry, what=f"environment {env.name}"), "describe", None)
    if describe is None:
        return {}
    try:
        return describe({**env.config, **spec.trial.environment_config}, actor_class) or {}
    except (TrialogError, NotImplementedError):  # it describes no such class: its spaces stay unknown
        return {}


def observation_size(space: Mapping[str, Any]) -> int:
    """The length of a flattened observation of this space."""
    match space["type"]:
        case "Box":
            return math.prod(space["shape"])
        case "Discrete":
            return 1
        case "MultiDiscrete":
            return len(space["nvec"])
        case "MultiBinary":
            return math.prod(space["shape"])
        case "Dict":
            return sum(observation_size(f["space"]) for f in space["fields"])
        case "Tuple":
            return sum(observation_size(item) for item in space["items"])
    raise TrialogError(f"an observation space {_text(space)} has no fixed size as a vector of numbers")


def discrete_actions(space: Mapping[str, Any], *, what: str, actor_class: str) -> int:
    """``n`` of a Discrete space starting at 0: the only action space these policies act in."""
    if space["type"] != "Discrete":
        raise TrialogError(
            f"{what} acts in a Discrete action space; actor class {actor_class!r} has {_text(space)}. "
            "Use an algorithm for that space, or wrap the environment to discretize its actions"
        )
    if int(space.get("start", 0)) != 0:
        raise TrialogError(
            f"{what} acts 0 … n-1; actor class {actor_class!r} has {_text(space)}: "
            "wrap the environment so that its actions start at 0"
        )
    return int(space["n"])


def box_actions(space: Mapping[str, Any], *, what: str, actor_class: str) -> dict[str, Any]:
    """``action_size`` and the bounds (a list of one float per action) of a bounded Box."""
    if space["type"] != "Box":
        raise TrialogError(
            f"{what} acts in a Box action space; actor class {actor_class!r} has {_text(space)}. "
            "Use an algorithm for that space (DQN or PPO for a Discrete one)"
        )
    size = math.prod(space["shape"])
    bounds = {}
    for key in ("low", "high"):
        values = [space[key]] * size if not isinstance(space[key], list) else _flat(space[key])
        if any(v is None for v in values):
            raise TrialogError(
                f"{what} scales its actions into the Box's bounds; actor class {actor_class!r} has {_text(space)}, "
                "unbounded: wrap the environment so that its actions are bounded"
            )
        bounds[f"action_{key}"] = [float(v) for v in values]
    return {"action_size": size, **bounds}


def _flat(values: Any) -> list[Any]:
    return [v for item in values for v in _flat(item)] if isinstance(values, list) else [values]


def sized_config(
    config: Mapping[str, Any], spaces: Iterable[ClassSpaces], *, what: str, where: str = "", action_space: str = ""
) -> dict[str, Any]:
    """``config`` with ``observation_size`` and ``actions`` from the classes' spaces (with
    ``action_space="Box"``: ``action_size``, ``action_low`` and ``action_high``); a value set
    in ``config`` must agree with them, and one they do not give must be set."""
    box = action_space == "Box"
    derived: dict[str, tuple[Any, str]] = {}  # size -> (value, the class it came from)
    for cls in spaces:
        found: dict[str, Any] = {
            "observation_size": observation_size(cls.observation) if cls.observation is not None else None
        }
        if box:
            found.update(box_actions(cls.action, what=what, actor_class=cls.name) if cls.action else {})
        else:
            found["actions"] = discrete_actions(cls.action, what=what, actor_class=cls.name) if cls.action else None
        for key, value in found.items():
            if value is None:
                continue
            if key in derived and derived[key][0] != value:
                first, other = derived[key]
                raise TrialogError(
                    f"{what} plays classes with different {key}: {other!r} gives {first}, {cls.name!r} gives "
                    f"{value}; name the classes it plays (the implementation's `classes`) or train one at a time"
                )
            derived.setdefault(key, (value, cls.name))
    out = dict(config)
    for key in BOX_SIZES if box else SIZES:
        given = config.get(key)
        if key in derived:
            value, cls_name = derived[key]
            if given is not None and (list(given) if isinstance(given, (list, tuple)) else given) != value:
                raise TrialogError(
                    f"{what}: {key} is {given} in its config{where}, but the spaces of actor class {cls_name!r} give "
                    f"{value}; leave {key} out (it comes from the spaces) or make it {value}"
                )
            out[key] = value
        elif given is None:
            raise TrialogError(
                f"{what}: the actor classes' spaces do not say its {key} (a schema without a "
                f"{SPACE_PROPERTY!r} and an environment without describe()): set {key} in its config{where}"
            )
    return out


def implementation_sized(spec: Spec, implementation: str, config: Mapping[str, Any], classes: Iterable[str]) -> dict:
    """The implementation's config sized by ``classes``, when its entry takes its sizes from the
    spaces (``sizes_from_spaces`` on the policy class); otherwise as it is."""
    impl = spec.actors[implementation]
    target = load_entry(impl.entry, what=f"actor implementation {implementation}")
    if not getattr(target, "sizes_from_spaces", False):
        return dict(config)
    what = f"{implementation!r} ({impl.entry})"
    spaces = [class_spaces(spec, c) for c in sorted(set(classes))]
    return sized_config(config, spaces, what=what, action_space=getattr(target, "action_space", ""))


def classes_played(spec: Spec, implementation: str) -> list[str]:
    """The classes an implementation plays, as far as the spec says: its `classes`, else those of the
    default trial's actors it plays, else every class (a start request may give it any actor)."""
    impl = spec.actors[implementation]
    default = [a.actor_class for a in spec.trial.actors if a.implementation == implementation]
    return list(impl.classes or default or spec.actor_classes)


def missing_sizes(what: str, *keys: str) -> str:
    return (
        f"{what} has no {' or '.join(keys)}: set it in the implementation's config, or let `trialog train` "
        "(or the learner service) size the network from the actor class's spaces"
    )


def require_sizes(cfg: Any, what: str, keys: Iterable[str] = SIZES) -> None:
    """A network cannot be built without its sizes."""
    missing = [key for key in keys if getattr(cfg, key) is None]
    if missing:
        raise TrialogError(missing_sizes(what, *missing))


def _text(space: Mapping[str, Any]) -> str:
    return f"{space['type']} {json.dumps({k: v for k, v in space.items() if k != 'type'})}"
