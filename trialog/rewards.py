"""Modular rewards: an environment's reward as a weighted sum of named components.

This is CoGrid's design, made environment-neutral. A component has a ``name``, a
``coefficient`` and a ``common`` flag, and computes one raw value per actor from
the state before and after a step::

    class Tidy(RewardComponent):
        name = "tidy"

        def compute(self, prev_state, actions, state):
            return np.asarray([...], dtype=np.float32)  # (n_actors,), actor order

An actor's reward for a step is ``Σ coefficient · v`` over the components, where
``v`` is the component's raw value for that actor, or — for a ``common``
component — the sum of its raw values over all actors (a shared team reward).

**How it lands in the log.** I-4 aggregates the rewards of (actor, tick) as the
confidence-weighted *mean* Σcᵢvᵢ/Σcᵢ over cᵢ > 0, while components must *add up*.
So :meth:`RewardSet.rewards` emits, per actor and step:

- one reward from source ``total`` — the sum — with confidence 1: it is what
  aggregation returns;
- one reward per component (source = the component's name) with confidence 0 and
  ``user_data = {"raw": v, "coefficient": c}``: kept in the log and delivered to
  the actor, never counted twice.

Only non-zero values are written: a tick without any reward has no reward event,
which I-4 reads as 0. A reward given by anyone else (a human, a retroactive
critic) then averages with ``total`` by I-4's rule, as it would with any source.

Coefficients change mid-campaign through
``Environment.set_parameters({"reward_coefficients": {name: value}})``, which the
runtime calls at a logged tick, so replay reproduces the change.

Components are named in the environment config::

    rewards:
      - {component: overcooked.delivery, coefficient: 20, common: true}
      - {component: "my_pkg.rewards:Tidy", coefficient: 0.5, name: tidy}

Short names: ``env`` (the environment's own reward) and CoGrid's Overcooked
rewards ``overcooked.delivery``, ``overcooked.onion_in_pot``,
``overcooked.soup_in_dish``. A ``module:Class`` may name a
:class:`RewardComponent` subclass or a CoGrid ``Reward`` subclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trialog.environment import RewardOut
from trialog.errors import SpecError, TrialError
from trialog.spec import load_entry

TOTAL = "total"  # the source of the summed reward; no component may take this name


@dataclass(frozen=True)
class StepView:
    """What an adapter shows reward components about one tick, after it happened.

    ``agents`` lists the environment's agent ids in actor order; the mappings are
    keyed by those ids, as the environment returned them (``rewards`` is empty at
    tick 0).
    """

    tick: int
    env: Any
    agents: tuple[Any, ...]
    observations: Mapping[Any, Any] = field(default_factory=dict)
    rewards: Mapping[Any, float] = field(default_factory=dict)
    infos: Mapping[Any, Any] = field(default_factory=dict)


class RewardComponent:
    """One named reward term. Subclasses implement :meth:`compute`.

    ``compute`` receives what :meth:`capture` kept of the tick before and of the
    tick after the step — by default the :class:`StepView` itself — and the
    actions in actor order (``None`` for an actor that did not act). It returns
    the raw values, shape ``(n_actors,)``; coefficient and ``common`` are applied
    by :class:`RewardSet`.
    """

    name: str = ""

    def __init__(self, *, coefficient: float = 1.0, common: bool = False, name: str | None = None) -> None:
        self.coefficient = float(coefficient)
        self.common = bool(common)
        self.name = name or self.name or _snake(type(self).__name__)

    def capture(self, view: StepView) -> Any:
        """What to remember of a tick. Override when the environment's state mutates
        in place and ``compute`` needs the state *before* the step."""
        return view

    def compute(self, prev_state: Any, actions: Sequence[Any], state: Any) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}.compute(prev_state, actions, state) is missing")


class EnvReward(RewardComponent):
    """The environment's own reward, as one component among others."""

    name = "env"

    def compute(self, prev_state: StepView, actions: Sequence[Any], state: StepView) -> np.ndarray:
        return np.asarray([float(state.rewards.get(agent, 0.0)) for agent in state.agents], dtype=np.float32)


