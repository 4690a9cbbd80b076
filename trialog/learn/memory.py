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
        return (
            np.concatenate([flat_observation(observation[k]) for k in sorted(observation)])
            if observation
            else np.zeros(0, np.float32)
        )
    return np.asarray(observation, dtype=np.float32).reshape(-1)


def action_array(actions: Sequence[Any]) -> np.ndarray:
    """Actions as one array: Discrete ones (integers) as int32, Box ones (arrays) as float32 rows."""
    if all(isinstance(a, (int, np.integer)) for a in actions):
        return np.array(actions, np.int32)
    return np.stack([flat_observation(a) for a in actions])


@dataclass
class Transitions:
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    dones: np.ndarray
    versions: np.ndarray
    ends: (
        np.ndarray
    )  # 1.0: the next transition in this batch (or, when last, the next one added) does not continue this one

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
        actions=action_array([s.action for s, _ in rows]),
        rewards=np.array([s.reward for s, _ in rows], np.float32),
        next_observations=np.stack([flat_observation(n.observation) for _, n in rows]),
        dones=np.array([n.terminated for _, n in rows], np.float32),
        versions=np.array([-1 if s.policy_version is None else s.policy_version for s, _ in rows], np.int64),
        ends=np.array([i + 1 == len(ticks) or ticks[i + 1] != ticks[i] + 1 for i in range(len(ticks))], np.float32),
    )


def one_step(
    observation: Any, action: Any, reward: float, next_observation: Any, terminated: bool, version: int | None
) -> Transitions:
    """One transition, the last of its batch: what the learner service and ``--in-process`` add at
    each env step, made without the lists and stacks of :func:`transitions` (a quarter of the
    learner service's time per step)."""
    return Transitions(
        observations=flat_observation(observation)[None],
        actions=action_array([action]),
        rewards=np.array([reward], np.float32),
        next_observations=flat_observation(next_observation)[None],
        dones=np.array([terminated], np.float32),
        versions=np.array([-1 if version is None else version], np.int64),
        ends=np.ones(1, np.float32),
    )


class ReplayMemory:
    """A ring buffer of transitions (the oldest are overwritten when full), sampled as
    n-step transitions: the discounted rewards of up to ``n_step`` transitions of one
    sequence, the observation after the last of them, whether that one terminated, and
    the discount to bootstrap with (γ^m after m steps; 1-step when ``n_step`` is 1).
    Computed when sampled, so that rewards corrected later (retroactive ones) count.

    Every transition added gets a serial number (``added`` before it; its slot is the
    serial modulo the capacity) and a link to the serial of the transition that
    continues its sequence. Links, not adjacent slots: a learner fed by several trials at
    once adds their steps interleaved. A link counts while its target is still in memory
    (the slot holds that serial), so an overwritten successor ends a return."""

    def __init__(self, capacity: int, observation_size: int, *, n_step: int = 1, gamma: float = 0.99):
        self.capacity = capacity
        self.n_step, self.gamma = n_step, gamma
        self.observations = np.zeros((capacity, observation_size), np.float32)
        self.next_observations = np.zeros((capacity, observation_size), np.float32)
        self.actions = np.zeros(capacity, np.int32)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.serials = np.full(capacity, -1, np.int64)  # serial of the transition in each slot
        self.successors = np.full(capacity, -1, np.int64)  # serial of the one continuing it (-1: none yet, or none)
        self.demonstrated = np.zeros(capacity, np.float32)  # 1.0: a demonstrator's step (DQN's ``demonstrator``)
        self.size = 0
        self.added = 0  # transitions ever added: the next one's serial

    def add(self, t: Transitions, *, follows: int = -1, demonstration: bool = False) -> np.ndarray:
        """Store transitions; returns their serials (to correct their rewards later, or to
        say what a later batch ``follows``: the serial of the transition its first one
        continues). Within the batch, one continues the previous unless that ``ends``; the
        last one continues into the next transition added unless it ``ends``. ``demonstration``:
        a demonstrator acted them (sampled with ``demonstrated`` 1.0)."""
        n = len(t)
        serials = self.added + np.arange(n, dtype=np.int64)
        first = self.added % self.capacity
        # A slice where the batch does not wrap: index arrays cost several times as much, and the
        # learner service adds each env step on its own.
        slots = slice(first, first + n) if first + n <= self.capacity else serials % self.capacity
        self.observations[slots] = t.observations
        self.next_observations[slots] = t.next_observations
        self.actions[slots] = t.actions
        self.rewards[slots] = t.rewards
        self.dones[slots] = t.dones
        self.demonstrated[slots] = float(demonstration)
        self.serials[slots] = serials
        self.successors[slots] = np.where(t.ends == 0, serials + 1, -1)
        if follows >= 0 and n and self.holds(follows):
            self.successors[follows % self.capacity] = serials[0]
        self.added += n
        self.size = min(self.capacity, self.size + n)
        return serials

    def holds(self, serials: np.ndarray | int) -> np.ndarray | bool:
        """Whether these transitions are still in memory (not overwritten)."""
        serials = np.asarray(serials)
        return (serials >= 0) & (self.serials[serials % self.capacity] == serials)

    def set_rewards(self, serials: np.ndarray, rewards: np.ndarray) -> None:
        """Corrected rewards (retroactive ones) of transitions still in memory."""
        serials, rewards = np.asarray(serials), np.asarray(rewards, np.float32)
        kept = self.holds(serials)
        self.rewards[serials[kept] % self.capacity] = rewards[kept]

    def sample(self, rng: np.random.Generator, batch_size: int, batches: int = 1) -> dict[str, np.ndarray]:
        """``batches`` minibatches at once, shaped (batches, batch_size, ...)."""
        idx = rng.integers(0, self.size, (batches, batch_size))
        rewards, last = self.rewards[idx].copy(), idx.copy()
        discounts = np.full(idx.shape, self.gamma, np.float32)
        going = np.ones(idx.shape, bool)
        for k in range(1, self.n_step):
            successor = self.successors[last]
            going &= (self.dones[last] == 0) & self.holds(successor)  # the sequence goes on, its next step in memory
            nxt = np.where(going, successor % self.capacity, last)
            rewards += np.where(going, self.gamma**k * self.rewards[nxt], 0.0).astype(np.float32)
            discounts = np.where(going, np.float32(self.gamma ** (k + 1)), discounts)
            last = nxt
        return {
            "obs": self.observations[idx],
            "actions": self.actions[idx],
            "rewards": rewards,
            "next_obs": self.next_observations[last],
            "dones": self.dones[last],
            "discounts": discounts,
            "demonstrated": self.demonstrated[idx],
        }
