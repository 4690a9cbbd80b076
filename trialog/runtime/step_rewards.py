"""The rewards of an environment's step as the log takes them: which ride in the next
observations (:meth:`~trialog.protocol.events.Observation.carried_reward`) and which are
records of their own, and those records.

Each record costs every reader of the log — its fetch, its tag, its decoding, in every
service — so the environment's own reward to an actor rides in that actor's next
observation when nothing else needs saying: a CartPole step through the log is two
records rather than three (docs/protocol.md#a-reward-an-observation-carries)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from trialog.environment import RewardOut
from trialog.protocol.events import ENVIRONMENT_SENDER, Reward
from trialog.protocol.trial import dumps


def rewards_of(rewards: Mapping[str, float] | Any) -> list[RewardOut]:
    """An update's rewards — a mapping of actor name to value, or :class:`RewardOut` items — as items."""
    if isinstance(rewards, Mapping):
        return [RewardOut(name, value) for name, value in rewards.items()]
    return list(rewards)


def split_carried(rewards: list[RewardOut], observed: Collection[str]) -> tuple[dict[str, RewardOut], list[RewardOut]]:
    """(actor -> the reward its next observation carries, the rest in order): carried are the rewards
    from the environment itself (no source) to an actor by name among ``observed`` (those observed
    at the next tick), confidence 1, no user data — one per actor."""
    # From the environment itself, a reward's identity is its receiver's: a later one corrects an
    # earlier one, so an actor given several at a tick keeps them in their order, as records.
    given = Counter(r.receiver for r in rewards if r.source is None)
    riding = {
        r.receiver: r
        for r in rewards
        if r.source is None
        and given[r.receiver] == 1
        and r.receiver in observed
        and r.confidence == 1.0
        and r.user_data is None
    }
    return riding, [r for r in rewards if riding.get(r.receiver) is not r]


def reward_record(trial_id: str, tick: int, r: RewardOut) -> Reward:
    """The reward record of one of a step's rewards (sender ``env``, or ``env/<source>``)."""
    return Reward(
        trial_id,
        tick=tick,
        receiver=r.receiver,
        value=float(r.value),
        confidence=float(r.confidence),
        sender=f"{ENVIRONMENT_SENDER}/{r.source}" if r.source else ENVIRONMENT_SENDER,
        user_data=dumps(r.user_data) if r.user_data is not None else None,
    )
