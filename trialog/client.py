"""Client actors: an actor played from outside the actor services — a person behind a
script or a page, an agent in a notebook — that joins a trial by its ID.

.. code-block:: python

    async with connect(settings) as bus, join(bus, trial_id, "bob") as session:
        async for event in session:
            match event:
                case ObservationEvent(observation=obs, final=False):
                    session.act(ask_the_human(obs))
                case EndEvent():
                    break

The spec names the implementation with ``client: true``; the orchestrator writes
``trial.pending`` and waits (up to ``join_timeout_ms``) until every client actor
has written ``actor.joined``, which :func:`join` does once it has read the trial.
The session is the same :class:`~trialog.actor.ActorSession` the actor services
give session-style actors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from trialog.actor import EndEvent, MessageEvent, ObservationEvent, RewardEvent
from trialog.bus.base import Bus
from trialog.controller import Controller
from trialog.errors import TrialError
from trialog.events import (
    HEADER_KIND,
    ActorJoined,
    Event,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    TrialEnded,
)
from trialog.runtime.actors import Session
from trialog.runtime.trial import class_schemas, loads, matches, trial_info
from trialog.topics import EVENTS


class _Emitter:
    """What :class:`Session` emits through: one writer task, so records keep their order."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.task = asyncio.create_task(self._write())

    def emit(self, event: Event) -> None:
        self.queue.put_nowait(event)

    async def _write(self) -> None:
        while True:
            event = await self.queue.get()
            await self.bus.publish(EVENTS, event)
            self.queue.task_done()

    async def close(self) -> None:
        await self.queue.join()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@contextlib.asynccontextmanager
async def join(bus: Bus, trial_id: str, actor: str, *, timeout: float = 60) -> AsyncIterator[Session]:
    """Join ``trial_id`` as ``actor``; raises :class:`TrialError` if the trial does not
    appear within ``timeout`` seconds or has no such client actor."""
    await bus.start()
    partition, start = bus.partition_of(trial_id), 0
    indexed = await Controller(bus).trial_record(trial_id)
    if indexed is not None and indexed.start_offset is not None:
        partition, start = indexed.partition, indexed.start_offset
    consumer = bus.consumer([EVENTS], partitions=[partition])
    await consumer.start()
    consumer.seek(EVENTS, partition, start)
    emitter = _Emitter(bus)
    reader: asyncio.Task | None = None
    try:
        resolved = await asyncio.wait_for(_find_trial(bus, consumer, trial_id), timeout)
        spec = next((a for a in resolved.actors if a.name == actor), None)
        if spec is None or not spec.client:
            raise TrialError(f"trial {trial_id} has no client actor named {actor!r}", trial_id=trial_id)
        info = trial_info(resolved)
        me = next(a for a in info.actors if a.name == actor)
        session = Session(emitter, info, me, class_schemas(bus.store, resolved)[me.actor_class])
        emitter.emit(ActorJoined(trial_id, actor=actor, implementation=spec.implementation))
        reader = asyncio.create_task(_read(bus, consumer, session))
        yield session
    except TimeoutError:
        raise TrialError(f"trial {trial_id} did not appear within {timeout:.0f} s", trial_id=trial_id) from None
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        await emitter.close()
        await consumer.stop()
        await bus.stop()


async def _find_trial(bus: Bus, consumer, trial_id: str) -> ResolvedTrial:
    while True:
        for record in await consumer.poll(timeout_ms=500):
            if record.trial_id == trial_id and record.header(HEADER_KIND) in ("trial.pending", "trial.started"):
                return bus.codec.decode(record.value, record.header(HEADER_KIND))


async def _read(bus: Bus, consumer, session: Session) -> None:
    """Feed the session the events addressed to its actor, in log order, until the end."""
    name, actor_class = session.actor.name, session.actor.actor_class
    seen_ticks: set[int] = set()
    while True:
        for record in await consumer.poll(timeout_ms=500):
            if record.trial_id != session.trial.trial_id:
                continue
            event = bus.codec.decode(record.value, record.header(HEADER_KIND))
            match event:
                case Observation(actor=a) if a == name and event.tick not in seen_ticks:
                    seen_ticks.add(event.tick)
                    value = bus.store.decode(event.payload, session.schemas.observation)
                    session.push(ObservationEvent(event.tick, value, event.terminated, event.truncated, event.final))
                case Reward() if matches(event.receiver, name, actor_class):
                    session.push(RewardEvent(event.tick, event.value, event.confidence, event.sender, loads(event.user_data) if event.user_data else None))
                case Message() if event.sender != name and any(matches(r, name, actor_class) for r in event.receivers):
                    session.push(MessageEvent(event.tick, event.sender, loads(event.payload)))
                case TrialEnded():
                    session.push(EndEvent(event.tick, event.reason))
                    return
