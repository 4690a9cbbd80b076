"""The two WebSockets: a **seat** (a person playing one client actor) and a
**watch** (a person following a trial, live or from the log, and judging it).

Both read the trial through :class:`~trialog.services.gateway.feed.Feed` from its first
event, so a socket opened on any gateway instance, at any time, knows what the
log knows: a reconnecting player gets the observation still waiting for an
answer; a watcher of an ended trial gets the whole trial.

Every socket passes :class:`~trialog.services.gateway.door.Door` first, and every message
it sends gets one answer: applied, an ``error`` with the reason (the socket stays
open), or a close with a code and a reason (docs/humans.md#limits lists them).
Nothing a page sends reaches the ASGI server as an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import PlainTextResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from trialog.errors import CodecError, TrialogError
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_SENDER,
    Action,
    ActorJoined,
    ActorTimeout,
    Event,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    TrialEnded,
    View,
    as_logged,
)
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.trial import dumps, reaches
from trialog.services.gateway.door import INTERNAL, LIMITED, REFUSED, Refused
from trialog.services.gateway.feed import CAUGHT_UP
from trialog.services.gateway.messages import TrialView
from trialog.services.gateway.seats import verify
from trialog.telemetry.logs import get_logger
from trialog.trust.join_tokens import JoinToken
from trialog.trust.seats import Seat, SeatBook, seat_headers

if TYPE_CHECKING:
    from trialog.services.gateway.app import Gateway

log = get_logger(__name__)

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # a judge's name, a page's holder id
FLOOD = 20  # messages over the rate in a row: the socket is closed instead of answered again
MAX_TICK = 2**31 - 1  # ticks travel as Avro ints
MAX_TRIAL_ID = 128  # longer is no trial's ID: refused before any lookup


class _SeatState:
    """A seat folded from the log: enough to resume it anywhere."""

    def __init__(self, seat: Seat):
        self.seat = seat
        self.trial: TrialView | None = None
        self.holders = SeatBook()  # who holds the seat, by the log's joins
        self.holder: str | None = None
        self.observation: Observation | None = None  # the latest one for this actor
        self.answered: set[int] = set()
        self.ended: TrialEnded | None = None
        self.view: View | None = None  # the latest, drawn first on a (re)connect
        self.holder_seen_ms = 0  # when the log last heard from the seat's holder (a takeover waits for silence)

    @property
    def mine(self) -> bool:
        return self.holder == self.seat.holder

    @property
    def waiting(self) -> Observation | None:
        """The observation still waiting for this person's action, if any."""
        obs = self.observation
        if obs is None or obs.final or obs.tick in self.answered or self.ended is not None:
            return None
        return obs

    def fold(self, event, record) -> None:
        me = self.seat.actor
        match event:
            case ActorJoined(actor=a) if a == me:
                holder, takeover = seat_headers(record.headers)
                refused, _ = self.holders.joined(self.seat.trial_id, a, holder, takeover)
                if refused is None:
                    self.holder = holder
                    self.holder_seen_ms = record.timestamp_ms
            case Action(actor=a) | Reward(sender=a) | Message(sender=a) if a == me and self.holder is not None:
                if seat_headers(record.headers)[0] == self.holder:
                    self.holder_seen_ms = max(self.holder_seen_ms, record.timestamp_ms)
                if isinstance(event, Action):
                    self.answered.add(event.tick)
            case Observation(actor=a) if a == me:
                if self.observation is None or event.tick >= self.observation.tick:
                    self.observation = event
            case View():
                self.view = event
            case TrialEnded():
                self.ended = event

    def concerns(self, event) -> bool:
        """Shown live to this seat's person?"""
        me = self.seat.actor
        cls = self.trial.class_of.get(me, "") if self.trial else ""
        match event:
            case View():
                return True
            case Observation(actor=a):
                return a == me
            case Reward(receiver=r, sender=s):
                return reaches(r, s, me, cls)
            case Message(sender=s, receivers=rs):
                return any(reaches(r, s, me, cls) for r in rs)
            case TrialEnded():
                return True
        return getattr(event, "actor", None) == me and event.KIND == ActorTimeout.KIND