class CoGridReward(RewardComponent):
    """One of CoGrid's ``Reward`` classes as a component.

    CoGrid rewards read CoGrid's array state before and after the step; this
    component captures it from the environment and reorders CoGrid's agents into
    the trial's actor order. The CoGrid reward is built with coefficient 1 and no
    broadcast, so that coefficient and ``common`` stay Trialog's.
    """

    def __init__(
        self,
        reward: type | str,
        *,
        coefficient: float = 1.0,
        common: bool = False,
        name: str | None = None,
        **reward_kwargs: Any,
    ) -> None:
        cls = load_entry(reward, what="CoGrid reward") if isinstance(reward, str) else reward
        super().__init__(coefficient=coefficient, common=common, name=name or _snake(cls.__name__))
        self.reward = cls(coefficient=1.0, common_reward=False, **reward_kwargs)

    def capture(self, view: StepView) -> _CoGridTick:
        from cogrid.core.pipeline.step import envstate_to_dict

        env = view.env
        # CoGrid 0.3 has no public accessor for its array state and reward tables;
        # these are the attributes its own step pipeline passes to rewards.
        # Its arrays follow its sorted agent ids; ``order[i]`` is actor i's row.
        order = np.asarray([env._agent_id_order.index(agent) for agent in view.agents])
        return _CoGridTick(envstate_to_dict(env._env_state), env._reward_config, order)

    def compute(self, prev_state: _CoGridTick, actions: Sequence[Any], state: _CoGridTick) -> np.ndarray:
        # -1 matches no CoGrid action, so an agent that did not act earns no interaction reward.
        acted = np.full(state.reward_config["n_agents"], -1, dtype=np.int32)
        for row, action in zip(state.order, actions, strict=True):
            if action is not None:
                acted[row] = int(action)
        raw = self.reward.compute(prev_state.state, state.state, acted, state.reward_config)
        return np.asarray(raw, dtype=np.float32)[state.order]


@dataclass(frozen=True)
class _CoGridTick:
    state: Any
    reward_config: Mapping[str, Any]
    order: np.ndarray


_SHORT_NAMES: dict[str, tuple[type[RewardComponent], str | None]] = {
    "env": (EnvReward, None),
    "overcooked.delivery": (CoGridReward, "cogrid.envs.overcooked.rewards:DeliveryReward"),
    "overcooked.onion_in_pot": (CoGridReward, "cogrid.envs.overcooked.rewards:OnionInPotReward"),
    "overcooked.soup_in_dish": (CoGridReward, "cogrid.envs.overcooked.rewards:SoupInDishReward"),
}


def component_from_config(entry: Mapping[str, Any], *, path: str = "rewards") -> RewardComponent:
    """Build one component from its config entry (see the module docstring)."""
    if not isinstance(entry, Mapping) or "component" not in entry:
        raise SpecError(
            f"each reward needs at least {{component: <short name or module:Class>}}, got {entry!r}", path=path
        )
    unknown = set(entry) - {"component", "coefficient", "common", "name", "kwargs"}
    if unknown:
        raise SpecError(
            f"unknown keys {sorted(unknown)}; a reward has component, coefficient, common, name, kwargs", path=path
        )
    ref = entry["component"]
    options = {
        "coefficient": float(entry.get("coefficient", 1.0)),
        "common": bool(entry.get("common", False)),
        "name": entry.get("name") or (ref if ref in _SHORT_NAMES else None),
    }
    kwargs = dict(entry.get("kwargs") or {})
    if ref in _SHORT_NAMES:
        cls, cogrid = _SHORT_NAMES[ref]
        return cls(cogrid, **options, **kwargs) if cogrid else cls(**options, **kwargs)
    if ":" not in str(ref):
        raise SpecError(
            f"unknown reward component {ref!r}; short names: {', '.join(_SHORT_NAMES)}, or 'module:Class'", path=path
        )
    cls = load_entry(ref, what="reward component")
    if isinstance(cls, type) and issubclass(cls, RewardComponent):
        return cls(**options, **kwargs)
    if _is_cogrid_reward(cls):
        return CoGridReward(cls, **options, **kwargs)
    raise SpecError(f"{ref} is neither a trialog RewardComponent nor a CoGrid Reward subclass", path=path)


