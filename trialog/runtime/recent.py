"""What a service remembers of the trials that ended: a bounded memory, oldest forgotten first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

RECENTLY_ENDED = 10_000  # ended trials a service remembers by default (see RecentlyEnded)


class RecentlyEnded(Generic[V]):
    """The trials that ended lately, each with what its service keeps of it (None when
    knowing that it ended is enough); beyond ``bound`` the one that ended first is forgotten.

    Why: records of a trial still come after its end — a repeated ``trial.started`` or
    ``trial.ended`` (at-least-once delivery: it must change nothing, I-8), a late reward,
    an action sent as the trial ended — and a service must tell "ended here" from "never
    seen". Bounded, so that a service running for months does not grow with every trial it
    ever held; what it has forgotten, or what ended before it took the partition, it learns
    again from the log where it must (:meth:`trialog.runtime.handler.Handler.recall`).
    """

    __slots__ = ("bound", "_ended")

    def __init__(self, bound: int = RECENTLY_ENDED) -> None:
        self.bound = bound
        # In the order they ended. An OrderedDict forgets its oldest in O(1); a plain dict's
        # oldest key is found by walking past every slot deleted before it.
        self._ended: OrderedDict[str, V | None] = OrderedDict()

    def add(self, trial_id: str, kept: V | None = None) -> None:
        """The trial has ended (again: its place in the order does not change, what is kept does)."""
        self._ended[trial_id] = kept
        while len(self._ended) > self.bound:
            self._ended.popitem(last=False)

    def forget(self, trial_id: str) -> None:
        self._ended.pop(trial_id, None)

    def get(self, trial_id: str) -> V | None:
        return self._ended.get(trial_id)

    def __getitem__(self, trial_id: str) -> V | None:
        return self._ended[trial_id]

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._ended

    def __len__(self) -> int:
        return len(self._ended)
