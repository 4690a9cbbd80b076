"""What the off-policy learners (DQN, TD3) share: a replay memory fed under a lock (the
learner service adds from its loop while a round trains in a thread), the rounds owed at
so many env steps, and the counters a version carries and a restart resumes from."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from trialog.learn.memory import ReplayMemory, Transitions


class OffPolicyLearner:
    """Off-policy: learns from any transition, whichever version acted; trains as the
    samples come (``rounds_due``), never blocking the actors.

    ``cfg`` is the algorithm's config (``seed``, ``train_frequency``, ``learning_starts``,
    ``batch_size``, ``gradient_steps``); the subclass sets ``memory`` in its ``__init__``.
    """

    on_policy = False
    memory: ReplayMemory

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.lock = threading.Lock()
        self.env_steps = 0  # transitions received
        self.rounds = 0  # training rounds done
        self.updates = 0  # gradient steps done
        self.round_scalars: dict[str, float] = {}  # the last round's means, for the curves

    @property
    def takes_demonstrations(self) -> bool:
        """Whether heatup trials are a demonstrator's (DQN's ``demonstrator``): their
        transitions are then added with ``demonstration=True``."""
        return getattr(self.cfg, "demonstrator", None) is not None

    def add(self, t: Transitions, *, count: bool = True, follows: int = -1, demonstration: bool = False) -> np.ndarray:
        """Store transitions (their serials: see :class:`ReplayMemory`); ``count=False``
        refills the memory after a restart with transitions the restored counters already
        include; ``demonstration``: a demonstrator acted them."""
        with self.lock:
            self.env_steps += len(t) if count else 0
            return self.memory.add(t, follows=follows, demonstration=demonstration)

    def set_rewards(self, serials: np.ndarray, rewards: np.ndarray) -> None:
        """Retroactive rewards changed transitions already in memory."""
        with self.lock:
            self.memory.set_rewards(serials, rewards)

    def rounds_due(self) -> int:
        """Rounds owed at this many env steps: one per `train_frequency` steps after `learning_starts`."""
        owed = self.env_steps // self.cfg.train_frequency - self.cfg.learning_starts // self.cfg.train_frequency
        return max(0, owed - self.rounds)

    def sample_round(self) -> dict[str, np.ndarray]:
        """A round's `gradient_steps` minibatches, shaped (gradient_steps, batch_size, ...)."""
        with self.lock:
            return self.memory.sample(self.rng, self.cfg.batch_size, self.cfg.gradient_steps)

    def metadata(self) -> dict[str, Any]:
        # next_round_at: until the env steps reach it, this version is as trained as it gets.
        next_round_at = (
            self.rounds + 1 + self.cfg.learning_starts // self.cfg.train_frequency
        ) * self.cfg.train_frequency
        return {
            "env_steps": self.env_steps,
            "rounds": self.rounds,
            "updates": self.updates,
            "next_round_at": next_round_at,
            "config": dataclasses.asdict(self.cfg),
        }

    def restore_counters(self, meta: Mapping[str, Any]) -> None:
        """The counters of a version's metadata, after its tensors are restored."""
        self.rounds, self.updates = int(meta.get("rounds", 0)), int(meta.get("updates", 0))
        self.env_steps = int(meta.get("env_steps", 0))
        self.rng = np.random.default_rng([self.cfg.seed, self.rounds])  # a resumed run samples anew