class RewardSet:
    """The reward components of one trial, for a fixed list of actors."""

    def __init__(self, components: Sequence[RewardComponent], actors: Sequence[str]) -> None:
        names = [c.name for c in components]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise SpecError(f"reward component names must be unique; give `name:` to tell {duplicated} apart")
        if TOTAL in names:
            raise SpecError(f"{TOTAL!r} is the source of the summed reward; name the component otherwise")
        self.components = tuple(components)
        self.actors = tuple(actors)

    @classmethod
    def from_config(cls, entries: Sequence[Mapping[str, Any]], actors: Sequence[str]) -> RewardSet:
        return cls([component_from_config(e, path=f"rewards[{i}]") for i, e in enumerate(entries)], actors)

    @property
    def coefficients(self) -> dict[str, float]:
        return {c.name: c.coefficient for c in self.components}

    def set_coefficients(self, coefficients: Mapping[str, float]) -> None:
        """Change some coefficients (by component name); unknown names are an error."""
        by_name = {c.name: c for c in self.components}
        unknown = sorted(set(coefficients) - set(by_name))
        if unknown:
            raise TrialError(
                f"reward_coefficients names unknown components {unknown}; this trial has {sorted(by_name)}"
            )
        for name, value in coefficients.items():
            by_name[name].coefficient = float(value)

    def capture(self, view: StepView) -> list[Any]:
        """What every component keeps of a tick; pass it back to :meth:`values`."""
        return [c.capture(view) for c in self.components]

    def values(self, before: Sequence[Any], actions: Sequence[Any], after: Sequence[Any]) -> dict[str, np.ndarray]:
        """Each component's weighted values, shape ``(n_actors,)``, by component name."""
        out = {}
        for component, prev_state, state in zip(self.components, before, after, strict=True):
            raw = np.asarray(component.compute(prev_state, actions, state), dtype=np.float32)
            if raw.shape != (len(self.actors),):
                raise TrialError(
                    f"reward component {component.name!r} returned shape {raw.shape}, expected ({len(self.actors)},)"
                )
            if component.common:
                raw = np.full(len(self.actors), raw.sum(), dtype=np.float32)
            out[component.name] = raw
        return out

    def rewards(self, before: Sequence[Any], actions: Sequence[Any], after: Sequence[Any]) -> list[RewardOut]:
        """The step's rewards for the log: per actor, the total and its breakdown."""
        raw = self.values(before, actions, after)
        out: list[RewardOut] = []
        for i, actor in enumerate(self.actors):
            parts = [(c, float(raw[c.name][i])) for c in self.components if raw[c.name][i] != 0.0]
            if not parts:
                continue
            out.append(RewardOut(actor, sum(c.coefficient * v for c, v in parts), 1.0, TOTAL))
            out.extend(
                RewardOut(actor, c.coefficient * v, 0.0, c.name, {"raw": v, "coefficient": c.coefficient})
                for c, v in parts
            )
        return out


def _snake(name: str) -> str:
    out = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name).lstrip("_")
    return out.removesuffix("_reward") or out


def _is_cogrid_reward(obj: Any) -> bool:
    try:
        from cogrid.core.pipeline.rewards import Reward
    except ImportError:
        return False
    return isinstance(obj, type) and issubclass(obj, Reward)
