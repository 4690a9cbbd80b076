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

A seat has one holder (:mod:`trialog.trust.seats`): ``holder`` is the client's own id
(keep it to resume the seat after a reconnect); a join while another holder has
the seat raises :class:`TrialError`, unless ``takeover=True`` — then the other
holder's session ends with the reason ``seat_taken_over``. Without the seats key
in the keyring, pass the seat's join ``token``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from trialog.actor import EndEvent, MessageEvent, ObservationEvent, RewardEvent
from trialog.bus.base import Bus
from trialog.controller import Controller
from trialog.errors import CodecError, TrialError
from trialog.protocol.events import (
    HEADER_KIND,
    ActorJoined,
    Event,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    TrialEnded,
    TrialPending,
    TrialStarted,
)
from trialog.protocol.owners import check_headers, message_problem, reward_problem
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import class_schemas, loads, reaches, trial_info
from trialog.runtime.actor_session import Session
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import read_join_token
from trialog.trust.keys import Keyring, TrustError
from trialog.trust.seats import Seat, SeatBook, seat_headers

TAKEN_OVER = "seat_taken_over"


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
async def join(
    bus: Bus,
    trial_id: str,
    actor: str,
    *,
    timeout: float = 60,
    token: str | None = None,
    holder: str | None = None,
    takeover: bool = False,
) -> AsyncIterator[Session]:
    """Join ``trial_id`` as ``actor``; raises :class:`TrialError` if the trial does not
    appear within ``timeout`` seconds, has no such client actor, or its seat is held
    by another holder (and ``takeover`` is not set)."""
    seat_key = None
    if token is not None:
        claims = read_join_token(token)
        if (claims.trial_id, claims.actor) != (trial_id, actor):
            raise TrialError(
                f"this join token is for seat {claims.actor} of trial {claims.trial_id}", trial_id=trial_id
            )
        seat_key = claims.seat_key
        try:
            bus.trust  # noqa: B018  (a keyring, if this process has one)
        except TrustError:
            bus.trust = Authenticator(Keyring({}, source="a join token"))  # the token's seat key is all it needs
    seat = Seat(trial_id, actor, holder or uuid.uuid4().hex, takeover)
    bus.trust.hold(seat, seat_key)
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
        resolved, rest = await asyncio.wait_for(_find_trial(bus, consumer, trial_id), timeout)
        spec = next((a for a in resolved.actors if a.name == actor), None)
        if spec is None or not spec.client:
            raise TrialError(f"trial {trial_id} has no client actor named {actor!r}", trial_id=trial_id)
        info = trial_info(resolved)
        me = next(a for a in info.actors if a.name == actor)
        session = Session(emitter, info, me, class_schemas(bus.store, resolved)[me.actor_class])
        emitter.emit(ActorJoined(trial_id, actor=actor, implementation=spec.implementation))
        admitted: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        reader = asyncio.create_task(
            _read(bus, consumer, session, seat, admitted, rest, started=isinstance(resolved, TrialStarted))
        )
        refusal = await asyncio.wait_for(asyncio.shield(admitted), timeout)
        if refusal is not None:
            raise TrialError(refusal, trial_id=trial_id, reason="seat_held")
        yield session
    except TimeoutError:
        raise TrialError(
            f"trial {trial_id} did not appear (or did not admit {actor}) within {timeout:.0f} s", trial_id=trial_id
        ) from None
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        await emitter.close()
        await consumer.stop()
        bus.trust.release(trial_id, actor)
        await bus.stop()


def _genuine(bus: Bus, record) -> bool:
    return bus.refusal(record) is None


async def _find_trial(bus: Bus, consumer, trial_id: str) -> tuple[ResolvedTrial, list]:
    """The trial's resolved record, and the records read after it in the same fetch."""
    while True:
        records = await consumer.poll(timeout_ms=500)
        for i, record in enumerate(records):
            kind = record.header(HEADER_KIND)
            if record.trial_id == trial_id and kind in (TrialPending.KIND, TrialStarted.KIND) and _genuine(bus, record):
                resolved = bus.codec.decode(record.value, kind)
                bus.trust.learn(resolved)
                return resolved, records[i + 1 :]


async def _read(
    bus: Bus, consumer, session: Session, seat: Seat, admitted: asyncio.Future, first: list, *, started: bool
) -> None:
    """Feed the session the events addressed to its actor, in log order, until the end;
    settle ``admitted`` when this holder's join is read back (None, or why it was refused)."""
    name, actor_class = session.actor.name, session.actor.actor_class
    classes = {a.name: a.actor_class for a in session.trial.actors}  # what rewards and messages may address
    seen_ticks: set[int] = set()
    latest = 0 if started else -1  # the trial's current tick: rewards and messages for later ticks do not count
    seats = SeatBook()
    while True:
        records, first = first or await consumer.poll(timeout_ms=500), []
        for record in records:
            if record.trial_id != session.trial.trial_id or not _genuine(bus, record):
                continue
            try:
                event = bus.codec.decode(record.value, record.header(HEADER_KIND))
                check_headers(record.key, record.headers, event)
            except CodecError:
                continue  # counts nowhere (e.g. an observation carrying a reward out of bounds): its owner letters it
            match event:
                case ActorJoined(actor=a) if a == name:
                    holder, takeover = seat_headers(record.headers)
                    refusal, displaced = seats.joined(seat.trial_id, a, holder, takeover)
                    if holder == seat.holder and not admitted.done():
                        admitted.set_result(refusal)
                    elif refusal is None and displaced == seat.holder:
                        session.push(EndEvent(session.tick, TAKEN_OVER))  # another holder took the seat over
                        return
                case Observation(actor=a) if a == name and event.tick not in seen_ticks:
                    seen_ticks.add(event.tick)
                    carried = event.carried_reward()
                    if carried is not None and reward_problem(carried, latest, classes) is None:
                        session.push(_reward_event(carried))  # as the record it stands for would have, before it
                    latest = max(latest, event.tick)
                    value = bus.store.decode(event.payload, session.schemas.observation)
                    session.push(ObservationEvent(event.tick, value, event.terminated, event.truncated, event.final))
                # What the orchestrator dead-letters is not delivered (the rules of trialog.protocol.owners),
                # and nothing reaches its own sender (trialog.protocol.trial.reaches).
                case Reward() if (
                    reaches(event.receiver, event.sender, name, actor_class)
                    and reward_problem(event, latest, classes) is None
                ):
                    session.push(_reward_event(event))
                case Message() if (
                    any(reaches(r, event.sender, name, actor_class) for r in event.receivers)
                    and message_problem(event, latest, classes) is None
                ):
                    session.push(MessageEvent(event.tick, event.sender, loads(event.payload)))
                case TrialStarted():
                    latest = max(latest, 0)
                case TrialEnded():
                    session.push(EndEvent(event.tick, event.reason))
                    return


def _reward_event(reward: Reward) -> RewardEvent:
    user_data = loads(reward.user_data) if reward.user_data else None
    return RewardEvent(reward.tick, reward.value, reward.confidence, reward.sender, user_data)
