"""The actor runtime: plays every actor of a trial whose implementation it serves.

An implementation is a decide-style class (:class:`trialog.actor.Agent` or any
class with ``decide``) or a session coroutine ``async def run(session)``. Each
implementation is one consumer group (``actors.<implementation>``), so it scales
on its own; one host process may serve several.

Observations arrive decoded into the actor class's types; rewards — retroactive
ones included — and messages are delivered live as they are read from the log.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trialog.actor import (
    ActorEvent,
    EndEvent,
    MessageEvent,
    ObservationEvent,
    RewardEvent,
)
from trialog.bus.base import Record
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import CodecError, TrialogError
from trialog.events import (
    HEADER_RECEIVER,
    Action,
    Event,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialStarted,
)
from trialog.logs import get_logger
from trialog.runtime.service import Handler
from trialog.runtime.trial import (
    ClassSchemas,
    class_schemas,
    dumps,
    loads,
    matches,
    trial_info,
)
from trialog.spec import load_entry

log = get_logger(__name__)


class Emits(Protocol):
    def emit(self, event: Event) -> None: ...


class Session:
    """The :class:`trialog.actor.ActorSession` handed to a session-style actor (by the
    actor runtime, or by :func:`trialog.client.join` to a client actor)."""

    def __init__(self, loop: Emits, trial: TrialInfo, actor: ActorInfo, schemas: ClassSchemas):
        self._loop = loop
        self.trial = trial
        self.actor = actor
        self.schemas = schemas
        self.tick = 0
        self._queue: asyncio.Queue[ActorEvent] = asyncio.Queue()
        self._answered: set[int] = set()

    def push(self, event: ActorEvent) -> None:
        if isinstance(event, ObservationEvent):
            self.tick = event.tick
        self._queue.put_nowait(event)

    async def __aiter__(self) -> AsyncIterator[ActorEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, EndEvent):
                return

    def act(self, action: Any) -> None:
        if self.tick in self._answered:
            raise TrialogError(f"actor {self.actor.name} already acted at tick {self.tick}")
        payload = self.schemas.action.encode(action)  # raises CodecError with the mismatch
        self._answered.add(self.tick)
        self._loop.emit(Action(self.trial.trial_id, tick=self.tick, actor=self.actor.name, payload=payload))

    def reward(self, receiver: str, value: float, *, tick: int | None = None, confidence: float = 1.0, user_data: Mapping[str, Any] | None = None) -> None:
        self._loop.emit(
            Reward(
                self.trial.trial_id,
                tick=self.tick if tick is None else tick,
                receiver=receiver,
                value=float(value),
                confidence=float(confidence),
                sender=self.actor.name,
                user_data=None if user_data is None else dumps(user_data),
            )
        )

    def message(self, receivers: Sequence[str], payload: Mapping[str, Any], *, message_id: str | None = None) -> None:
        self._loop.emit(
            Message(
                self.trial.trial_id,
                tick=self.tick,
                sender=self.actor.name,
                receivers=tuple(receivers),
                message_id=message_id or f"{self.actor.name}-{self.tick}-{len(self._answered)}",
                payload=dumps(payload),
            )
        )


@dataclass
class _Played:
    """One actor this host plays in one trial."""

    info: ActorInfo
    schemas: ClassSchemas
    agent: Any = None  # decide-style instance
    session: Session | None = None
    task: asyncio.Task | None = None
    last_answered: int = -1


@dataclass
class _Trial:
    started: TrialStarted
    partition: int
    start_offset: int
    actors: dict[str, _Played] = field(default_factory=dict)


class ActorHandler(Handler):
    """Plays one actor implementation."""

    kinds = frozenset({TrialStarted.KIND, Observation.KIND, Reward.KIND, Message.KIND, TrialEnded.KIND})
    service_name = "actors"

    def __init__(self, implementation: str, entry: str | Any):
        self.implementation = implementation
        self.target = load_entry(entry, what=f"actor implementation {implementation}") if isinstance(entry, str) else entry
        self.session_style = inspect.iscoroutinefunction(self.target)
        if not self.session_style and not (inspect.isclass(self.target) and hasattr(self.target, "decide")):
            raise TrialogError(
                f"actor implementation {implementation}: {entry!r} must be a class with decide(observation) "
                "or an `async def run(session)` coroutine function"
            )
        self.service_name = f"actors.{implementation}"
        self.trials: dict[str, _Trial] = {}

    def wants(self, record: Record, kind: str | None) -> bool:
        if kind == TrialStarted.KIND:
            return True
        trial = self.trials.get(record.trial_id)
        if trial is None:
            return False
        return kind != Observation.KIND or record.header(HEADER_RECEIVER) in trial.actors

    def handle(self, record: Record, event: Event) -> None:
        if isinstance(event, TrialStarted):
            if event.trial_id not in self.trials:
                self._start(record, event)
            return
        trial = self.trials.get(event.trial_id)
        if trial is None:
            return
        match event:
            case Observation(actor=name) if name in trial.actors:
                self._on_observation(trial, trial.actors[name], event)
            case Reward():
                for played in trial.actors.values():
                    if matches(event.receiver, played.info.name, played.info.actor_class):
                        self._deliver(played, RewardEvent(event.tick, event.value, event.confidence, event.sender, loads(event.user_data) if event.user_data else None))
            case Message():
                for played in trial.actors.values():
                    if any(matches(r, played.info.name, played.info.actor_class) for r in event.receivers) and event.sender != played.info.name:
                        self._deliver(played, MessageEvent(event.tick, event.sender, loads(event.payload)))
            case TrialEnded():
                for played in trial.actors.values():
                    self._deliver(played, EndEvent(event.tick, event.reason))
                del self.trials[event.trial_id]

    def _start(self, record: Record, started: TrialStarted) -> None:
        mine = [a for a in started.actors if a.implementation == self.implementation and not a.client]
        if not mine:
            return
        info = trial_info(started)
        schemas = class_schemas(self.loop.bus.store, started)
        trial = _Trial(started, record.partition, record.offset)
        for actor in info.actors:
            if actor.name not in {a.name for a in mine}:
                continue
            played = _Played(actor, schemas[actor.actor_class])
            try:
                if self.session_style:
                    played.session = Session(self.loop, info, actor, played.schemas)
                    played.task = asyncio.get_running_loop().create_task(self._run_session(played))
                else:
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
            return  # duplicate
        try:
            value = self.loop.bus.store.decode(obs.payload, played.schemas.observation)
        except CodecError as exc:
            log.error("observation does not decode", trial=trial.started.trial_id, actor=played.info.name, error=str(exc))
            return
        event = ObservationEvent(obs.tick, value, obs.terminated, obs.truncated, obs.final)
        played.last_answered = obs.tick
        if played.session is not None:
            played.session.push(event)
            return
        if obs.final:
            return
        try:
            action = played.agent.decide(value)
            payload = played.schemas.action.encode(action)
        except Exception as exc:  # the agent's bug: no action; the environment's timeout policy takes over
            log.error("actor did not produce a valid action", trial=trial.started.trial_id, actor=played.info.name, tick=obs.tick, error=f"{type(exc).__name__}: {exc}")
            return
        self.loop.emit(Action(trial.started.trial_id, tick=obs.tick, actor=played.info.name, payload=payload))

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
        starts = [t.start_offset for t in self.trials.values() if t.partition == partition]
        return min(starts) if starts else None