class Page:
    """One socket as the gateway holds it: sends bounded in time, refusals with a reason."""

    def __init__(self, ws: WebSocket, gw: Gateway):
        self.ws = ws
        self.gw = gw
        self.address = ws.client.host if ws.client else "?"

    async def send(self, message: dict[str, Any]) -> None:
        """Send one message; a page that does not take it within the limit is dropped. The
        socket's protocol bounds the wait, where a send waits (``_socket_protocol`` in app.py):
        no timer for a send that does not, and no task per message (``wait_for``'s queued
        every send behind the callbacks ready by then, the tail's next Kafka fetch among them:
        a person's round trip took ~0.15 ms longer, docs/performance.md)."""
        if self.ws.application_state != WebSocketState.CONNECTED:
            raise WebSocketDisconnect(
                1006
            )  # closed meanwhile (a frame over the limit, the page left): nothing to send to
        try:
            await self.ws.send_text(orjson.dumps(message).decode())  # Refused (SLOW) past the limit
        except RuntimeError:  # the server closed the socket between the check and the send
            raise WebSocketDisconnect(1006) from None

    async def error(self, reason: str) -> None:
        await self.send({"type": "error", "reason": reason})

    async def write(self, record: Event | str) -> bool:
        """Write what the page asked for to the log, or answer why not: ``record`` is the
        checked record, or the reason it was refused. True when it was written."""
        if isinstance(record, str):
            await self.error(record)
            return False
        try:
            await self.gw.publish(record)
        except TrialogError as exc:
            await self.error(f"not written: {exc}")
            return False
        return True

    async def refuse(self, reason: str, code: int = REFUSED, *, held: bool = False) -> None:
        """Tell the page why (shown as it is), then close with ``code`` and the reason. Over a
        limit before the handshake, the answer is HTTP 429 with the reason, the least work a
        refusal can cost (a flood is refused at the door; a page retries with backoff)."""
        if self.ws.application_state == WebSocketState.CONNECTING and code == LIMITED:
            with contextlib.suppress(Exception):
                await self.ws.send_denial_response(PlainTextResponse(reason, status_code=429))
            return
        with contextlib.suppress(Exception):
            if self.ws.application_state == WebSocketState.CONNECTING:
                await self.ws.accept()
            async with asyncio.timeout(1.0):
                await self.ws.send_text(orjson.dumps({"type": "refused", "reason": reason, "held": held}).decode())
        with contextlib.suppress(Exception):
            await self.ws.close(code, _close_reason(reason))

    async def received(self, seat: tuple[str, str] | None):
        """The JSON objects the page sends, until it goes away. Anything else — a binary
        frame, text that is not a JSON object, JSON nested too deep, a message over the
        rate — is answered with an ``error`` and the socket stays open; a flood closes it."""
        door, over = self.gw.door, 0
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            why = door.speak(self.address, seat)
            if why is not None:
                over += 1
                if over >= FLOOD:
                    raise Refused(f"{why}; {FLOOD} in a row were refused", LIMITED)
                await self.error(why)
                continue
            over = 0
            text = message.get("text")
            if text is None:
                await self.error("send JSON objects in text frames")
                continue
            try:
                msg = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                await self.error(f"not JSON: {exc}")
                continue
            if not isinstance(msg, dict):
                await self.error("send JSON objects")
            elif _deeper(msg, door.limits.json_depth):
                await self.error(f"JSON nested deeper than {door.limits.json_depth} levels")
            else:
                yield msg


def _close_reason(reason: str) -> str:
    """A close frame's reason is at most 123 bytes of UTF-8."""
    data = reason.encode()
    return reason if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


