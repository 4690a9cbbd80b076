"""The orchestrator: the live interpreter of the spec.

A consumer group over ``control`` and ``events`` (partition p of both together,
I-2). It validates start requests, runs pre-trial hooks, writes
``trial.started`` (or ``trial.rejected`` with the reason), waits for client
actors to join, keeps the ``trials`` index, and ends trials — on the
environment's word, max ticks, terminate requests, inactivity and wall-clock
limits — each with its reason in ``trial.ended``.

It keeps a few numbers per live trial (no spec, no payloads), and rebuilds them
from the log when it takes over a partition (I-7). It is also the one service
that dead-letters undecodable records and events for trials that are not live,
so each bad record is reported once.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.orchestrator.resolve import resolve
from trialog import metrics
from trialog.bus.base import Record
from trialog.errors import TrialError
from trialog.events import (
    HEADER_TICK,
    ActorJoined,
    EnvironmentDone,
    Event,
    ResolvedTrial,
    StartRequest,
    TerminateRequest,
    TrialEnded,
    TrialPending,
    TrialRecord,
    TrialRejected,
    TrialStarted,
    TrialTerminating,
)
from trialog.logs import get_logger
from trialog.runtime.service import Handler
from trialog.spec import Spec
from trialog.topics import CONTROL, EVENTS, TRIALS
from trialog.trust import SeatBook, seat_headers

log = get_logger(__name__)

# Kinds that only count as activity (read from headers, never decoded here).
_ACTIVITY = frozenset({"observation", "action", "actor.timeout", "actor.left", "parameters.changed", "view"})
# Kinds this service answers for when they are refused (one owner per kind); read from headers.
_VERIFIED_UNDECODED = frozenset({"reward", "message"})
_RECENTLY_ENDED = 10_000  # ended trial IDs remembered to ignore stragglers quietly


@dataclass(slots=True)
class _Live:
    partition: int
    spec: str
    start_offset: int
    created_ms: int
    status: str  # pending | running | ending
    max_ticks: int | None
    inactivity_ms: int | None
    wall_clock_ms: int | None
    join_deadline_ms: int | None
    implementations: dict[str, str]
    experiment: str = ""
    phase: str = ""
    last_activity: float = field(default_factory=time.monotonic)
    tick: int = 0
    waiting_for: set[str] = field(default_factory=set)
    clients: set[str] = field(default_factory=set)
    pending: TrialPending | None = None  # kept only while client actors join
    end_sent: bool = False


class OrchestratorHandler(Handler):
    roles = (CONTROL, EVENTS)
    kinds = frozenset(
        {StartRequest.KIND, TerminateRequest.KIND, TrialPending.KIND, TrialStarted.KIND, TrialRejected.KIND,
         EnvironmentDone.KIND, TrialEnded.KIND, ActorJoined.KIND, TrialTerminating.KIND}
    )  # fmt: skip
    dead_letters = True
    owned_kinds = kinds | _VERIFIED_UNDECODED
    batched = True  # not on the tick path: lifecycle answers may wait a fetch batch
    service_name = "orchestrator"

    def __init__(self, specs: Mapping[str, Spec]):
        self.specs = dict(specs)
        self.live_trials: dict[str, _Live] = {}
        self.requested: dict[str, int] = {}  # trial ID -> partition, answered but not yet read back
        self.ended: OrderedDict[str, None] = OrderedDict()
        self.deferred: dict[int, list[tuple[Record, Event]]] = {}
        self.seats = SeatBook()

    # --- dispatch ------------------------------------------------------------------------------
    def handle(self, record: Record, event: Event) -> None:
        if record.role == CONTROL:
            if not self.loop.is_live(EVENTS, record.partition):
                # Answer requests only once the trials of this partition are rebuilt,
                # or a request already answered before a crash would be answered twice.
                self.deferred.setdefault(record.partition, []).append((record, event))
                return
            self._control(record, event)
            return
        trial = self.live_trials.get(event.trial_id)
        match event:
            case TrialPending() | TrialStarted():
                self._on_resolved(record, event)
            case TrialRejected():
                self.requested.pop(event.trial_id, None)
                self._remember_ended(event.trial_id)
                self.loop.emit(TrialRecord(event.trial_id, status="rejected", partition=record.partition, reason=event.reason,
                                           created_ms=record.timestamp_ms, updated_ms=record.timestamp_ms), TRIALS)  # fmt: skip
            case ActorJoined() if trial is not None:
                trial.last_activity = time.monotonic()
                if event.actor not in trial.clients:
                    self.loop.dead_letter(record, f"actor.joined for {event.actor!r}, which is not a client actor of this trial")
                    return
                refusal, _ = self.seats.joined(event.trial_id, event.actor, *seat_headers(record.headers))
                if refusal is not None:
                    self.loop.dead_letter(record, f"refused: {refusal}")
                    return
                trial.waiting_for.discard(event.actor)
                if trial.status == "pending" and not trial.waiting_for and trial.pending is not None:
                    self.loop.emit(trial.pending.as_kind(TrialStarted))
            case EnvironmentDone() if trial is not None:
                self._end(event.trial_id, trial, event.reason, event.tick, event.details)
            case TrialEnded():
                self._on_ended(record, event)
            case TrialTerminating() if trial is not None:
                trial.last_activity = time.monotonic()
            case _ if trial is None:
                self._not_live(record, event.KIND)

    def unsent(self, event: Event, reason: str) -> None:
        if isinstance(event, (TrialStarted, TrialPending)):  # e.g. a config too large to log: reject the trial
            self.loop.emit(TrialRejected(event.trial_id, reason=f"{event.KIND} not sent: {reason}"))

    def glance(self, record: Record, kind: str) -> None:
        if kind in _VERIFIED_UNDECODED and self.loop.is_live(EVENTS, record.partition):
            refused = self.loop.bus.refusal(record)
            if refused is not None:
                self.loop.dead_letter(record, f"refused: {refused}")
                return
        trial = self.live_trials.get(record.trial_id)
        if kind == "reward" and self.loop.is_live(EVENTS, record.partition):
            self._count_reward(record, trial)
        if trial is None:
            if kind in _ACTIVITY:
                self._not_live(record, kind)
            return
        trial.last_activity = time.monotonic()
        if kind == "observation":
            try:
                tick = int(record.header(HEADER_TICK) or 0)
            except ValueError:
                return
            # Only a genuine observation moves the trial's tick (a forged one must not end it).
            if tick <= trial.tick or self.loop.bus.refusal(record) is not None:
                return
            trial.tick = tick
            # A backstop only: the environment runtime ends trials at max_ticks itself.
            if trial.max_ticks is not None and trial.tick > trial.max_ticks:
                self._end(record.trial_id, trial, "max_ticks", trial.tick, "the environment went past max_ticks")

    def _count_reward(self, record: Record, trial: _Live | None) -> None:
        if trial is None and record.trial_id not in self.ended:
            return  # not a trial's reward: dead-lettered or ignored, not counted
        try:
            tick = int(record.header(HEADER_TICK) or 0)
        except ValueError:
            return
        metrics.REWARDS.labels("live" if trial is not None and tick >= trial.tick else "retroactive").inc()

    def _not_live(self, record: Record, kind: str) -> None:
        if not self.loop.is_live(EVENTS, record.partition) or record.trial_id in self.ended or record.trial_id in self.requested:
            return  # catching up (older trials), or stragglers of a trial that just ended
        self.loop.dead_letter(record, f"{kind} for trial {record.trial_id!r}, which is not live (unknown or ended)")

    # --- control -----------------------------------------------------------------------------
    def _control(self, record: Record, event: Event) -> None:
        match event:
            case StartRequest():
                self._start(record, event)
            case TerminateRequest():
                trial = self.live_trials.get(event.trial_id)
                if trial is None:
                    log.info("terminate request for a trial that is not live", trial=event.trial_id)
                elif event.hard or trial.status == "pending":
                    self._end(event.trial_id, trial, "terminated", trial.tick, event.reason or "hard terminate")
                elif trial.status == "running":
                    trial.status = "ending"
                    self.loop.emit(TrialTerminating(event.trial_id, reason=event.reason, requested_by=event.requested_by))
            case _:
                self.loop.dead_letter(record, f"{event.KIND} does not belong on the control topic")

    def _start(self, record: Record, request: StartRequest) -> None:
        tid = request.trial_id
        if tid in self.live_trials or tid in self.requested or tid in self.ended:
            log.info("duplicate start request ignored", trial=tid)
            return
        self.requested[tid] = record.partition
        spec = self.specs.get(request.spec)
        try:
            if spec is None:
                raise TrialError(f"unknown spec {request.spec!r}; this orchestrator serves {', '.join(self.specs) or 'none'}")
            started = resolve(spec, request)
        except TrialError as exc:
            log.info("start request rejected", trial=tid, reason=str(exc))
            self.loop.emit(TrialRejected(tid, reason=str(exc), requested_by=request.requested_by))
            return
        if any(a.client for a in started.actors):
            self.loop.emit(started.as_kind(TrialPending))
        else:
            self.loop.emit(started)

    # --- lifecycle -------------------------------------------------------------------------------
    def _on_resolved(self, record: Record, event: ResolvedTrial) -> None:
        tid = event.trial_id
        self.requested.pop(tid, None)
        trial = self.live_trials.get(tid)
        if trial is None:
            if tid in self.ended:
                return
            trial = _Live(
                partition=record.partition,
                spec=event.spec,
                start_offset=record.offset,
                created_ms=record.timestamp_ms,
                status="pending",
                max_ticks=event.max_ticks,
                inactivity_ms=event.inactivity_timeout_ms,
                wall_clock_ms=event.wall_clock_limit_ms,
                join_deadline_ms=None,
                implementations={a.name: a.implementation for a in event.actors},
                experiment=event.experiment,
                phase=event.phase,
            )
            self.live_trials[tid] = trial
        trial.last_activity = time.monotonic()
        trial.clients = {a.name for a in event.actors if a.client}
        if isinstance(event, TrialPending):
            trial.pending = event
            trial.waiting_for = set(trial.clients)
            trial.join_deadline_ms = record.timestamp_ms + event.join_timeout_ms
        else:
            if trial.status == "running":
                return
            trial.status, trial.pending, trial.join_deadline_ms = "running", None, None
            trial.created_ms = record.timestamp_ms  # the wall clock runs from the start proper
            if self.loop.is_live(EVENTS, record.partition):
                log.info("trial started", trial=tid, spec=trial.spec, implementations=trial.implementations)
        self._index(tid, trial, int(time.time() * 1000))

    def _end(self, tid: str, trial: _Live, reason: str, tick: int, details: str = "") -> None:
        if trial.end_sent:
            return
        trial.end_sent = True
        self.loop.emit(TrialEnded(tid, tick=tick, reason=reason, details=details))

    def _on_ended(self, record: Record, event: TrialEnded) -> None:
        trial = self.live_trials.pop(event.trial_id, None)
        self.seats.forget(event.trial_id)
        self._remember_ended(event.trial_id)
        if trial is None:
            return
        if self.loop.is_live(EVENTS, record.partition):
            metrics.TRIALS_ENDED.labels(event.reason).inc()
            log.info("trial ended", trial=event.trial_id, spec=trial.spec, reason=event.reason, tick=event.tick, details=event.details)
        self._index(event.trial_id, trial, record.timestamp_ms, status="ended", end_offset=record.offset, ticks=event.tick, reason=event.reason)

    def _index(self, tid: str, trial: _Live, updated_ms: int, **changes) -> None:
        """Upsert the trial's record in the ``trials`` index (``changes`` override the live state)."""
        fields = {
            "status": trial.status, "spec": trial.spec, "partition": trial.partition, "start_offset": trial.start_offset,
            "ticks": trial.tick, "implementations": trial.implementations, "created_ms": trial.created_ms, "updated_ms": updated_ms,
            "experiment": trial.experiment, "phase": trial.phase,
        }  # fmt: skip
        self.loop.emit(TrialRecord(tid, **{**fields, **changes}), TRIALS)

    def _remember_ended(self, tid: str) -> None:
        self.ended[tid] = None
        while len(self.ended) > _RECENTLY_ENDED:
            self.ended.popitem(last=False)

    # --- timers and partitions ---------------------------------------------------------------------
    def periodic(self, now: float) -> None:
        now_ms = int(now * 1000)
        mono = time.monotonic()
        for tid, trial in list(self.live_trials.items()):
            if trial.end_sent or not self.loop.is_live(EVENTS, trial.partition):
                continue
            if trial.status == "pending":
                if trial.join_deadline_ms is not None and now_ms > trial.join_deadline_ms:
                    self._end(tid, trial, "join_timeout", 0, f"still waiting for {', '.join(sorted(trial.waiting_for))}")
                continue
            if trial.wall_clock_ms is not None and now_ms - trial.created_ms > trial.wall_clock_ms:
                self._end(tid, trial, "wall_clock", trial.tick, f"ran longer than {trial.wall_clock_ms} ms")
            elif trial.inactivity_ms is not None and (mono - trial.last_activity) * 1000 > trial.inactivity_ms:
                self._end(tid, trial, "inactivity", trial.tick, f"no event for {trial.inactivity_ms} ms")

    def live(self, role: str, partition: int) -> None:
        if role == EVENTS:
            now = time.monotonic()
            for trial in self.live_trials.values():
                if trial.partition == partition:
                    trial.last_activity = now  # inactivity is measured from when we took over
            for record, event in self.deferred.pop(partition, []):
                self._control(record, event)

    def revoked(self, role: str, partition: int) -> None:
        if role == EVENTS:
            for tid in [t for t, trial in self.live_trials.items() if trial.partition == partition]:
                del self.live_trials[tid]
        self.deferred.pop(partition, None)

    def live_trial_count(self) -> int:
        return len(self.live_trials)

    def safe_offset(self, role: str, partition: int) -> int | None:
        if role == CONTROL:
            # Answered requests are acknowledged before any commit; deferred ones are not answered yet.
            waiting = [r.offset for r, _ in self.deferred.get(partition, [])]
            return min(waiting) if waiting else None
        starts = [t.start_offset for t in self.live_trials.values() if t.partition == partition]
        return min(starts) if starts else None
