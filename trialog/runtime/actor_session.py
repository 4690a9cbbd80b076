"""What an actor sends besides its actions: rewards and messages, checked as the log will
judge them (docs/protocol.md, "What counts") before they are written.

One :class:`Sender` makes them for every form of actor: the :class:`Session` of a
session-style actor (or of a client actor, :func:`trialog.client_actor.join`) writes
them at once; the :class:`Outbox` of a decide-style agent
(:meth:`trialog.actor.Agent.reward`, :meth:`~trialog.actor.Agent.message`) holds them
until the actor runtime writes them from the event loop, since ``decide`` may be running
in the implementation's worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

from trialog.actor import ActorEvent, EndEvent, ObservationEvent
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialError, TrialogError
from trialog.protocol.events import Action, Event, Message, Reward
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.trial import ClassSchemas, dumps


class Emits(Protocol):
    def emit(self, event: Event) -> None: ...


class Sender:
    """The rewards and messages of one actor of one trial (:class:`trialog.actor.Outputs`).
    ``tick`` is the tick being answered: the default tick of both."""

    def __init__(self, trial: TrialInfo, actor: ActorInfo, send: Callable[[Event], None]):
        self.trial = trial
        self.actor = actor
        self.tick = 0
        self._send = send
        self._sent_messages = 0  # numbers this actor's messages: two in one tick are two messages
        self._classes = {a.name: a.actor_class for a in trial.actors}  # what its rewards and messages may address

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
            raise self._refused("reward", problem)
        self._send(reward)

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
            raise self._refused("message", problem)
        self._send(message)

    def _refused(self, what: str, problem: str) -> TrialError:
        """Why this actor cannot send this reward or message (reason ``invalid_reward``, ``invalid_message``)."""
        return TrialError(
            f"{self.actor.name} cannot send this {what}: {problem}",
            trial_id=self.trial.trial_id,
            reason=f"invalid_{what}",
        )


class Session(Sender):
    """The :class:`trialog.actor.ActorSession` handed to a session-style actor (by the
    actor runtime, or by :func:`trialog.client_actor.join` to a client actor)."""

    def __init__(self, loop: Emits, trial: TrialInfo, actor: ActorInfo, schemas: ClassSchemas):
        super().__init__(trial, actor, loop.emit)
        self._loop = loop
        self.schemas = schemas
        self._queue: asyncio.Queue[ActorEvent] = asyncio.Queue()
        self._answered: set[int] = set()

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


class Outbox(Sender):
    """The rewards and messages of a decide-style agent, held until the actor runtime takes
    them (:meth:`take`) and writes them from the event loop: after ``decide`` (before its
    action), after a hook. ``decide`` may run in the worker thread while a hook runs on the
    loop, hence the lock."""

    def __init__(self, trial: TrialInfo, actor: ActorInfo):
        self._lock = threading.Lock()
        self._held: list[Event] = []
        super().__init__(trial, actor, self._hold)

    def _hold(self, event: Event) -> None:
        with self._lock:
            self._held.append(event)

    def take(self) -> list[Event]:
        """What was sent since the last take, in order."""
        if not self._held:  # the common case, without the lock: an agent that sends nothing
            return []
        with self._lock:
            held, self._held = self._held, []
        return held