def _deeper(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > limit:
                return True
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


async def _guarded(ws: WebSocket, gw: Gateway, play) -> None:
    """Run one socket: the door's refusals and people's mistakes are answered with a close
    code and a reason; a failure of the gateway itself is logged and closes 1011."""
    page = Page(ws, gw)
    try:
        gw.door.enter(page.address)
    except Refused as exc:  # at the door, before any Kafka work; the page is told why
        await page.refuse(exc.reason, exc.code)
        return
    try:
        await play(page)
    except Refused as exc:
        await page.refuse(exc.reason, exc.code, held=exc.held)
    except TrialogError as exc:  # a bad token, an unknown trial
        await page.refuse(str(exc))
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("a socket failed", path=ws.url.path, address=page.address)
        await page.refuse("the gateway failed on this socket (logged); reload the page", INTERNAL)
    finally:
        gw.door.leave(page.address)


async def seat_socket(ws: WebSocket) -> None:
    """``/ws/seat?token=T&holder=H[&takeover=1]``: play the seat the join token opens."""
    gw: Gateway = ws.app.state.gateway

    async def play(page: Page) -> None:
        claims: JoinToken = verify(gw.bus.trust.keyring, ws.query_params.get("token", ""))
        holder = ws.query_params.get("holder", "")
        if not NAME.match(holder):
            raise Refused("the page gave no holder id (letters, digits, . _ -): reload it")
        seat = Seat(claims.trial_id, claims.actor, holder, ws.query_params.get("takeover") == "1")
        gw.door.sit(seat.trial_id, seat.actor, seat.holder, seat.takeover)
        try:
            await ws.accept()
            others = functools.partial(_others, me=seat.actor)
            async with gw.feed.subscribe(seat.trial_id, timeout=gw.join_wait_s, skip=others) as records:
                await _play(page, gw, _SeatState(seat), records)
        finally:
            if gw.door.stand(seat.trial_id, seat.actor, seat.holder):
                gw.bus.trust.release(seat.trial_id, seat.actor, seat.holder)  # the holder's last page here closed

    await _guarded(ws, gw, play)


async def _play(page: Page, gw: Gateway, state: _SeatState, records) -> None:
    caught_up = asyncio.Event()
    await _until_either(
        _seat_from_log(page, gw, state, records, caught_up), _after(caught_up, lambda: _from_person(page, gw, state))
    )
    with contextlib.suppress(Exception):
        await page.ws.close()


async def _until_either(first, second) -> None:
    """Run both until one returns (the log side ends the trial, or the person leaves);
    errors of either are raised."""
    tasks = [asyncio.create_task(first), asyncio.create_task(second)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _after(event: asyncio.Event, start) -> None:
    await event.wait()
    await start()


def _page(gw: Gateway, trial: TrialView) -> str | None:
    """The page module that draws this trial, for its spec's environment (None: the shipped one)."""
    return gw.page_of(trial.resolved.spec, trial.resolved.environment)


async def _seat_from_log(page: Page, gw: Gateway, state: _SeatState, records, caught_up: asyncio.Event) -> None:
    async for record in records:  # without the other actors' observations and actions (``_others``)
        if record is CAUGHT_UP:
            _check_seat(state)
            if state.ended is None:
                await _take_seat(gw, state)
            await page.send(
                {
                    "type": "welcome",
                    "actor": state.seat.actor,
                    "holder": state.seat.holder,
                    **state.trial.describe(),
                    "page": _page(gw, state.trial),
                }
            )
            if state.ended is not None:
                await page.send(state.trial.message(state.ended))
                return
            if state.view is not None:
                await page.send(state.trial.message(state.view))
            if state.waiting is not None:
                await page.send(state.trial.message(state.waiting))
            caught_up.set()
            continue
        event = gw.decoded(record)
        if event is None:
            continue
        if isinstance(event, ResolvedTrial) and state.trial is None:
            state.trial = TrialView(gw.bus, event)
        state.fold(event, record)
        if caught_up.is_set() and state.holder is not None and not state.mine:
            await page.send({"type": "replaced", "reason": f"another page took seat {state.seat.actor} over"})
            return
        if caught_up.is_set():
            for shown in as_logged(event):
                if state.concerns(shown):
                    message = state.trial.message(shown)
                    if message is not None:
                        await page.send(message)
            if isinstance(event, TrialEnded):
                return


def _others(record, me: str) -> bool:
    """Another actor's observation or action, or a reward another sends to another actor by
    name: nothing a seat folds or shows, so neither queued, verified nor decoded here (in a
    two-actor trial with the environment's rewards, two thirds of a tick's records). The reward
    another actor's observation carries is that actor's by name: it never reaches this seat. Its
    headers are what its tag covers; one whose body says otherwise does not count anywhere
    (its owner dead-letters it)."""
    kind = record.header(HEADER_KIND)
    if kind == Observation.KIND:
        return record.header(HEADER_RECEIVER) != me
    if kind == Reward.KIND:  # a seat folds the rewards it sends, shows those that reach it
        receiver = record.header(HEADER_RECEIVER)
        return (
            receiver is not None
            and receiver not in (me, "*")
            and not receiver.endswith(".*")
            and record.header(HEADER_SENDER) != me
        )
    return kind == Action.KIND and record.header(HEADER_SENDER) != me


async def _take_seat(gw: Gateway, state: _SeatState) -> None:
    """Join (first holder, or a takeover) or resume (same holder) — the log decides who holds it.
    A takeover needs the link and a holder silent for ``takeover_after_s`` (by the log: the
    holder may be on another gateway instance); on this instance the door has already
    refused it while the holder has a page open here."""
    seat = state.seat
    if state.holder is not None and not state.mine:
        if not seat.takeover:
            raise Refused(f"seat {seat.actor} is held by another page; take it over to play here", REFUSED, held=True)
        quiet_s = time.time() - state.holder_seen_ms / 1000
        wait_s = gw.door.limits.takeover_after_s
        if quiet_s < wait_s:
            raise Refused(f"seat {seat.actor} is played by another page, heard from {quiet_s:.0f} s ago; "
                          f"it can be taken over after {wait_s:g} s of silence", REFUSED, held=True)  # fmt: skip
    gw.bus.trust.hold(seat)  # what this gateway writes for the seat carries its key and holder
    if not state.mine:
        implementation = state.trial.resolved.actor(seat.actor).implementation
        await gw.publish(ActorJoined(seat.trial_id, actor=seat.actor, implementation=implementation))
        state.holder = seat.holder  # the log will say so too, when the join is read back


def _check_seat(state: _SeatState) -> None:
    if state.trial is None:
        raise Refused(f"trial {state.seat.trial_id} has not started")
    spec = next((a for a in state.trial.resolved.actors if a.name == state.seat.actor), None)
    if spec is None or not spec.client:
        raise Refused(f"trial {state.seat.trial_id} has no seat for a person named {state.seat.actor!r}")


def _tick(value: Any) -> int | None:
    """A tick a page sent, if it is one (JSON ``true`` is not 1; a tick fits Avro's int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TICK else None


async def _from_person(page: Page, gw: Gateway, state: _SeatState) -> None:
    """What the person sends: actions, rewards and messages as their own actor, pings."""
    me, tid = state.seat.actor, state.seat.trial_id
    async for msg in page.received((tid, me)):
        kind = msg.get("type")
        if kind == "ping":
            t = msg.get("t")
            await page.send(
                {"type": "pong", "t": t if isinstance(t, int | float | str) and not isinstance(t, bool) else None}
            )
            continue
        if kind not in ("action", "reward", "message"):
            await page.error(f"unknown message type {str(kind)[:64]!r}: a seat sends action, reward, message or ping")
            continue
        if not state.mine or gw.bus.trust.holder(tid, me) != state.seat.holder:
            await page.error(f"seat {me} is not held by this page")
            continue
        answer = _seat_record(msg, kind, state)
        if await page.write(answer) and isinstance(answer, Action):
            state.answered.add(answer.tick)


def _seat_record(msg: dict[str, Any], kind: str, state: _SeatState) -> Action | Reward | Message | str:
    """The record a seat's message asks for, checked, or the reason it is refused."""
    me, tid, trial = state.seat.actor, state.seat.trial_id, state.trial
    current = state.observation.tick if state.observation else 0
    if kind == "action":
        tick, waiting = _tick(msg.get("tick")), state.waiting
        if tick is None or waiting is None or tick != waiting.tick:
            return f"no observation waiting for an action at tick {str(msg.get('tick'))[:32]}"
        try:
            payload = trial.encode_action(me, msg.get("action"))
        except (CodecError, ValueError, TypeError, OverflowError) as exc:
            return f"not a valid action: {str(exc)[:200]}"
        return Action(tid, tick=tick, actor=me, payload=payload)
    if kind == "reward":
        return _reward(msg, trial, sender=me, current_tick=current)
    receivers, payload = msg.get("receivers"), msg.get("payload")
    if (
        not isinstance(payload, dict)
        or not isinstance(receivers, list)
        or not receivers
        or not all(isinstance(r, str) for r in receivers)
    ):
        return "a message has receivers (a list of actor names, class.* or *) and a payload (a JSON object)"
    mid = msg.get("id", "")
    if not isinstance(mid, str | int) or isinstance(mid, bool) or len(str(mid)) > 64:
        return "a message id is a string or number of at most 64 characters"
    message = Message(
        tid,
        tick=current,
        sender=me,
        receivers=tuple(receivers),
        message_id=f"{me}-{current}-{mid}",
        payload=dumps(payload),
    )
    return message_problem(message, current, trial.class_of) or message


def _reward(msg: dict[str, Any], trial: TrialView, *, sender: str, current_tick: int) -> Reward | str:
    """A reward asked for by a person, checked (or the reason it is refused): the log's rule
    (:func:`trialog.protocol.owners.reward_problem`: within bounds, for a tick up to the current
    one, never to its sender, not even through ``*`` or its class), with a person's
    confidence in (0, 1]."""
    receiver, tick, value, confidence = (
        msg.get("receiver"),
        msg.get("tick"),
        msg.get("value"),
        msg.get("confidence", 1.0),
    )
    if not isinstance(receiver, str) or len(receiver) > 200:
        return "a reward has a receiver: an actor's name, class.* or *"
    if _tick(tick) is None:
        return f"tick must be a whole number from 0 to the current tick {current_tick}"
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (value, confidence)):
        return "value and confidence must be numbers"
    if not 0 < confidence <= 1:
        return "confidence must be in (0, 1]"
    reward = Reward(
        trial.resolved.trial_id,
        tick=tick,
        receiver=receiver,
        value=float(value),
        confidence=float(confidence),
        sender=sender,
    )
    return reward_problem(reward, current_tick, trial.class_of) or reward


async def watch_socket(ws: WebSocket) -> None:
    """Every event of a trial from its first (history, then live), and the judge's rewards."""
    gw: Gateway = ws.app.state.gateway

    async def play(page: Page) -> None:
        trial_id = ws.path_params["trial_id"]
        if len(trial_id) > MAX_TRIAL_ID:
            raise Refused(f"no trial has an ID of {len(trial_id)} characters", REFUSED)
        gw.door.watch(trial_id)
        try:
            await ws.accept()
            state = _Watched()
            async with gw.feed.subscribe(trial_id, timeout=10) as records:
                await _until_either(
                    _watch_from_log(page, gw, state, records),
                    _after(state.trial_known, lambda: _judge(page, gw, state)),
                )
        finally:
            gw.door.unwatch(trial_id)

    await _guarded(ws, gw, play)


class _Watched:
    def __init__(self) -> None:
        self.trial: TrialView | None = None
        self.trial_known = asyncio.Event()
        self.tick = 0


async def _watch_from_log(page: Page, gw: Gateway, state: _Watched, records) -> None:
    async for record in records:
        if record is CAUGHT_UP:
            await page.send({"type": "live"})
            continue
        event = gw.decoded(record)
        if event is None:
            continue
        if isinstance(event, ResolvedTrial):
            if state.trial is None:
                state.trial = TrialView(gw.bus, event)
                await page.send({"type": "trial", **state.trial.describe(), "page": _page(gw, state.trial)})
                state.trial_known.set()
            continue
        if state.trial is None:
            continue
        state.tick = max(state.tick, getattr(event, "tick", 0))
        for shown in as_logged(event):
            message = state.trial.message(shown)
            if message is not None:
                await page.send(message)


async def _judge(page: Page, gw: Gateway, state: _Watched) -> None:
    async for msg in page.received(None):
        if msg.get("type") != "reward":
            await page.error("a watcher sends only rewards: {type: reward, judge, receiver, tick, value, confidence}")
            continue
        name = msg.get("judge")
        if not isinstance(name, str) or not NAME.match(name):
            await page.error("give your name (letters, digits, . _ -; up to 64) to judge")
            continue
        reward = _reward(msg, state.trial, sender=f"person:{name}", current_tick=state.tick)
        if await page.write(reward):
            await page.send(
                {"type": "rewarded", "tick": reward.tick, "receiver": reward.receiver, "value": reward.value}
            )
