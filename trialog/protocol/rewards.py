"""Rewards: the bounds every reward keeps, and their aggregation (I-4).

**Bounds** (one rule for every writer and reader, in every language — docs/protocol.md):
a reward counts only if its value is a finite number with ``|value| ≤ MAX_REWARD_VALUE``
(10¹²) and its confidence a finite number with ``0 ≤ confidence ≤ MAX_CONFIDENCE``
(10⁶). :func:`reward_bounds_problem` says why a pair breaks the rule. The orchestrator
dead-letters such a reward (:func:`trialog.protocol.owners.reward_problem`), and everything
that counts rewards — the datalog's fold, controllers' returns, the analytics jobs —
skips the same record; the SDKs refuse to send one. Within the bounds the sums below
cannot overflow: each cᵢvᵢ is at most 10¹⁸, so Σcᵢvᵢ stays finite for up to about
10²⁹⁰ rewards, and the aggregate of one (actor, tick) is within ±10¹².

**Aggregation.** For one (actor, tick), the aggregated reward of all rewards from all
sources is Σcᵢvᵢ / Σcᵢ over the rewards with cᵢ > 0, and 0 when there are none. Raw
rewards stay in the log; aggregation happens when reading.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Protocol

import numpy as np

from trialog.protocol.trial import reaches

# The bounds a reward must keep to count (docs/protocol.md): with them Σcᵢvᵢ cannot
# overflow a float for any number of rewards a log can hold.
MAX_REWARD_VALUE = 1e12  # |value| ≤ this
MAX_CONFIDENCE = 1e6  # 0 ≤ confidence ≤ this


def reward_bounds_problem(value: float, confidence: float) -> str | None:
    """Why a reward's (value, confidence) cannot count (None: within bounds).

    Both must be finite numbers, ``|value| ≤ MAX_REWARD_VALUE`` and
    ``0 ≤ confidence ≤ MAX_CONFIDENCE``. One chained comparison each: it is false for
    NaN and the infinities too (this runs for every reward a service reads)."""
    try:
        if not -MAX_REWARD_VALUE <= value <= MAX_REWARD_VALUE:
            return f"reward value {value} is not a finite number between -{MAX_REWARD_VALUE:g} and {MAX_REWARD_VALUE:g}"
        if not 0 <= confidence <= MAX_CONFIDENCE:
            return f"reward confidence {confidence} is not a finite number between 0 and {MAX_CONFIDENCE:g}"
    except TypeError:  # not a number at all (user code: a string, None)
        return f"reward value {value!r} and confidence {confidence!r} must be numbers"
    return None


class _Weighted(Protocol):
    value: float
    confidence: float


def aggregate(rewards: Iterable[_Weighted]) -> float:
    total = weight = 0.0
    for r in rewards:
        if r.confidence > 0:
            total += r.confidence * r.value
            weight += r.confidence
    return total / weight if weight > 0 else 0.0


class _Given(_Weighted, Protocol):
    receiver: str
    sender: str
    tick: int


class Returns:
    """One trial's returns: per actor, the sum over ticks of the aggregated reward (I-4) of
    the rewards given so far — what a controller answers for the trials it started and what
    the orchestrator records in the ``trials`` index when a trial ends. A later reward from
    the same sender for the same receiver and tick replaces the earlier one (a correction; a
    duplicate changes nothing). Rewards are added once checked
    (:func:`trialog.protocol.owners.reward_problem`); the aggregation runs when asked.

    The orchestrator keeps one for every live trial, through the whole trial: a reward may be
    corrected at any tick, so each (receiver, tick, sender) is kept. The usual reward — a
    receiver's first sender, the environment's each tick — takes two doubles a tick in arrays
    (16 bytes; a 24,000-tick real-time trial of two actors, 0.8 MB), the others an entry each."""

    __slots__ = ("actors", "_steady", "_given")

    def __init__(self, actors: Mapping[str, str]):
        self.actors = dict(actors)  # name -> actor class
        # receiver -> (its first sender, value per tick, confidence per tick; NaN: none at that tick)
        self._steady: dict[str, tuple[str, array, array]] = {}
        self._given: dict[tuple[str, int, str], tuple[float, float]] = {}  # the others: latest (value, confidence)

    def add(self, reward: _Given) -> None:
        """A checked reward (its tick at least 0)."""
        receiver, tick, sender = reward.receiver, reward.tick, reward.sender
        steady = self._steady.get(receiver)
        if steady is None:
            steady = self._steady[receiver] = (sender, array("d"), array("d"))
        if steady[0] == sender:
            _, values, confidences = steady
            if tick >= len(values):
                missing = tick + 1 - len(values)
                values.extend(_NONE * missing)
                confidences.extend(_NONE * missing)
            values[tick], confidences[tick] = reward.value, reward.confidence
        else:
            self._given[(receiver, tick, sender)] = (reward.value, reward.confidence)

    def totals(self, last_tick: int | None = None) -> dict[str, float]:
        """Per actor, its return; rewards for ticks after ``last_tick`` (the end's) are not the
        trial's, as the datalog folds it."""
        ticks = max([len(v) for _, v, _ in self._steady.values()] + [t + 1 for _, t, _ in self._given] + [0])
        if last_tick is not None:
            ticks = max(0, min(ticks, last_tick + 1))
        totals = dict.fromkeys(self.actors, 0.0)
        for name, actor_class in self.actors.items():
            weighted, weight = np.zeros(ticks), np.zeros(ticks)  # per tick: Σcᵢvᵢ and Σcᵢ of the rewards reaching it
            for receiver, (sender, values, confidences) in self._steady.items():
                if reaches(receiver, sender, name, actor_class):
                    v = np.frombuffer(values, np.float64)[:ticks]
                    c = np.frombuffer(confidences, np.float64)[:ticks]
                    counts = c > 0  # false where no reward was given (NaN)
                    weighted[: len(v)] += np.where(counts, c * np.nan_to_num(v), 0.0)
                    weight[: len(c)] += np.where(counts, c, 0.0)
            for (receiver, tick, sender), (value, confidence) in self._given.items():
                if tick < ticks and reaches(receiver, sender, name, actor_class):  # c = 0 adds nothing
                    weighted[tick] += confidence * value
                    weight[tick] += confidence
            given = weight > 0
            totals[name] = float(np.sum(weighted[given] / weight[given]))
        return totals


_NONE = array("d", [math.nan])


def senders_matching(patterns: Iterable[str]) -> Callable[[str], bool] | None:
    """Whether a reward's sender is one to learn from: shell-style patterns on the sender
    (``env``, ``env/*`` for an environment's modular sources, ``person:*`` for the judges of
    the watch page, an actor's name). None for no patterns: every source counts."""
    patterns = tuple(patterns)
    if not patterns:
        return None
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise ValueError(f"a reward source to learn from is a sender or a pattern, not {pattern!r}")
    return lambda sender: any(fnmatchcase(sender, pattern) for pattern in patterns)
