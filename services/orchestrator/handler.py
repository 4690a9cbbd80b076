"""The orchestrator: the live interpreter of the spec.

A consumer group over ``control`` and ``events`` (partition p of both together,
I-2). It validates start requests, runs pre-trial hooks, writes
``trial.started`` (or ``trial.rejected`` with the reason), waits for client
actors to join, keeps the ``trials`` index, and ends trials — on the
environment's word, max ticks, terminate requests, an actor that cannot play
(:mod:`trialog.protocol.cannot_play`), inactivity and wall-clock limits — each with its
reason in ``trial.ended``.

It keeps a few numbers per live trial (no spec, no payloads), and rebuilds them
from the log when it takes over a partition (I-7); a trial that ended before that is
recalled from the log when a late reward for it comes (:meth:`OrchestratorHandler.recall`),
so that the reward is judged as it was before. It owns the dead letters of
``control``, of lifecycle kinds, rewards and messages, of unknown kinds and of
every record of a trial that is not running (:mod:`trialog.protocol.owners`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from trialog.bus.base import LIFECYCLE_WAIT_MS, Record
from trialog.datalog.replay import recall_end, recall_start
from trialog.errors import BadRecord, CodecError, TopicMissingError, TrialError
from trialog.protocol.cannot_play import cannot_play_reason
from trialog.protocol.events import (
    BY_KIND,
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    ActorJoined,
    EnvironmentDone,
    Event,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    StartRequest,
    TerminateRequest,
    TrialEnded,
    TrialPending,
    TrialRecord,
    TrialRejected,
    TrialStarted,
    TrialTerminating,
)
from trialog.protocol.owners import message_problem, owner_of, reward_problem
from trialog.protocol.rewards import Returns
from trialog.protocol.roles import ORCHESTRATOR
from trialog.protocol.topics import CONTROL, EVENTS, TRIALS
from trialog.protocol.trial import class_schemas
from trialog.runtime.handler import Handler, safe_point
from trialog.runtime.recent import RecentlyEnded
from trialog.services.orchestrator.resolve import resolve
from trialog.spec import Spec
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger
from trialog.trust.seats import SeatBook, seat_headers

log = get_logger(__name__)

_ENDED_OFFSETS_KEPT = 1_000_000  # ended trials whose offsets are remembered (to recall one from the log: two ints each)
ENVIRONMENT_TIMEOUT_S = 30.0  # a running trial with no observation by then has no environment service


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
    actors: dict[str, str]  # name -> actor class
    served: frozenset[str]  # actors an actor service plays (not client seats)
    returns: Returns  # the rewards accepted, for the index at the trial's end
    experiment: str = ""
    phase: str = ""
    environment_deadline: float | None = None  # monotonic; cleared by the first observation
    last_activity: float = 0.0  # ServiceLoop.log.time(): the log's outages are not inactivity
    away_before: float = 0.0  # seconds the log had been away before the trial began (see periodic)
    tick: int = 0
    waiting_for: set[str] = field(default_factory=set)
    pending: TrialPending | None = None  # kept only while client actors join
    end_sent: bool = False
    # The latest observation or action glanced at and not verified, with when it was read:
    # activity, its tag checked only should the trial look inactive (see saw_undecoded).
    unverified: tuple[Record, float] | None = None


class OrchestratorHandler(Handler):
    topics = (CONTROL, EVENTS)
    owner_role = ORCHESTRATOR
    batched = True  # not on the tick path: lifecycle answers may wait a fetch batch, a short one
    batch_wait_ms = LIFECYCLE_WAIT_MS
    service_name = "orchestrator"
    # Observations and actions of running trials are the environment's and the actor
    # services' to judge (trialog.protocol.owners): of those the orchestrator needs only their
    # tick and that they happened, read from the headers once a tag proves who wrote them
    # (a tag covers headers and body; the owner decodes the body and checks they agree).
    # Only the record that moves a trial to a later tick (or its first) is checked at once;
    # the others count as activity should the trial otherwise be ended for inactivity, and
    # are checked then (the latest one): four checks per tick become one.
    kinds = frozenset(BY_KIND) - {Observation.KIND, Action.KIND}

    def __init__(self, specs: Mapping[str, Spec], *, environment_timeout_s: float = ENVIRONMENT_TIMEOUT_S):
        self.specs = dict(specs)
        self.environment_timeout_s = environment_timeout_s
        self.live_trials: dict[str, _Live] = {}
        self.requested: dict[str, int] = {}  # trial ID -> partition, answered but not yet read back
        # trial ID -> (its last tick (-1: never started), its actors: name -> class): late rewards, duplicates,
        # stragglers are judged by them
        self.ended: RecentlyEnded[tuple[int, Mapping[str, str]]] = RecentlyEnded()
        self.deferred: dict[int, list[tuple[Record, Event]]] = {}
        self.seats = SeatBook()
        # Ended trials of our partitions -> (offset of their first resolved record, of their trial.ended):
        # where to recall one from the log when a late reward comes for a trial not in `ended`
        # (it ended before this process took its partition, or long ago). From the `trials`
        # index, read again after each assignment when first needed, and from the ends we read.
        self.ended_at: RecentlyEnded[tuple[int, int]] = RecentlyEnded(_ENDED_OFFSETS_KEPT)
        self.index_read = False
        # The rewards counter's two children (live: for the current tick), looked up once: a labelled
        # child costs a lookup under a lock, and nearly every observation carries a reward.
        self._rewards_counted = {True: metrics.REWARDS.labels("live"), False: metrics.REWARDS.labels("retroactive")}

    def must_judge(self, record: Record, kind: str | None) -> bool:
        if record.role == CONTROL or owner_of(kind) == ORCHESTRATOR:
            return True
        trial = self.live_trials.get(record.trial_id)
        if trial is None or trial.status == "pending":
            return True  # not running: nobody else hosts it
        return kind == Observation.KIND and record.header(HEADER_RECEIVER) not in trial.served

    def recall(self, record: Record, kind: str | None):
        """A late reward for a trial we do not hold: recall the trial from the log first (I-7),
        so that it is judged as it was before this process took the partition."""
        if kind != Reward.KIND or record.role != EVENTS:
            return None
        tid = record.trial_id
        if tid in self.live_trials or tid in self.requested:
            return None
        ended = self.ended.get(tid)
        if ended is not None:
            sender = record.header(HEADER_SENDER)
            if sender not in ended[1] or self.loop.bus.trust.actor_key(tid, sender) is not None:
                return None  # known, and so are the keys of its actors
        elif self.index_read and tid not in self.ended_at:
            return None  # not a trial that ended in our partitions (an unknown trial ID)
        return self._recall(record.partition, tid)

    async def _recall(self, partition: int, tid: str) -> None:
        bus = self.loop.bus
        if not self.index_read:
            await self._read_index()
        where = self.ended_at.get(tid)
        if where is None:
            return
        start, end = where
        started = await recall_start(bus, tid, partition, start, end + 1)
        ended = await recall_end(bus, tid, partition, end)
        if ended is None:
            log.warning(
                "the trials index names an end the log does not hold", trial=tid, partition=partition, offset=end
            )
            return
        actors = {a.name: a.actor_class for a in started.actors} if started is not None else {}
        self.ended.add(tid, (ended.tick if started is not None else -1, actors))
        log.info("ended trial recalled from the log for a late reward", trial=tid, tick=ended.tick)

    async def _read_index(self) -> None:
        """Where the ended trials of our partitions lie in ``events``, from the ``trials`` index."""
        ours = {p for role, p in self.loop.parts if role == EVENTS}
        codec = self.loop.bus.codec
        try:
            async for r in self.loop.bus.read_to_end(TRIALS):
                try:
                    entry = codec.decode(r.value, TrialRecord.KIND) if r.value else None
                except CodecError:
                    continue
                if entry is None:
                    self.ended_at.forget(r.trial_id)
                elif (
                    entry.status == "ended"
                    and entry.partition in ours
                    and entry.start_offset is not None
                    and entry.end_offset is not None
                ):
                    self.ended_at.add(r.trial_id, (entry.start_offset, entry.end_offset))
        except TopicMissingError:
            pass
        self.index_read = True

    def saw_undecoded(self, record: Record, kind: str) -> None:
        trial = self.live_trials.get(record.trial_id)
        if trial is None:
            return
        if kind == Observation.KIND:
            try:
                tick = int(record.header(HEADER_TICK) or "")
            except ValueError:
                return  # not what an environment writes; its owner finds the body disagrees
            if tick > trial.tick or trial.environment_deadline is not None:  # a later tick, or the first
                if self.loop.bus.refusal(record) is None:  # forged or altered: its owner reports it
                    self._activity(record.trial_id, trial, tick)
                return
        trial.unverified = (record, self.loop.log.time())

    def _inactive(self, trial: _Live, mono: float) -> bool:
        """Past its inactivity limit, counting the latest glanced record if its tag holds."""
        if (mono - trial.last_activity) * 1000 <= trial.inactivity_ms:
            return False
        if trial.unverified is not None:
            record, seen = trial.unverified
            trial.unverified = None
            if self.loop.bus.refusal(record) is None:
                trial.last_activity = max(trial.last_activity, seen)
        return (mono - trial.last_activity) * 1000 > trial.inactivity_ms

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
        tid = event.trial_id
        trial = self.live_trials.get(tid)
        match event:
            case TrialPending() | TrialStarted():
                self._on_resolved(record, event)
            case TrialRejected():
                self.requested.pop(tid, None)
                self.ended.add(tid, (-1, {}))
                self.loop.emit(
                    TrialRecord(
                        tid,
                        status="rejected",
                        partition=record.partition,
                        reason=event.reason,
                        created_ms=record.timestamp_ms,
                        updated_ms=record.timestamp_ms,
                    ),
                    TRIALS,
                )
            case TrialEnded():
                self._on_ended(record, event)
            case Reward():
                # One an observation carries comes with the tick after its own: live all the same.
                self._check_reward(trial, event, carried=record.header(HEADER_KIND) == Observation.KIND)
            case Message():
                self._check_message(trial, event)
                if event.sender in trial.actors and (why := cannot_play_reason(event)) is not None:
                    self._end(tid, trial, "error", trial.tick, why)  # an actor cannot play: no use waiting for it
            case EnvironmentDone() if trial is None and tid in self.ended:
                pass  # the environment finished as the trial was being ended: nothing left to do
            case _ if trial is None:
                raise BadRecord(f"{event.KIND} for trial {tid!r}, which is not running ({self._why_not(tid)})")
            case ActorJoined():
                if trial.actors.get(event.actor) is None or event.actor in trial.served:
                    raise BadRecord(f"actor.joined for {event.actor!r}, who is not a client actor of trial {tid!r}")
                trial.last_activity = self.loop.log.time()
                refusal, _ = self.seats.joined(tid, event.actor, *seat_headers(record.headers))
                if refusal is not None:
                    raise BadRecord(f"refused: {refusal}")
                trial.waiting_for.discard(event.actor)
                if trial.status == "pending" and not trial.waiting_for and trial.pending is not None:
                    self.loop.emit(trial.pending.as_kind(TrialStarted))
            case _ if trial.status == "pending":
                raise BadRecord(f"{event.KIND} for trial {tid!r}, which waits for client actors and has not started")
            case EnvironmentDone():
                self._end(tid, trial, event.reason, event.tick, event.details)
            case Observation():
                if event.actor not in trial.actors:
                    raise BadRecord(f"observation for {event.actor!r}, who is not an actor of trial {tid!r}")
                self._activity(tid, trial, event.tick)
            case _:  # action, actor.timeout, actor.left, parameters.changed, trial.terminating
                trial.last_activity = self.loop.log.time()

    def unsent(self, event: Event, reason: str) -> None:
        if isinstance(event, (TrialStarted, TrialPending)):  # e.g. a config too large to log: reject the trial
            self.loop.emit(TrialRejected(event.trial_id, reason=f"{event.KIND} not sent: {reason}"))

    def _activity(self, tid: str, trial: _Live, tick: int) -> None:
        trial.last_activity = self.loop.log.time()
        trial.environment_deadline = None
        trial.tick = max(trial.tick, tick)
        # A backstop only: the environment runtime ends trials at max_ticks itself.
        if trial.max_ticks is not None and trial.tick > trial.max_ticks:
            self._end(tid, trial, "max_ticks", trial.tick, "the environment went past max_ticks")

    def _why_not(self, tid: str) -> str:
        if tid in self.ended:
            return "it has ended" if self.ended[tid][0] >= 0 else "it never started"
        return "its start request is being answered" if tid in self.requested else "unknown trial"

    def _current_tick(self, trial: _Live | None, tid: str, kind: str) -> tuple[int, Mapping[str, str]]:
        """The last tick of a trial that rewards and messages may address, and its actors."""
        if trial is not None and trial.status != "pending":
            return trial.tick, trial.actors
        ended = self.ended.get(tid)
        if ended is not None and ended[0] >= 0:
            return ended
        raise BadRecord(f"{kind} for trial {tid!r}, which is not running ({self._why_not(tid)})")

    def _check_reward(self, trial: _Live | None, reward: Reward, carried: bool = False) -> None:
        current, actors = self._current_tick(trial, reward.trial_id, Reward.KIND)
        problem = reward_problem(reward, current, actors)
        if problem:
            raise BadRecord(problem)
        if trial is not None:
            trial.returns.add(reward)  # a reward after the trial's end is in the log, not in the index's returns
        if self.loop.is_live(EVENTS, self.loop.bus.partition_of(reward.trial_id)):
            live = trial is not None and (carried or reward.tick >= trial.tick)
            self._rewards_counted[live].inc()

    def _check_message(self, trial: _Live | None, message: Message) -> None:
        if trial is None or trial.status == "pending":
            raise BadRecord(
                f"message for trial {message.trial_id!r}, which is not running ({self._why_not(message.trial_id)})"
            )
        problem = message_problem(message, trial.tick, trial.actors)
        if problem:
            raise BadRecord(problem)
        trial.last_activity = self.loop.log.time()

    # --- control -----------------------------------------------------------------------------
    def _control(self, record: Record, event: Event) -> None:
        match event:
            case StartRequest():
                self._start(record, event)
            case TerminateRequest():
                trial = self.live_trials.get(event.trial_id)
                if trial is None:
                    raise BadRecord(
                        f"terminate request for trial {event.trial_id!r}, "
                        f"which is not running ({self._why_not(event.trial_id)})"
                    )
                if event.hard or trial.status == "pending":
                    self._end(event.trial_id, trial, "terminated", trial.tick, event.reason or "hard terminate")
                elif trial.status == "running":
                    trial.status = "ending"
                    self.loop.emit(
                        TrialTerminating(event.trial_id, reason=event.reason, requested_by=event.requested_by)
                    )
            case _:
                raise BadRecord(f"{event.KIND} does not belong on the control topic")

    def _start(self, record: Record, request: StartRequest) -> None:
        tid = request.trial_id
        if tid in self.live_trials or tid in self.requested or tid in self.ended:
            raise BadRecord(f"start request for trial ID {tid!r}, which is already used")
        self.requested[tid] = record.partition
        spec = self.specs.get(request.spec)
        try:
            if spec is None:
                raise TrialError(
                    f"unknown spec {request.spec!r}; this orchestrator serves {', '.join(self.specs) or 'none'}"
                )
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
                return  # a repeat of the start of an ended trial: changes nothing (I-8)
            try:
                class_schemas(self.loop.bus.store, event)
            except CodecError as exc:
                raise BadRecord(f"{event.KIND} carries actor-class schemas that do not parse: {exc}") from None
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
                actors={a.name: a.actor_class for a in event.actors},
                served=frozenset(a.name for a in event.actors if not a.client),
                away_before=time.monotonic() - self.loop.log.time(),
                returns=Returns({a.name: a.actor_class for a in event.actors}),
            )
            self.live_trials[tid] = trial
        trial.last_activity = self.loop.log.time()
        if isinstance(event, TrialPending):
            trial.pending = event
            trial.waiting_for = {a.name for a in event.actors if a.client}
            trial.join_deadline_ms = record.timestamp_ms + event.join_timeout_ms
        else:
            if trial.status == "running":
                return
            trial.status, trial.pending, trial.join_deadline_ms = "running", None, None
            trial.environment_deadline = self.loop.log.time() + self.environment_timeout_s
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
        if trial is None:
            if event.trial_id in self.ended:
                return  # a repeat: changes nothing
            raise BadRecord(
                f"trial.ended for trial {event.trial_id!r}, which is not running ({self._why_not(event.trial_id)})"
            )
        self.ended.add(event.trial_id, (event.tick if trial.status != "pending" else -1, trial.actors))
        self.ended_at.add(event.trial_id, (trial.start_offset, record.offset))
        if self.loop.is_live(EVENTS, record.partition):
            metrics.TRIALS_ENDED.labels(event.reason).inc()
            log.info(
                "trial ended",
                trial=event.trial_id,
                spec=trial.spec,
                reason=event.reason,
                tick=event.tick,
                details=event.details,
            )
        self._index(
            event.trial_id,
            trial,
            record.timestamp_ms,
            status="ended",
            end_offset=record.offset,
            ticks=event.tick,
            reason=event.reason,
            returns=trial.returns.totals(event.tick) if trial.status != "pending" else {},
        )

    def _index(self, tid: str, trial: _Live, updated_ms: int, **changes) -> None:
        """Upsert the trial's record in the ``trials`` index (``changes`` override the live state)."""
        fields = {
            "status": trial.status,
            "spec": trial.spec,
            "partition": trial.partition,
            "start_offset": trial.start_offset,
            "ticks": trial.tick,
            "implementations": trial.implementations,
            "created_ms": trial.created_ms,
            "updated_ms": updated_ms,
            "experiment": trial.experiment,
            "phase": trial.phase,
        }
        self.loop.emit(TrialRecord(tid, **{**fields, **changes}), TRIALS)

    # --- timers and partitions ---------------------------------------------------------------------
    def periodic(self, now: float) -> None:
        if not self.loop.log.sure:
            return  # a trial's silence may be the log's: decide once it answers (or is known away)
        now_ms = int(now * 1000)
        mono = self.loop.log.time()
        away = time.monotonic() - mono  # seconds the log has been away: a wall-clock limit does not count them
        for tid, trial in list(self.live_trials.items()):
            if trial.end_sent or not self.loop.is_live(EVENTS, trial.partition):
                continue
            if trial.status == "pending":
                if trial.join_deadline_ms is not None and now_ms > trial.join_deadline_ms:
                    self._end(
                        tid, trial, "join_timeout", 0, f"still waiting for {', '.join(sorted(trial.waiting_for))}"
                    )
                continue
            if trial.environment_deadline is not None and mono > trial.environment_deadline:
                self._end(
                    tid,
                    trial,
                    "error",
                    0,
                    f"no environment service started the trial within {self.environment_timeout_s:g} s: "
                    "is one serving its environment implementation?",
                )
            elif trial.wall_clock_ms is not None and (
                now_ms - trial.created_ms - (away - trial.away_before) * 1000 > trial.wall_clock_ms
            ):
                self._end(tid, trial, "wall_clock", trial.tick, f"ran longer than {trial.wall_clock_ms} ms")
            elif trial.inactivity_ms is not None and self._inactive(trial, mono):
                self._end(tid, trial, "inactivity", trial.tick, f"no event for {trial.inactivity_ms} ms")

    def assigned(self, role: str, partition: int) -> None:
        if role == EVENTS:
            self.index_read = (
                False  # trials may have ended in it under another instance: read the index again when needed
            )

    def caught_up(self, role: str, partition: int) -> None:
        if role == EVENTS:
            now = self.loop.log.time()
            for trial in self.live_trials.values():
                if trial.partition == partition:
                    trial.last_activity = now  # inactivity is measured from when we took over
                    if trial.environment_deadline is not None:
                        trial.environment_deadline = now + self.environment_timeout_s
            for record, event in self.deferred.pop(partition, []):
                try:
                    self._control(record, event)
                except BadRecord as exc:
                    self.loop.dead_letter(record, str(exc))

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
        return safe_point(partition, self.live_trials.values())
