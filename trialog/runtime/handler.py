"""What a service implements: a :class:`Handler` holding the state of the trials on the
partitions it owns, run by :class:`trialog.runtime.service.ServiceLoop` (which does the I/O);
and :func:`safe_point`, the offset a handler holding trials resumes from (I-7)."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Protocol

from trialog.bus.base import BATCH_WAIT_MS, Record
from trialog.protocol.events import Event
from trialog.protocol.owners import owner_of
from trialog.protocol.topics import EVENTS

if TYPE_CHECKING:
    from trialog.runtime.service import ServiceLoop


class Opened(Protocol):
    """A trial a handler holds, as far as its safe point goes: its partition and the offset
    of its first record there (the first a rebuild must read again)."""

    partition: int
    start_offset: int


def safe_point(partition: int, trials: Iterable[Opened], *also: Iterable[int]) -> int | None:
    """The safe point of a partition (I-7): the lowest start offset of the trials still open
    on it, and of any other offsets (``also``) the handler still needs there; None when there
    is none (the loop then commits its position). What :meth:`Handler.safe_offset` returns
    for the events of every service that holds trials; each says what else it needs."""
    starts = [t.start_offset for t in trials if t.partition == partition]
    for offsets in also:
        starts.extend(offsets)
    return min(starts, default=None)


class Handler:
    """What a service implements. All methods are plain (not async): they change
    local state and call :meth:`ServiceLoop.emit`; only the loop does I/O.

    For each record the loop reads, in log order: :meth:`must_judge` says whether this
    service is the record's owner; a record it owns is always decoded and checked. Of the
    others, a kind not in ``kinds`` goes to :meth:`saw_undecoded` (headers only), and the
    rest are decoded only if :meth:`should_decode` says so. What decodes and passes the
    checks goes to :meth:`handle`. Per partition: :meth:`assigned`, then :meth:`caught_up`
    once the catch-up from the log is over, :meth:`revoked` when it goes elsewhere."""

    topics: tuple[str, ...] = (EVENTS,)  # the topics this handler consumes, by role name (trialog.protocol.topics)
    kinds: frozenset[str] | None = None  # kinds worth decoding (besides the ones it owns); None = all
    # The reward an observation carries (Observation.carried_reward) reaches handle() as a Reward
    # of its own, just before the observation, if the handler decodes rewards — unless it folds
    # observations into a TrialFold, which reads the reward there.
    folds_carried_rewards: bool = False
    # The owner role of trialog.protocol.owners this service plays ("" = owns nothing):
    # with runs_here, what the default must_judge decides by.
    owner_role: str = ""
    batched: bool = False  # off the tick path: fetch in batches (see Bus.consumer)
    batch_wait_ms: int = BATCH_WAIT_MS  # how long a batched fetch may wait (LIFECYCLE_WAIT_MS: a trial waits on it)
    service_name: str = "service"

    loop: ServiceLoop

    def handle(self, record: Record, event: Event) -> None: ...

    def should_decode(self, record: Record, kind: str | None) -> bool:
        """Should the loop decode this record, which this service does not own and whose kind
        is one of ``kinds``? Decided from key and headers alone (most records concern other
        trials or other actors); default yes. A record it says no to is skipped unread."""
        return True

    def undecodable(self, record: Record, reason: str) -> None:
        """A record this handler wanted did not decode (the loop reports it; see dead_letters)."""

    def saw_undecoded(self, record: Record, kind: str) -> None:
        """The loop read a record of a kind this handler does not decode (not in ``kinds``, and
        not its to judge): what its key and headers say is all the handler gets (cheap)."""

    def recall(self, record: Record, kind: str | None) -> Awaitable[None] | None:
        """Before a record is judged: if this handler must first learn something of the
        record's trial from the log — e.g. a late reward for a trial that ended before this
        process took the partition (I-7) — an awaitable that learns it; the loop awaits it,
        in log order, then handles the record. None (the default, and the common case):
        nothing to learn. Only called for handlers that define it, and not for records a
        previous owner judged already. Runs for every record: keep the None path cheap."""
        return None

    def polled(self) -> None:
        """The loop handled the records of one poll and is about to give the event loop a turn:
        work batched over them (the actors' decisions) is best done now, so that what it writes
        leaves before the loop waits again."""

    def assigned(self, role: str, partition: int) -> None:
        """A partition is ours; its catch-up begins."""

    def revoked(self, role: str, partition: int) -> None:
        """A partition is no longer ours: forget its trials."""

    def runs_here(self, record: Record) -> bool:
        """Is this record's trial (and receiver, for observations) running here?"""
        return False

    def must_judge(self, record: Record, kind: str | None) -> bool:
        """Must this service judge this record — decode and check it whatever ``kinds`` and
        :meth:`should_decode` say, and dead-letter it if it is bad? True in the one service
        that owns it (trialog.protocol.owners): by default, when its kind's owner is
        ``owner_role`` and its trial :meth:`runs_here`."""
        return bool(self.owner_role) and owner_of(kind) == self.owner_role and self.runs_here(record)

    def caught_up(self, role: str, partition: int) -> None:
        """The catch-up of a partition is over (the loop read the log up to the end offset it
        found at assignment; what it emits is sent from now on): arm timers for its trials."""

    def safe_offset(self, role: str, partition: int) -> int | None:
        """The offset to resume from for this partition (None: the current position);
        a handler holding trials answers with :func:`safe_point`."""
        return None

    def periodic(self, now: float) -> None:
        """Called about every ``tick_interval`` seconds, for timers and sweeps."""

    def live_trial_count(self) -> int:
        """Trials this handler holds state for (a metric); handlers keep them in ``trials``."""
        return len(getattr(self, "trials", ()))

    async def close(self) -> None:
        """The loop is stopping (after its last commit): release what the handler started."""

    def unsent(self, event: Event, reason: str) -> None:
        """An event this handler emitted was too large for its topic and was not sent
        (the loop dead-letters a note of it): end or reject its trial, if this handler can."""
