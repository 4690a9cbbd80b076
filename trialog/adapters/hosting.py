"""What the PettingZoo and Gymnasium adapters share: hosting an environment that
speaks PettingZoo's parallel API as a Trialog environment implementation.

A subclass says how to open the environment (:meth:`HostedEnvironment.open`);
this class does the rest: reading the config, mapping actors onto the
environment's agents, deriving Avro schemas from the spaces, converting values
both ways, validating actions, keeping ``terminated`` and ``truncated`` apart, and
modular rewards (:mod:`trialog.rewards`).

The environment config (the spec's ``environment_config``)::

    env: "pettingzoo.classic.rps_v2:parallel_env"   # module:callable, or a Gymnasium id
    kwargs: {max_cycles: 10}                         # passed to the callable
    name: rps                                        # optional: names the Avro records
    agents: {alice: player_0, bob: player_1}         # optional: actor → env agent id
    agent_classes: {player: [player_0, player_1]}    # optional: which agents an actor class describes
    rewards: [{component: env}]                      # optional: modular rewards
    turn_based: false                                # AEC envs that are not parallelizable
    view: overcooked                                 # optional: a view for pages (trialog/adapters/views.py)
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from trialog.adapters.spaces import SpaceCodec, infer_space, space_codec
from trialog.adapters.views import VIEWS, view_function
from trialog.environment import ActorInfo, Environment, Step, TrialInfo
from trialog.errors import SpecError, TrialError
from trialog.protocol.spaces import ACTION_MASK
from trialog.rewards import RewardSet, StepView

CONFIG_KEYS = ("env", "kwargs", "name", "agents", "agent_classes", "rewards", "turn_based", "view")


@dataclass(frozen=True)
class HostConfig:
    """The adapter's part of the environment config, checked."""

    env: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    agents: Mapping[str, Any] | None = None
    agent_classes: Mapping[str, Sequence[Any]] | None = None
    rewards: Sequence[Mapping[str, Any]] | None = None
    turn_based: bool = False
    view: str | None = None

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> HostConfig:
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise SpecError(
                f"unknown keys {unknown}; the adapter reads {', '.join(CONFIG_KEYS)}", path="environment_config"
            )
        if not isinstance(config.get("env"), str) or not config["env"]:
            raise SpecError(
                "`env` is required: an import path 'module:callable' or a Gymnasium id", path="environment_config.env"
            )
        for key, kind in (("kwargs", Mapping), ("agents", Mapping), ("agent_classes", Mapping), ("rewards", list)):
            if config.get(key) is not None and not isinstance(config[key], kind):
                raise SpecError(
                    f"must be a {'list' if kind is list else 'mapping'}, got {config[key]!r}",
                    path=f"environment_config.{key}",
                )
        return cls(
            env=config["env"],
            kwargs=dict(config.get("kwargs") or {}),
            name=config.get("name"),
            agents=config.get("agents"),
            agent_classes=config.get("agent_classes"),
            rewards=config.get("rewards"),
            turn_based=bool(config.get("turn_based", False)),
            view=_view_name(config.get("view")),
        )


@dataclass(frozen=True)
class ActorCodecs:
    """How one actor's observations and actions cross the log."""

    observation: SpaceCodec
    action: SpaceCodec
    mask_from_info: bool  # the action mask comes from ``info`` and is folded into the observation

    def same_schemas(self, other: ActorCodecs) -> bool:
        return _dumps(self.observation.schema) == _dumps(other.observation.schema) and _dumps(
            self.action.schema
        ) == _dumps(other.action.schema)


