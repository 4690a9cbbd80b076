"""Host any Gymnasium environment as a single-actor Trialog environment.

``env`` is a registry id (``CartPole-v1``, or ``module:Env-v0`` to import the
module that registers it) or an import path ``module:callable`` returning a
``gymnasium.Env``; ``kwargs`` go to ``gymnasium.make`` or the callable. The trial
has exactly one actor; it plays the env's only agent, named ``agent``::

    environments:
      cartpole:
        entry: "trialog.adapters.gymnasium:GymnasiumEnvironment"
        config: {env: CartPole-v1}
"""

from __future__ import annotations

from typing import Any

import gymnasium

from trialog.adapters.hosting import HostConfig, HostedEnvironment
from trialog.errors import SpecError
from trialog.spec import load_entry

AGENT = "agent"


class GymnasiumEnvironment(HostedEnvironment):
    """A Gymnasium env as a Trialog environment with one actor."""

    @classmethod
    def open(cls, config: HostConfig) -> Any:
        _, sep, attr = config.env.partition(":")
        if sep and attr.replace(".", "_").isidentifier():
            env = load_entry(config.env, what="Gymnasium environment")(**config.kwargs)
        else:
            try:
                env = gymnasium.make(config.env, **config.kwargs)
            except gymnasium.error.Error as exc:
                raise SpecError(f"gymnasium cannot make {config.env!r}: {exc}", path="environment_config.env") from exc
        if not isinstance(env, gymnasium.Env):
            raise SpecError(
                f"{config.env} returned a {type(env).__name__}, not a gymnasium.Env", path="environment_config.env"
            )
        return SingleAgent(env)

    @classmethod
    def env_name(cls, config: HostConfig, env: Any) -> str:
        spec = env.env.spec
        return config.name or (spec.id if spec is not None else super().env_name(config, env))


class SingleAgent:
    """A Gymnasium env seen through PettingZoo's parallel API, with one agent."""

    possible_agents = (AGENT,)

    def __init__(self, env: gymnasium.Env) -> None:
        self.env = env
        self.agents: list[str] = []
        self.metadata = env.metadata

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.agents = [AGENT]
        return {AGENT: observation}, {AGENT: info}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        observation, reward, terminated, truncated, info = self.env.step(actions[AGENT])
        if terminated or truncated:
            self.agents = []
        return {AGENT: observation}, {AGENT: float(reward)}, {AGENT: terminated}, {AGENT: truncated}, {AGENT: info}

    def close(self) -> None:
        self.env.close()
