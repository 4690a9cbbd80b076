"""The actor runtime: plays every actor of a trial whose implementation it serves.

An implementation is a decide-style class (:class:`trialog.actor.Agent` or any
class with ``decide``), a batched :class:`trialog.actor.Policy`, or a session
coroutine ``async def run(session)``. Each implementation is one consumer group
(``actors.<implementation>``), so it scales on its own; one host process may serve
several.

The observations of one poll (up to :data:`trialog.runtime.service.RECORDS_PER_FLUSH`
records; all trials) are decided in one call, as soon as the loop has handled them
(:meth:`ActorHandler.polled`), so that their actions leave in the same turn of the event
loop. While such calls of an implementation are slow and mostly wait
(:mod:`trialog.runtime.pace`), they run off the event loop, in one worker thread per
implementation, while the loop goes on reading: a slow implementation slows only its own
trials, and a fast one does not pay a thread hop (about 0.1 ms) on every tick. A policy's
calls always run in the worker, in order with its model loads. During catch-up
(I-7) they run inline instead, so that replayed actions are compared with the log.
A policy that follows a model gets each newer version from ``models`` (loaded in
the same worker thread, between two batches) and its actions record the version.

Observations arrive decoded into the actor class's types; rewards — retroactive
ones included — and messages are delivered live as they are read from the log.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from trialog.actor import (
    ActorEvent,
    DecideRequest,
    EndEvent,
    MessageEvent,
    ObservationEvent,
    Policy,
    RewardEvent,
)
from trialog.bus.base import Record
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import BadRecord, CodecError, TrialError, TrialogError
from trialog.model_registry import ModelFollower, ModelVersion
from trialog.protocol.events import (
    HEADER_RECEIVER,
    Action,
    Event,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialStarted,
)
from trialog.protocol.inbox import Received
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.roles import ACTORS
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import (
    ClassSchemas,
    class_schemas,
    dumps,
    loads,
    reaches,
    trial_info,
)
from trialog.runtime.handler import Handler, safe_point
from trialog.runtime.pace import Pace
from trialog.runtime.recent import RecentlyEnded
from trialog.spec import load_entry
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)


_NO_ACTION = object()  # a decide() that raised


class Emits(Protocol):
    def emit(self, event: Event) -> None: ...


class Session:
    """The :class:`trialog.actor.ActorSession` handed to a session-style actor (by the
    actor runtime, or by :func:`trialog.client_actor.join` to a client actor)."""

    def __init__(self, loop: Emits, trial: TrialInfo, actor: ActorInfo, schemas: ClassSchemas):
        self._loop = loop
        self.trial = trial
        self.actor = actor
        self.schemas = schemas
        self.tick = 0
        self._queue: asyncio.Queue[ActorEvent] = asyncio.Queue()
        self._answered: set[int] = set()
        self._sent_messages = 0  # numbers this session's messages: two in one tick are two messages
        self._classes = {a.name: a.actor_class for a in trial.actors}  # what its rewards and messages may address

    def push(self, event: ActorEvent) -> None:
        self._queue.put_nowait(event)

    async def __aiter__(self) -> AsyncIterator[ActorEvent]:
        while True:
            event = await self._queue.get()
            if isinstance(event, ObservationEvent):
                self.tick = event.tick  # the tick being answered: the one handed out, not the newest queued
            yield event
            if isinstance(event, EndEvent):
                return

    def act(self, action: Any) -> None:
        if self.tick in self._answered:
            raise TrialogError(f"actor {self.actor.name} already acted at tick {self.tick}")
        payload = self.schemas.action.encode(action)  # raises CodecError with the mismatch
        self._answered.add(self.tick)
        self._loop.emit(Action(self.trial.trial_id, tick=self.tick, actor=self.actor.name, payload=payload))

    def reward(
        self,
        receiver: str,
        value: float,
        *,
        tick: int | None = None,
        confidence: float = 1.0,
        user_data: Mapping[str, Any] | None = None,
    ) -> None:
        """Reward actors other than this one (a name, ``*`` or ``class.*``; a wildcard leaves
        this actor out). Raises :class:`TrialError` for a reward that could not count: out of
        bounds (:func:`trialog.protocol.rewards.reward_bounds_problem`), for a negative tick, naming this
        actor, or reaching no other actor of the trial."""
        problem = reward_bounds_problem(value, confidence)
        if problem is None:
            reward = Reward(
                self.trial.trial_id,
                tick=self.tick if tick is None else int(tick),
                receiver=receiver,
                value=float(value),
                confidence=float(confidence),
                sender=self.actor.name,
                user_data=None if user_data is None else dumps(user_data),
            )
            problem = reward_problem(
                reward, max(reward.tick, self.tick), self._classes
            )  # a later tick is the log's to judge
        if problem is not None:
            raise TrialError(
                f"{self.actor.name} cannot send this reward: {problem}",
                trial_id=self.trial.trial_id,
                reason="invalid_reward",
            )
        self._loop.emit(reward)

    def _next_message_id(self) -> str:
        self._sent_messages += 1
        return f"{self.actor.name}-{self.tick}-{self._sent_messages}"

    def message(self, receivers: Sequence[str], payload: Mapping[str, Any], *, message_id: str | None = None) -> None:
        """Send a message to actors of the trial (names, ``*``, ``class.*``) or ``env``.
        Raises :class:`TrialError` if a receiver addresses nobody in the trial."""
        message = Message(
            self.trial.trial_id,
            tick=self.tick,
            sender=self.actor.name,
            receivers=tuple(receivers),
            message_id=message_id or self._next_message_id(),
            payload=dumps(payload),
        )
        problem = message_problem(message, self.tick, self._classes)
        if problem is not None:
            raise TrialError(
                f"{self.actor.name} cannot send this message: {problem}",
                trial_id=self.trial.trial_id,
                reason="invalid_message",
            )
        self._loop.emit(message)


@dataclass
class _Played:
    """One actor this host plays in one trial."""

    info: ActorInfo
    schemas: ClassSchemas
    agent: Any = None  # decide-style instance
    session: Session | None = None
    task: asyncio.Task | None = None
    last_answered: int = -1
    received: Received = field(default_factory=Received)  # each reward and message once; probes


@dataclass
class _Trial:
    started: TrialStarted
    info: TrialInfo
    partition: int
    start_offset: int
    mine: frozenset[str]  # the actors this implementation plays (whether or not they started)
    classes: dict[str, str]  # every actor of the trial -> its class (what rewards and messages may address)
    actors: dict[str, _Played] = field(default_factory=dict)
    tick: int = 0  # the latest tick observed: rewards and messages for later ticks do not count


@dataclass(frozen=True, slots=True)
class _Pending:
    """An observation waiting for its action."""

    trial: _Trial
    played: _Played
    tick: int
    observation: Any


class ActorHandler(Handler):
    """Plays one actor implementation."""

    kinds = frozenset({TrialStarted.KIND, Observation.KIND, Reward.KIND, Message.KIND, TrialEnded.KIND})
    owner_role = ACTORS
    service_name = "actors"

    def __init__(self, implementation: str, entry: str | Any, config: Mapping[str, Any] | None = None):
        self.implementation = implementation
        self.target = (
            load_entry(entry, what=f"actor implementation {implementation}") if isinstance(entry, str) else entry
        )
        self.session_style = inspect.iscoroutinefunction(self.target)
        is_class = inspect.isclass(self.target)
        if not self.session_style and not (
            is_class and (hasattr(self.target, "decide") or issubclass(self.target, Policy))
        ):
            raise TrialogError(
                f"actor implementation {implementation}: {entry!r} must be a class with decide(observation), "
                "a trialog.actor.Policy, or an `async def run(session)` coroutine function"
            )
        self.policy: Policy | None = (
            self.target(dict(config or {})) if is_class and issubclass(self.target, Policy) else None
        )
        self.service_name = f"actors.{implementation}"
        self.trials: dict[str, _Trial] = {}
        # One worker thread per implementation: decisions (and model loads) in order, off the loop.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"decide-{implementation}")
        self._pending: list[_Pending] = []
        self._deciding: asyncio.Task | None = None
        self._in_worker = False  # a batch is being decided in the worker thread: the next waits for it
        self.pace = Pace()  # inline, or in the worker while its calls are slow and wait
        self._follower: ModelFollower | None = None
        self.batches = 0  # decide calls made (one per batch), for tests and metrics
        self.ended: RecentlyEnded[None] = RecentlyEnded()  # a repeated trial.started changes nothing

    def runs_here(self, record: Record) -> bool:
        trial = self.trials.get(record.trial_id)
        return trial is not None and record.header(HEADER_RECEIVER) in trial.mine

    def should_decode(self, record: Record, kind: str | None) -> bool:
        if kind == TrialStarted.KIND:
            return True
        trial = self.trials.get(record.trial_id)
        if trial is None:
            return False
        return kind != Observation.KIND or record.header(HEADER_RECEIVER) in trial.actors

    def handle(self, record: Record, event: Event) -> None:
        if isinstance(event, TrialStarted):
            if event.trial_id not in self.trials and event.trial_id not in self.ended:
                self._start(record, event)
            return
        trial = self.trials.get(event.trial_id)
        if trial is None:
            return
        match event:
            case Observation(actor=name) if name in trial.actors:
                trial.tick = max(trial.tick, event.tick)
                self._on_observation(trial, trial.actors[name], event)
            case Reward() | Message() if (
                reward_problem(event, trial.tick, trial.classes)
                if isinstance(event, Reward)
                else message_problem(event, trial.tick, trial.classes)
            ):
                pass  # not counted: its owner (the orchestrator) dead-letters it
            case Reward():
                for played in trial.actors.values():
                    if reaches(
                        event.receiver, event.sender, played.info.name, played.info.actor_class
                    ) and played.received.reward(event):
                        self._deliver(
                            played,
                            RewardEvent(
                                event.tick,
                                event.value,
                                event.confidence,
                                event.sender,
                                loads(event.user_data) if event.user_data else None,
                            ),
                        )
            case Message():
                payload = loads(event.payload)
                for played in trial.actors.values():
                    if any(
                        reaches(r, event.sender, played.info.name, played.info.actor_class) for r in event.receivers
                    ):
                        deliver, probe_answer = played.received.message(event, played.info.name, payload)
                        if deliver:
                            self._deliver(played, MessageEvent(event.tick, event.sender, payload))
                        if probe_answer is not None:
                            self.loop.emit(probe_answer)
            case TrialEnded():
                for played in trial.actors.values():
                    self._deliver(played, EndEvent(event.tick, event.reason))
                del self.trials[event.trial_id]
                self.ended.add(event.trial_id)
                if self.policy is not None:
                    self._worker.submit(self.policy.trial_ended, event.trial_id)

    def _start(self, record: Record, started: TrialStarted) -> None:
        mine = [a for a in started.actors if a.implementation == self.implementation and not a.client]
        if not mine:
            return
        info = trial_info(started)
        schemas = class_schemas(self.loop.bus.store, started)
        trial = _Trial(
            started,
            info,
            record.partition,
            record.offset,
            frozenset(a.name for a in mine),
            {a.name: a.actor_class for a in started.actors},
        )
        for actor in info.actors:
            if actor.name not in {a.name for a in mine}:
                continue
            played = _Played(actor, schemas[actor.actor_class])
            try:
                if self.session_style:
                    played.session = Session(self.loop, info, actor, played.schemas)
                    played.task = asyncio.get_running_loop().create_task(self._run_session(played))
                elif self.policy is None:
                    played.agent = self.target(info, actor)
                    played.agent.observation_schema = played.schemas.observation_json
                    played.agent.action_schema = played.schemas.action_json
            except Exception:
                log.exception("actor failed to start", trial=started.trial_id, actor=actor.name)
                continue
            trial.actors[actor.name] = played
        self.trials[started.trial_id] = trial

    async def _run_session(self, played: _Played) -> None:
        try:
            await self.target(played.session)
        except Exception:
            log.exception("actor session failed", trial=played.session.trial.trial_id, actor=played.info.name)

    def _on_observation(self, trial: _Trial, played: _Played, obs: Observation) -> None:
        if obs.tick <= played.last_answered:
            return  # a repeat, or a retry of an earlier tick: the actor answered it already
        try:
            value = self.loop.bus.store.decode(obs.payload, played.schemas.observation)
        except CodecError as exc:
            raise BadRecord(
                f"observation of {played.info.name} at tick {obs.tick} does not match its schema: {exc}"
            ) from None
        event = ObservationEvent(obs.tick, value, obs.terminated, obs.truncated, obs.final)
        played.last_answered = obs.tick
        if played.session is not None:
            played.session.push(event)
            return
        if obs.final:
            return
        pending = _Pending(trial, played, obs.tick, value)
        if not self.loop.is_live(EVENTS, trial.partition):
            self._emit_decisions([pending], *self._decide([pending]))  # catch-up: compared with the log in order
            return
        self._pending.append(pending)
        if self._deciding is None or self._deciding.done():
            self._deciding = asyncio.get_running_loop().create_task(self._decide_pending())

    def polled(self) -> None:
        """Decide a poll's observations before the loop gives the event loop a turn — when they
        are decided inline: their actions leave in the flush of this turn, one hop sooner
        than from a task of their own (which then finds nothing left)."""
        if self._pending and not self._in_worker and not self._decides_in_worker:
            self._decide_here()

    @property
    def _decides_in_worker(self) -> bool:
        """The next batch goes to the worker thread: while slow and waiting, and always for a
        policy (its model loads and trial ends run there too: its calls stay in order with them)."""
        return self.pace.off_loop or self.policy is not None

    def _decide_here(self) -> None:
        batch, self._pending = self._pending, []
        self._emit_decisions(batch, *self.pace.timed(self._decide, batch))

    async def _decide_pending(self) -> None:
        """Decide what is pending in one call (in the worker thread once slow); what
        arrives meanwhile is the next batch."""
        loop = asyncio.get_running_loop()
        while self._pending:
            if not self._decides_in_worker:
                self._decide_here()
                continue
            batch, self._pending = self._pending, []
            self._in_worker = True
            try:
                payloads, versions = await loop.run_in_executor(self._worker, self.pace.timed, self._decide, batch)
            finally:
                self._in_worker = False
            self._emit_decisions(batch, payloads, versions)

    def _decide(self, batch: list[_Pending]) -> tuple[list[bytes | None], list[int | None]]:
        """In the worker thread: the actions of a batch, encoded (None where there is none)."""
        self.batches += 1
        if self.policy is not None:
            try:
                actions = list(
                    self.policy.decide_batch(
                        [DecideRequest(p.trial.info, p.played.info, p.tick, p.observation) for p in batch]
                    )
                )
                if len(actions) != len(batch):
                    raise TrialogError(f"decide_batch returned {len(actions)} actions for {len(batch)} requests")
            except Exception as exc:  # the policy's bug: no actions; the environment's timeout policy takes over
                log.error(
                    "policy did not decide",
                    implementation=self.implementation,
                    requests=len(batch),
                    error=f"{type(exc).__name__}: {exc}",
                )
                return [None] * len(batch), [None] * len(batch)
            versions = [self.policy.policy_version] * len(batch)
        else:
            actions, versions = [], []
            for p in batch:
                try:
                    actions.append(p.played.agent.decide(p.observation))
                except Exception as exc:
                    log.error(
                        "actor did not produce an action",
                        trial=p.trial.info.trial_id,
                        actor=p.played.info.name,
                        tick=p.tick,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    actions.append(_NO_ACTION)
                versions.append(getattr(p.played.agent, "policy_version", None))
        payloads: list[bytes | None] = []
        for p, action in zip(batch, actions):
            if action is _NO_ACTION:
                payloads.append(None)
                continue
            try:
                payloads.append(p.played.schemas.action.encode(action))
            except CodecError as exc:
                log.error(
                    "action does not match the action schema",
                    trial=p.trial.info.trial_id,
                    actor=p.played.info.name,
                    tick=p.tick,
                    error=str(exc),
                )
                payloads.append(None)
        return payloads, versions

    def _emit_decisions(self, batch: list[_Pending], payloads: list[bytes | None], versions: list[int | None]) -> None:
        for p, payload, version in zip(batch, payloads, versions):
            if payload is None or self.trials.get(p.trial.info.trial_id) is not p.trial:
                continue  # no action (timeout policy applies), or the trial ended / moved meanwhile
            self.loop.emit(
                Action(
                    p.trial.info.trial_id,
                    tick=p.tick,
                    actor=p.played.info.name,
                    payload=payload,
                    policy_version=version,
                )
            )

    # --- models ---------------------------------------------------------------------------------
    def assigned(self, role: str, partition: int) -> None:
        if self.policy is not None and self.policy.model and self._follower is None:
            self._follower = ModelFollower(self.loop.bus, self._on_model)
            self._follower.start()

    def _on_model(self, version: ModelVersion) -> None:
        if version.model == self.policy.model:
            self._worker.submit(self._load, version)

    def _load(self, version: ModelVersion) -> None:
        """In the worker thread, between two batches."""
        try:
            self.policy.load(version)
            self.policy.policy_version = version.version
            metrics.MODEL_VERSION.labels(self.implementation).set(version.version)
            log.info(
                "model version loaded", implementation=self.implementation, model=version.model, version=version.version
            )
        except Exception as exc:
            log.error(
                "model version not loaded; keeping the previous one",
                model=version.model,
                version=version.version,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _deliver(self, played: _Played, event: ActorEvent) -> None:
        if played.session is not None:
            played.session.push(event)
            return
        hook = {RewardEvent: "on_reward", MessageEvent: "on_message", EndEvent: "on_end"}[type(event)]
        method = getattr(played.agent, hook, None)
        if method is not None:
            try:
                method(event)
            except Exception:
                log.exception("actor hook failed", actor=played.info.name, hook=hook)

    def revoked(self, role: str, partition: int) -> None:
        for trial_id in [t for t, trial in self.trials.items() if trial.partition == partition]:
            for played in self.trials[trial_id].actors.values():
                if played.task is not None:
                    played.task.cancel()
            del self.trials[trial_id]

    def safe_offset(self, role: str, partition: int) -> int | None:
        return safe_point(partition, self.trials.values())