class HostedEnvironment(Environment):
    """Hosts an environment with PettingZoo's parallel API. Subclasses implement :meth:`open`."""

    CODE_KEYS = ("env", "rewards", "view")  # import paths: from the service's own spec only (I-9)

    @classmethod
    def open(cls, config: HostConfig) -> Any:
        """Create the environment as a PettingZoo ``ParallelEnv`` (or something that acts like one)."""
        raise NotImplementedError

    @classmethod
    def env_name(cls, config: HostConfig, env: Any) -> str:
        """The name the Avro records derive from: ``name`` in the config, else the env's own."""
        return (
            config.name or getattr(env, "metadata", {}).get("name") or config.env.partition(":")[0].rsplit(".", 1)[-1]
        )

    # --- the Environment contract ----------------------------------------------

    def __init__(self, trial: TrialInfo) -> None:
        super().__init__(trial)
        self.config = HostConfig.parse(trial.config)
        self.env = self.open(self.config)
        self.name = self.env_name(self.config, self.env)
        self.agent_of = _map_actors(self.config, list(self.env.possible_agents), trial.actors)
        self.actors = trial.actor_names
        self.rewards = RewardSet.from_config(self.config.rewards, self.actors) if self.config.rewards else None
        self.set_parameters(trial.parameters)
        self.codecs: dict[str, ActorCodecs] = {}
        self.tick = 0
        self._captured: list[Any] | None = None

    def start(self) -> dict[str, Any]:
        observations, infos = self.env.reset(seed=self.trial.seed)
        infos = infos or {}
        missing = [a for a in self.actors if self.agent_of[a] not in observations]
        if missing:
            raise TrialError(
                f"{self.name}: reset() returned no observation for {missing}", trial_id=self.trial.trial_id
            )
        self.codecs = self._derive_all(observations, infos)
        self.tick = 0
        if self.rewards is not None:
            self._captured = self.rewards.capture(self._view(observations, {}, infos))
        return {a: self._observation(a, observations, infos) for a in self.actors}

    def update(self, actions: Mapping[str, Any]) -> Step:
        live = [a for a in self.actors if self.agent_of[a] in self.env.agents]
        missing = [a for a in live if a not in actions]
        if missing:
            raise TrialError(
                f"{self.name}: no action from {missing}, who are still in the environment", trial_id=self.trial.trial_id
            )
        native = {a: self._action(a, actions[a]) for a in live}
        observations, env_rewards, terminated, truncated, infos = self.env.step(
            {self.agent_of[a]: v for a, v in native.items()}
        )
        infos = infos or {}
        self.tick += 1
        present = [a for a in self.actors if self.agent_of[a] in observations]
        if self.rewards is None:
            rewards: Any = {
                a: float(env_rewards[self.agent_of[a]]) for a in self.actors if self.agent_of[a] in env_rewards
            }
        else:
            after = self.rewards.capture(self._view(observations, env_rewards, infos))
            rewards = self.rewards.rewards(self._captured, [native.get(a) for a in self.actors], after)
            self._captured = after
        return Step(
            observations={a: self._observation(a, observations, infos) for a in present},
            rewards=rewards,
            terminated={a: bool(terminated[self.agent_of[a]]) for a in self.actors if self.agent_of[a] in terminated},
            truncated={a: bool(truncated[self.agent_of[a]]) for a in self.actors if self.agent_of[a] in truncated},
            done=not self.env.agents,
        )

    def end(self) -> None:
        self.env.close()

    def view(self) -> dict[str, Any] | None:
        if self.config.view is None:
            return None
        return view_function(self.config.view)(getattr(self.env, "unwrapped", self.env), self.agent_of)

    def set_parameters(self, parameters: Mapping[str, Any]) -> None:
        coefficients = parameters.get("reward_coefficients")
        if coefficients is None:
            return
        if self.rewards is None:
            raise TrialError(
                f"{self.name}: reward_coefficients were given but the environment config lists no `rewards`",
                trial_id=self.trial.trial_id,
            )
        self.rewards.set_coefficients(coefficients)

    @classmethod
    def describe(cls, config: Mapping[str, Any], actor_class: str) -> dict[str, Any]:
        """The schemas (and space descriptions) of ``actor_class``, derived from the
        spaces of its agents: ``agent_classes[actor_class]`` or, by default, every
        agent. They must all give the same schemas."""
        host = HostConfig.parse(config)
        env = cls.open(host)
        try:
            observations, infos = env.reset(seed=0)
            name = cls.env_name(host, env)
            possible = list(env.possible_agents)
            if host.agent_classes is None:
                refs = possible
            elif actor_class in host.agent_classes:
                refs = host.agent_classes[actor_class]
            else:
                raise SpecError(
                    f"actor class {actor_class!r} is not in agent_classes {sorted(host.agent_classes)}",
                    path="environment_config.agent_classes",
                )
            agents = [_resolve_agent(possible, ref) for ref in refs]
            derived = {
                agent: _derive(env, name, actor_class, agent, observations.get(agent), (infos or {}).get(agent))
                for agent in agents
            }
        finally:
            env.close()
        first_agent, first = next(iter(derived.items()))
        for agent, codecs in derived.items():
            if not codecs.same_schemas(first):
                raise SpecError(
                    f"agents {first_agent!r} and {agent!r} of actor class {actor_class!r} have different spaces "
                    f"({first.observation.space} / {first.action.space} vs "
                    f"{codecs.observation.space} / {codecs.action.space}); "
                    f"give each kind of agent its own class with `agent_classes`",
                    path="environment_config.agent_classes",
                )
        return {
            "observation": first.observation.schema,
            "action": first.action.schema,
            "observation_space": first.observation.description,
            "action_space": first.action.description,
        }

    @classmethod
    def default_actors(cls, config: Mapping[str, Any]) -> tuple[ActorInfo, ...]:
        """One actor per environment agent (for the contract check and quick tries)."""
        host = HostConfig.parse(config)
        env = cls.open(host)
        try:
            possible = list(env.possible_agents)
        finally:
            env.close()
        class_of = {}
        for actor_class, refs in (host.agent_classes or {}).items():
            class_of.update({_resolve_agent(possible, ref): actor_class for ref in refs})
        names = {agent: str(agent) if str(agent).isidentifier() else f"agent_{agent}" for agent in possible}
        return tuple(ActorInfo(names[agent], class_of.get(agent, "agent"), "check") for agent in possible)

    # --- conversions -----------------------------------------------------------

    def _derive_all(self, observations: Mapping[Any, Any], infos: Mapping[Any, Any]) -> dict[str, ActorCodecs]:
        out: dict[str, ActorCodecs] = {}
        by_class: dict[str, tuple[str, ActorCodecs]] = {}
        for actor in self.trial.actors:
            agent = self.agent_of[actor.name]
            codecs = _derive(self.env, self.name, actor.actor_class, agent, observations[agent], infos.get(agent))
            seen = by_class.setdefault(actor.actor_class, (actor.name, codecs))
            if not codecs.same_schemas(seen[1]):
                raise SpecError(
                    f"actors {seen[0]!r} and {actor.name!r} share actor class {actor.actor_class!r} "
                    f"but their agents have different spaces; give them different classes"
                )
            out[actor.name] = codecs
        return out

    def _observation(self, actor: str, observations: Mapping[Any, Any], infos: Mapping[Any, Any]) -> Any:
        agent = self.agent_of[actor]
        codecs = self.codecs[actor]
        value = observations[agent]
        if codecs.mask_from_info:
            value = {"observation": value, ACTION_MASK: (infos.get(agent) or {}).get(ACTION_MASK)}
        try:
            return codecs.observation.to_payload(value)
        except Exception as exc:
            raise TrialError(
                f"{self.name}: the observation of {actor!r} (agent {agent!r}) does not fit its space "
                f"{codecs.observation.space}: {exc}",
                trial_id=self.trial.trial_id,
            ) from exc

    def _action(self, actor: str, value: Any) -> Any:
        codec = self.codecs[actor].action
        try:
            native = codec.from_payload(value)
            valid = codec.contains(native)
        except Exception:  # whatever a malformed value makes NumPy or gymnasium raise, it is not a valid action
            valid = False
        if not valid:
            raise TrialError(
                f"{self.name}: actor {actor!r} sent {value!r}, outside its action space {codec.space}",
                trial_id=self.trial.trial_id,
                reason="invalid_action",
            )
        return native

    def _view(
        self, observations: Mapping[Any, Any], rewards: Mapping[Any, float], infos: Mapping[Any, Any]
    ) -> StepView:
        agents = tuple(self.agent_of[a] for a in self.actors)
        return StepView(self.tick, getattr(self.env, "unwrapped", self.env), agents, observations, rewards, infos)


