"""The random actor: a valid action drawn at random, for any actor class.

It samples from the action space described by the ``trialog.space`` property of
the class's action schema (the adapters write it; see ``docs/environments.md``),
honouring an ``action_mask`` field in the observation for Discrete actions. The
description can also be given explicitly, for action schemas that cannot carry it
(a bare ``trialog.Tensor``): ``RandomAgent(trial, actor, action_space=...)``, or
``action_space`` in the actor's config.

Draws are deterministic given the trial seed and the actor's name, as recovery
requires (a NumPy generator seeded with both).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from trialog.actor import Agent
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError
from trialog.protocol.spaces import action_space_of, sample_action


class RandomAgent(Agent):
    """Plays any actor class whose action space it can see, uniformly at random."""

    # Set by the actor runtime before the first observation: the class's action
    # schema as parsed JSON.
    action_schema: Any = None

    def __init__(self, trial: TrialInfo, actor: ActorInfo, *, action_space: Mapping[str, Any] | None = None) -> None:
        super().__init__(trial, actor)
        self.action_space = action_space or actor.config.get("action_space")
        self.rng = np.random.default_rng([trial.seed % 2**63, zlib.crc32(actor.name.encode())])

    def decide(self, observation: Any) -> Any:
        if self.action_space is None:
            if self.action_schema is None:
                raise TrialogError(
                    f"RandomAgent {self.actor.name!r} knows no action space: "
                    "it needs the action schema or action_space="
                )
            self.action_space = action_space_of(self.action_schema)
        return sample_action(self.action_space, self.rng, observation)
