"""From the datalog's samples to transitions, and the replay memory that holds them.

A transition is what one actor lived from tick t to t+1: the observation of t,
its action, the aggregated reward of t (I-4, retroactive rewards included, as
:class:`~trialog.datalog.samples.TrialFold` folds them), the observation of t+1
and whether that one ended the actor's episode (``terminated``: no bootstrapping
past it; a truncation does bootstrap). Each carries the ``policy_version`` of its
action (-1 when no model chose it) and whether its actor's sequence stops after it
(``ends``: the episode ended, or the next tick's transition is missing), which tells
the memory where an n-step return must stop.
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
    ends: np.ndarray  # 1.0: the next transition in this batch (or, when last, the next one added) does not continue this one

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
    ticks = [s.tick for s, _ in rows]
    return Transitions(
        observations=np.stack([flat_observation(s.observation) for s, _ in rows]),
        actions=np.array([int(s.action) for s, _ in rows], np.int32),
        rewards=np.array([s.reward for s, _ in rows], np.float32),
        next_observations=np.stack([flat_observation(n.observation) for _, n in rows]),
        dones=np.array([n.terminated for _, n in rows], np.float32),
        versions=np.array([-1 if s.policy_version is None else s.policy_version for s, _ in rows], np.int64),
        ends=np.array([i + 1 == len(ticks) or ticks[i + 1] != ticks[i] + 1 for i in range(len(ticks))], np.float32),
    )


class ReplayMemory:
    """A ring buffer of transitions (the oldest are overwritten when full), sampled as
    n-step transitions: the discounted rewards of up to ``n_step`` transitions of one
    sequence, the observation after the last of them, whether that one terminated, and
    the discount to bootstrap with (γ^m after m steps; 1-step when ``n_step`` is 1).
    Computed when sampled, so that rewards corrected later (retroactive ones) count."""

    def __init__(self, capacity: int, observation_size: int, *, n_step: int = 1, gamma: float = 0.99):
        self.capacity = capacity
        self.n_step, self.gamma = n_step, gamma
        self.observations = np.zeros((capacity, observation_size), np.float32)
        self.next_observations = np.zeros((capacity, observation_size), np.float32)
        self.actions = np.zeros(capacity, np.int32)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.ends = np.ones(capacity, np.float32)
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
        self.ends[slots] = t.ends
        self.added += len(t)
        self.size = min(self.capacity, self.size + len(t))
        return slots

    def sample(self, rng: np.random.Generator, batch_size: int, batches: int = 1) -> dict[str, np.ndarray]:
        """``batches`` minibatches at once, shaped (batches, batch_size, ...)."""
        idx = rng.integers(0, self.size, (batches, batch_size))
        rewards, last = self.rewards[idx].copy(), idx.copy()
        discounts = np.full(idx.shape, self.gamma, np.float32)
        if self.n_step > 1:
            newer = (self.added - 1 - idx) % self.capacity  # transitions added after each sampled one
            going = self.ends[idx] == 0  # the sequence goes on in the next slot
            for k in range(1, self.n_step):
                going &= newer >= k  # ...once that slot has been written
                nxt = (idx + k) % self.capacity
                rewards += np.where(going, self.gamma**k * self.rewards[nxt], 0.0).astype(np.float32)
                discounts = np.where(going, np.float32(self.gamma ** (k + 1)), discounts)
                last = np.where(going, nxt, last)
                going &= self.ends[nxt] == 0
        return {"obs": self.observations[idx], "actions": self.actions[idx], "rewards": rewards,
                "next_obs": self.next_observations[last], "dones": self.dones[last], "discounts": discounts}  # fmt: skip
