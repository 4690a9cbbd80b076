"""Host any PettingZoo environment as a Trialog environment implementation.

``env`` names a callable by import path that returns a ``ParallelEnv`` — or an
``AECEnv``, converted with PettingZoo's ``aec_to_parallel`` when its metadata says
``is_parallelizable``, or with ``turn_based_aec_to_parallel`` when the config says
``turn_based: true`` (board games: only the agent whose turn it is acts; the
others' actions are ignored). Spec snippet::

    environments:
      rps:
        entry: "trialog.adapters.pettingzoo:PettingZooEnvironment"
        config: {env: "pettingzoo.classic.rps_v2:parallel_env", kwargs: {num_actions: 3}}

Everything else — actors onto agents, spaces onto Avro schemas, rewards — is
:class:`~trialog.adapters.hosting.HostedEnvironment`.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.conversions import aec_to_parallel, turn_based_aec_to_parallel

from trialog.adapters.hosting import HostConfig, HostedEnvironment
from trialog.errors import SpecError
from trialog.spec import load_entry


class PettingZooEnvironment(HostedEnvironment):
    """A PettingZoo ParallelEnv (or parallelizable AEC env) as a Trialog environment."""

    @classmethod
    def open(cls, config: HostConfig) -> Any:
        factory = load_entry(config.env, what="PettingZoo environment")
        env = factory(**config.kwargs)
        if isinstance(env, AECEnv):
            if config.turn_based:
                return turn_based_aec_to_parallel(env)
            if not env.metadata.get("is_parallelizable", False):
                raise SpecError(
                    f"{config.env} is an AEC environment that is not parallelizable "
                    f"(metadata['is_parallelizable'] is not true); "
                    f"set `turn_based: true` to host it one turn per tick",
                    path="environment_config.env",
                )
            return aec_to_parallel(env)
        if not all(hasattr(env, attr) for attr in ("possible_agents", "reset", "step", "action_space")):
            raise SpecError(
                f"{config.env} returned a {type(env).__name__}, not a PettingZoo environment",
                path="environment_config.env",
            )
        return env
