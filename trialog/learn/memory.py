"""From the datalog's samples to transitions, and the replay memory that holds them.

A transition is what one actor lived from tick t to t+1: the observation of t,
its action, the aggregated reward of t (I-4, retroactive rewards included, as
:class:`~trialog.datalog.samples.TrialFold` folds them), the observation of t+1
and whether that one ended the actor's episode (``terminated``: no bootstrapping
past it; a truncation does bootstrap). Each carries the ``policy_version`` of its
action (-1 when no model chose it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def flat_observation(observation: Any) -> np.ndarray:
    """An observation as one float32 vector (dicts: their values in key order, flattened)."""
    if isinstance(observation, Mapping):
        return np.concatenate([flat_observation(observation[k]) for k in sorted(observation)]) if observation else np.zeros(0, np.float32)
    return np.asarray(observation, dtype=np.float32).reshape(-1)


@dataclass
class Transitions:
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    dones: np.ndarray
    versions: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)

    @classmethod
    def concat(cls, parts: Sequence[Transitions]) -> Transitions:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


def transitions(samples: Sequence[Any]) -> Transitions | None:
    """The transitions of one actor's samples (sorted by tick); None when there are none."""
    rows = [(s, n) for s, n in zip(samples, samples[1:]) if s.action is not None and n.tick == s.tick + 1]
    if not rows:
        return None
    return Transitions(
        observations=np.stack([flat_observation(s.observation) for s, _ in rows]),
        actions=np.array([int(s.action) for s, _ in rows], np.int32),
        rewards=np.array([s.reward for s, _ in rows], np.float32),
        next_observations=np.stack([flat_observation(n.observation) for _, n in rows]),
        dones=np.array([n.terminated for _, n in rows], np.float32),
        versions=np.array([-1 if s.policy_version is None else s.policy_version for s, _ in rows], np.int64),
    )


class ReplayMemory:
    """A ring buffer of transitions (the oldest are overwritten when full)."""

    def __init__(self, capacity: int, observation_size: int):
        self.capacity = capacity
        self.observations = np.zeros((capacity, observation_size), np.float32)
        self.next_observations = np.zeros((capacity, observation_size), np.float32)
        self.actions = np.zeros(capacity, np.int32)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.size = 0
        self.added = 0  # transitions ever added: position of the next one is added % capacity

    def add(self, t: Transitions) -> np.ndarray:
        """Store transitions; returns the slots they went to (to correct rewards later)."""
        slots = (self.added + np.arange(len(t))) % self.capacity
        self.observations[slots] = t.observations
        self.next_observations[slots] = t.next_observations
        self.actions[slots] = t.actions
        self.rewards[slots] = t.rewards
        self.dones[slots] = t.dones
        self.added += len(t)
        self.size = min(self.capacity, self.size + len(t))
        return slots

    def sample(self, rng: np.random.Generator, batch_size: int, batches: int = 1) -> dict[str, np.ndarray]:
        """``batches`` minibatches at once, shaped (batches, batch_size, ...)."""
        idx = rng.integers(0, self.size, (batches, batch_size))
        return {"obs": self.observations[idx], "actions": self.actions[idx], "rewards": self.rewards[idx],
                "next_obs": self.next_observations[idx], "dones": self.dones[idx]}  # fmt: skip