def _derive(env: Any, env_name: str, actor_class: str, agent: Any, observation: Any, info: Any) -> ActorCodecs:
    namespace = f"trialog.env.{env_name}.{actor_class}"
    where = f"agent {agent!r} of {env_name}"
    observation_space = _observation_space(env, agent, observation, where)
    mask = (info or {}).get(ACTION_MASK) if isinstance(info, Mapping) else None
    folds_mask = mask is not None and not (
        isinstance(observation_space, spaces.Dict) and ACTION_MASK in observation_space.spaces
    )
    if folds_mask:
        observation_space = spaces.Dict(
            {
                "observation": observation_space,
                ACTION_MASK: infer_space(np.asarray(mask), where=f"info['{ACTION_MASK}'] of {where}"),
            }
        )
    try:
        action_space = env.action_space(agent)
    except Exception as exc:
        raise SpecError(
            f"{where}: action_space({agent!r}) failed: {exc}; an adapter needs each agent's action space"
        ) from exc
    return ActorCodecs(
        observation=space_codec(
            observation_space, namespace=namespace, name="Observation", where=f"observation space of {where}"
        ),
        action=space_codec(action_space, namespace=namespace, name="Action", where=f"action space of {where}"),
        mask_from_info=folds_mask,
    )


def _observation_space(env: Any, agent: Any, observation: Any, where: str) -> spaces.Space:
    """The env's declared space, or one inferred from the first observation."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PettingZoo warns before falling back to a dict that may not exist
            space = env.observation_space(agent)
        if isinstance(space, spaces.Space):
            return space
    except (AttributeError, KeyError, NotImplementedError, TypeError):
        pass
    if observation is None:
        raise SpecError(
            f"{where}: observation_space({agent!r}) is missing and reset() gave no observation to infer it from"
        )
    return infer_space(observation, where=f"observation of {where}")


def _map_actors(config: HostConfig, possible: list[Any], actors: Sequence[ActorInfo]) -> dict[str, Any]:
    names = [a.name for a in actors]
    if config.agents is None:
        if len(names) != len(possible):
            raise SpecError(
                f"the environment has {len(possible)} agents {possible} but the trial has {len(names)} actors {names}; "
                f"map them with `agents: {{actor name: agent id}}`",
                path="environment_config.agents",
            )
        return dict(zip(names, possible, strict=True))
    unknown = sorted(set(config.agents) - set(names))
    if unknown:
        raise SpecError(
            f"maps actors {unknown} that the trial does not have; actors: {names}", path="environment_config.agents"
        )
    mapping = {actor: _resolve_agent(possible, ref) for actor, ref in config.agents.items()}
    unmapped_actors = [n for n in names if n not in mapping]
    unmapped_agents = [a for a in possible if a not in mapping.values()]
    if unmapped_actors or unmapped_agents or len(set(map(repr, mapping.values()))) != len(mapping):
        raise SpecError(
            f"every actor must play exactly one agent and every agent have one actor; actors left: {unmapped_actors}, "
            f"agents left: {unmapped_agents}, mapping: {dict(mapping)}",
            path="environment_config.agents",
        )
    return mapping


def _resolve_agent(possible: list[Any], ref: Any) -> Any:
    """An agent id from the config: YAML may say ``"0"`` for CoGrid's integer 0."""
    for agent in possible:
        if agent == ref:
            return agent
    for agent in possible:
        if str(agent) == str(ref):
            return agent
    raise SpecError(f"{ref!r} is not an agent of this environment; agents: {possible}", path="environment_config")


def _view_name(name: Any) -> str | None:
    if name is not None and name not in VIEWS and not (isinstance(name, str) and ":" in name):
        raise SpecError(
            f"unknown view {name!r}: a shipped view ({', '.join(VIEWS)}) or your own as 'package.module:function'",
            path="environment_config.view",
        )
    return name


def _dumps(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True)
