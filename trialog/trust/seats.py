"""Client seats: an actor of a trial played from outside the actor services, and who holds it.

A client seat has one *holder* (an id the client picks and keeps, e.g. in a browser's
localStorage), sent in the ``holder`` header of every record of the seat. The first
``actor.joined`` of a seat names its holder; a later join by another holder is refused
unless it has the header ``takeover: 1`` (then the new holder has the seat and the first
one, reading the log, is told); a join by the same holder resumes. :class:`SeatBook`
applies these rules to the log, so every service agrees. A seat writes with its seat key
(:mod:`trialog.trust.keys`), which its join token carries (:mod:`trialog.trust.join_tokens`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from trialog.trust.tags import HEADER_HOLDER, HEADER_TAKEOVER


@dataclass(frozen=True, slots=True)
class Seat:
    """An actor of a trial played from outside the actor services."""

    trial_id: str
    actor: str
    holder: str
    takeover: bool = False


class SeatBook:
    """Who holds each seat, from the ``actor.joined`` records of the log (read in log order)."""

    KEPT = 100_000  # seats remembered (a service may see the joins of trials it does not host)

    def __init__(self) -> None:
        self._holders: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._first_offset: dict[str, int] = {}  # trial -> offset of its first join (to rebuild from)

    def joined(
        self, trial_id: str, actor: str, holder: str, takeover: bool, offset: int | None = None
    ) -> tuple[str | None, str | None]:
        """Apply a (verified) join: returns (refusal reason or None, the holder it displaced or None)."""
        if offset is not None:
            self._first_offset.setdefault(trial_id, offset)
        current = self._holders.get((trial_id, actor))
        if current is None or current == holder or takeover:
            self._holders[(trial_id, actor)] = holder
            while len(self._holders) > self.KEPT:
                (gone, _), _ = self._holders.popitem(last=False)
                self._first_offset.pop(gone, None)
            return None, None if current == holder else current
        return f"seat {actor} of trial {trial_id} is held by another holder; join with takeover to take it over", None

    def refuses(self, trial_id: str, actor: str, holder: str) -> str | None:
        """Why a seat record from ``holder`` does not count (None: it counts)."""
        current = self._holders.get((trial_id, actor))
        if current is None:
            return f"{actor} of trial {trial_id} has not joined"
        if current != holder:
            return (
                f"{actor} of trial {trial_id} is held by another holder "
                "(the seat was taken over, or never given to this one)"
            )
        return None

    def first_offset(self, trial_id: str) -> int | None:
        """Where the seats of a trial were first joined: a service rebuilding the trial starts there."""
        return self._first_offset.get(trial_id)

    def forget(self, trial_id: str) -> None:
        self._first_offset.pop(trial_id, None)
        for k in [k for k in self._holders if k[0] == trial_id]:
            del self._holders[k]


def seat_headers(headers: Sequence[tuple[str, bytes]]) -> tuple[str, bool]:
    """(holder, takeover) of a seat record."""
    h = dict(headers)
    return (h.get(HEADER_HOLDER) or b"").decode(errors="replace"), h.get(HEADER_TAKEOVER) == b"1"
