"""Reward aggregation (I-4): the seeds' confidence-weighted mean.

For one (actor, tick), the aggregated reward of all rewards from all sources is
Σcᵢvᵢ / Σcᵢ over the rewards with cᵢ > 0, and 0 when there are none. Raw rewards
stay in the log; aggregation happens when reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


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
