"""The logger: archives every trial of ``events`` as Parquet, late rewards included.

A consumer group (``logger``) over ``events``. Per live trial it folds the
events into samples (:class:`trialog.datalog.samples.TrialFold`); once the
trial has ended and a grace period for late rewards has passed, it writes the
trial to the archive (:mod:`trialog.datalog.archive`) as of its current log
position (the *cut*). Rewards for an archived trial that are logged at or after
the cut are written as correction files — never lost, never counted twice.

Restart safety (I-7): the committed offset of a partition is the start of its
oldest trial not yet archived, or of its oldest late reward not yet written.
A new instance replays from there; trials already in the catalog are not
rewritten, and rewards already in a correction file (by offset) are skipped. So
a kill at any point leaves no sample missing and none duplicated.

Bad input is reported, never fatal: an undecodable record of a trial becomes a
problem in that trial's catalog entry; a trial with no ``trial.ended`` is
archived as ``unended`` after ``idle_s`` without any event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trialog.bus.base import Record
from trialog.datalog.archive import Archive
from trialog.datalog.replay import recall_start
from trialog.datalog.samples import TrialFold
from trialog.errors import TrialogError
from trialog.protocol.events import (
    HEADER_REWARD,
    HEADER_SENDER,
    Event,
    Observation,
    Reward,
    TrialEnded,
    TrialPending,
    TrialStarted,
    as_logged,
)
from trialog.protocol.topics import EVENTS
from trialog.runtime.handler import Handler, safe_point
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

_FIRST = frozenset({TrialPending.KIND, TrialStarted.KIND})


@dataclass
class _Trial:
    fold: TrialFold
    partition: int
    start_offset: int
    started_ms: int
    last_event_ms: int
    ended_ms: int | None = None


@dataclass
class _Late:
    partition: int
    rewards: list[tuple[int, Reward]] = field(default_factory=list)


class LoggerHandler(Handler):
    service_name = "logger"
    batched = True  # archiving waits for trial ends anyway
    folds_carried_rewards = True

    def __init__(self, archive: Archive, *, grace_s: float = 5.0, idle_s: float = 3600.0):
        self.archive = archive
        self.grace_s = grace_s
        self.idle_s = idle_s
        self.trials: dict[str, _Trial] = {}
        self.late: dict[str, _Late] = {}  # archived trial → rewards logged after its cut, not yet written
        self.stats = {"archived": 0, "corrections": 0}

    # --- records -------------------------------------------------------------------------
    def should_decode(self, record: Record, kind: str | None) -> bool:
        entry = self.archive.entry(record.trial_id)
        if entry is not None:  # archived: only rewards logged after its cut still matter, carried ones too
            carries = kind == Observation.KIND and record.header(HEADER_REWARD) is not None
            return (kind == Reward.KIND or carries) and record.offset >= entry["cut_offset"]
        # A trial that started before our resume point was archived; other records are not trials.
        return record.trial_id in self.trials or kind in _FIRST

    def recall(self, record: Record, kind: str | None):
        """A late reward from an actor of an archived trial whose actors this process has not
        read (it was archived before this process took the partition): learn them from the
        trial's ``trial.started`` first, or the reward's tag could not be checked and the
        archive would miss a reward that replay counts (I-7)."""
        if kind != Reward.KIND:
            return None
        entry = self.archive.entry(record.trial_id)
        if entry is None or record.offset < entry["cut_offset"]:
            return None
        sender = record.header(HEADER_SENDER)
        if (
            all(a["name"] != sender for a in entry["actors"])
            or self.loop.bus.trust.actor_key(record.trial_id, sender) is not None
        ):
            return None
        return recall_start(
            self.loop.bus, record.trial_id, entry["partition"], entry["start_offset"], entry["cut_offset"]
        )

    def handle(self, record: Record, event: Event) -> None:
        tid = record.trial_id
        if self.archive.entry(tid) is not None:
            for reward in as_logged(event):  # a reward record, or the one an observation carries
                if isinstance(reward, Reward):
                    self.late.setdefault(tid, _Late(record.partition)).rewards.append((record.offset, reward))
            return
        trial = self.trials.get(tid)
        if trial is None:
            trial = self.trials[tid] = _Trial(
                TrialFold(tid, self.archive.store),
                record.partition,
                record.offset,
                record.timestamp_ms,
                record.timestamp_ms,
            )
        trial.last_event_ms = max(trial.last_event_ms, record.timestamp_ms)
        trial.fold.add(event, record.headers)
        if isinstance(event, TrialEnded) and trial.ended_ms is None:
            trial.ended_ms = record.timestamp_ms

    def undecodable(self, record: Record, reason: str) -> None:
        # Noted in its trial's problems; the orchestrator is the one that dead-letters it.
        trial = self.trials.get(record.trial_id)
        if trial is not None:
            trial.last_event_ms = max(trial.last_event_ms, record.timestamp_ms)
            trial.fold.bad_record(record.offset, reason)
        log.warning(
            "undecodable record", trial=record.trial_id, partition=record.partition, offset=record.offset, error=reason
        )

    # --- archiving ---------------------------------------------------------------------------
    def periodic(self, now: float) -> None:
        now_ms = int(now * 1000)
        for tid, trial in list(self.trials.items()):
            if not self.loop.is_live(EVENTS, trial.partition):
                continue  # the grace period runs on the live log: catch-up may still hold late rewards
            due = trial.ended_ms is not None and now_ms - trial.ended_ms >= self.grace_s * 1000
            idle = trial.ended_ms is None and now_ms - trial.last_event_ms >= self.idle_s * 1000
            if due or idle:
                self._archive(tid, trial)
        for tid, late in list(self.late.items()):
            try:
                if self.archive.write_correction(tid, late.rewards):
                    self.stats["corrections"] += 1
                    log.info("late rewards added to the archive", trial=tid, rewards=len(late.rewards))
            except OSError as exc:
                log.error("cannot write a correction; will retry", trial=tid, error=str(exc))
                continue
            del self.late[tid]

    def _archive(self, tid: str, trial: _Trial) -> None:
        if trial.fold.started is None:  # pending, then ended (e.g. join timeout): no tick was played
            log.info("trial ended before it started; nothing to archive", trial=tid)
            del self.trials[tid]
            return
        try:
            entry = self.archive.write_trial(
                trial.fold,
                partition=trial.partition,
                start_offset=trial.start_offset,
                cut_offset=self.loop.position(EVENTS, trial.partition),
                started_ms=trial.started_ms,
                ended_ms=trial.ended_ms or trial.last_event_ms,
            )
        except (OSError, TrialogError) as exc:
            log.error("cannot archive a trial; will retry", trial=tid, error=str(exc))
            return
        del self.trials[tid]
        self.stats["archived"] += 1
        log.info(
            "trial archived",
            trial=tid,
            samples=entry["samples"],
            status=entry["status"],
            problems=len(entry["problems"]),
        )

    # --- partitions ----------------------------------------------------------------------------
    def assigned(self, role: str, partition: int) -> None:
        # The partition's previous owner may have archived trials since we read the catalog.
        self.archive.refresh()

    def revoked(self, role: str, partition: int) -> None:
        for tid in [t for t, trial in self.trials.items() if trial.partition == partition]:
            del self.trials[tid]
        for tid in [t for t, late in self.late.items() if late.partition == partition]:
            del self.late[tid]

    def safe_offset(self, role: str, partition: int) -> int | None:
        # Also the oldest late reward not yet written to a correction file.
        late = (late.rewards[0][0] for late in self.late.values() if late.partition == partition)
        return safe_point(partition, self.trials.values(), late)
