"""The two WebSockets: a **seat** (a person playing one client actor) and a
**watch** (a person following a trial, live or from the log, and judging it).

Both read the trial through :class:`~services.gateway.feed.Feed` from its first
event, so a socket opened on any gateway instance, at any time, knows what the
log knows: a reconnecting player gets the observation still waiting for an
answer; a watcher of an ended trial gets the whole trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from services.gateway.feed import CAUGHT_UP
from services.gateway.messages import TrialView, decode
from services.gateway.seats import verify
from trialog.errors import CodecError, TrialogError
from trialog.events import (
    Action,
    ActorJoined,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    TrialEnded,
    View,
)
from trialog.logs import get_logger
from trialog.runtime.trial import dumps, matches
from trialog.trust import JoinToken, Seat, SeatBook, seat_headers

if TYPE_CHECKING:
    from services.gateway.app import Gateway

log = get_logger(__name__)

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # a judge's name, a page's holder id
REFUSED = 4403  # WebSocket close code for a refused seat (application range 4000-4999)


class SeatRefused(TrialogError):
    """A join was refused; the message is shown on the page as it is. ``held``: the seat
    is someone else's, and the page may offer to take it over."""

    def __init__(self, message: str, *, held: bool = False):
        super().__init__(message)
        self.held = held


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

    def fold(self, event, headers) -> None:
        me = self.seat.actor
        match event:
            case ActorJoined(actor=a) if a == me:
                holder, takeover = seat_headers(headers)
                refused, _ = self.holders.joined(self.seat.trial_id, a, holder, takeover)
                if refused is None:
                    self.holder = holder
            case Observation(actor=a) if a == me:
                if self.observation is None or event.tick >= self.observation.tick:
                    self.observation = event
            case Action(actor=a) if a == me:
                self.answered.add(event.tick)
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
            case Reward(receiver=r):
                return matches(r, me, cls)
            case Message(sender=s, receivers=rs):
                return s != me and any(matches(r, me, cls) for r in rs)
            case TrialEnded():
                return True
        return getattr(event, "actor", None) == me and event.KIND == "actor.timeout"


async def seat_socket(ws: WebSocket) -> None:
    """``/ws/seat?token=T&holder=H[&takeover=1]``: play the seat the join token opens."""
    gw: Gateway = ws.app.state.gateway
    await ws.accept()
    seat: Seat | None = None
    try:
        claims: JoinToken = verify(gw.bus.trust.keyring, ws.query_params.get("token", ""))
        holder = ws.query_params.get("holder", "")
        if not NAME.match(holder):
            raise SeatRefused("the page gave no holder id (letters, digits, . _ -): reload it")
        seat = Seat(claims.trial_id, claims.actor, holder, ws.query_params.get("takeover") == "1")
        async with gw.feed.subscribe(seat.trial_id, timeout=gw.join_wait_s) as records:
            await _play(ws, gw, _SeatState(seat), records)
    except SeatRefused as exc:
        await _refuse(ws, str(exc), held=exc.held)
    except TrialogError as exc:  # a bad token, an unknown trial
        await _refuse(ws, str(exc))
    except WebSocketDisconnect:
        pass
    finally:
        if seat is not None:
            gw.bus.trust.release(seat.trial_id, seat.actor, seat.holder)


async def _refuse(ws: WebSocket, reason: str, *, held: bool = False) -> None:
    with contextlib.suppress(Exception):
        await ws.send_json({"type": "refused", "reason": reason, "held": held})
        await ws.close(REFUSED)


async def _play(ws: WebSocket, gw: Gateway, state: _SeatState, records) -> None:
    caught_up = asyncio.Event()
    await _until_either(_seat_from_log(ws, gw, state, records, caught_up), _after(caught_up, lambda: _from_person(ws, gw, state)))
    with contextlib.suppress(Exception):
        await ws.close()


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


async def _seat_from_log(ws: WebSocket, gw: Gateway, state: _SeatState, records, caught_up: asyncio.Event) -> None:
    async for record in records:
        if record is CAUGHT_UP:
            _check_seat(state)
            if state.ended is None:
                await _take_seat(gw, state)
            await ws.send_json({"type": "welcome", "actor": state.seat.actor, "holder": state.seat.holder, **state.trial.describe()})
            if state.ended is not None:
                await ws.send_json(state.trial.message(state.ended))
                return
            if state.view is not None:
                await ws.send_json(state.trial.message(state.view))
            if state.waiting is not None:
                await ws.send_json(state.trial.message(state.waiting))
            caught_up.set()
            continue
        event = decode(gw.bus, record)
        if event is None:
            continue
        if isinstance(event, ResolvedTrial) and state.trial is None:
            state.trial = TrialView(gw.bus, event)
        state.fold(event, record.headers)
        if caught_up.is_set() and state.holder is not None and not state.mine:
            await ws.send_json({"type": "replaced", "reason": f"another page took seat {state.seat.actor} over"})
            return
        if caught_up.is_set() and state.concerns(event):
            message = state.trial.message(event)
            if message is not None:
                await ws.send_json(message)
            if isinstance(event, TrialEnded):
                return


async def _take_seat(gw: Gateway, state: _SeatState) -> None:
    """Join (first holder, or a takeover) or resume (same holder) — the log decides who holds it."""
    seat = state.seat
    if state.holder is not None and not state.mine and not seat.takeover:
        raise SeatRefused(f"seat {seat.actor} is held by another page; take it over to play here", held=True)
    gw.bus.trust.hold(seat)  # what this gateway writes for the seat carries its key and holder
    if not state.mine:
        implementation = state.trial.resolved.actor(seat.actor).implementation
        await gw.publish(ActorJoined(seat.trial_id, actor=seat.actor, implementation=implementation))
        state.holder = seat.holder  # the log will say so too, when the join is read back


def _check_seat(state: _SeatState) -> None:
    if state.trial is None:
        raise SeatRefused(f"trial {state.seat.trial_id} has not started")
    spec = next((a for a in state.trial.resolved.actors if a.name == state.seat.actor), None)
    if spec is None or not spec.client:
        raise SeatRefused(f"trial {state.seat.trial_id} has no seat for a person named {state.seat.actor!r}")


async def _received(ws: WebSocket):
    """The JSON objects a page sends, until it goes away; anything else is answered with an error."""
    while True:
        try:
            msg = await ws.receive_json()
        except (WebSocketDisconnect, RuntimeError):
            return
        except ValueError:
            msg = None
        if isinstance(msg, dict):
            yield msg
        else:
            await ws.send_json({"type": "error", "reason": "send JSON objects"})


async def _from_person(ws: WebSocket, gw: Gateway, state: _SeatState) -> None:
    """What the person sends: actions, rewards and messages as their own actor, pings."""
    me, tid = state.seat.actor, state.seat.trial_id
    async for msg in _received(ws):
        kind = msg.get("type")
        if kind == "ping":
            await ws.send_json({"type": "pong", "t": msg.get("t")})
        elif kind == "action":
            tick = msg.get("tick")
            waiting = state.waiting
            if waiting is None or tick != waiting.tick:
                await ws.send_json({"type": "error", "reason": f"no observation waiting for an action at tick {tick}"})
                continue
            try:
                payload = state.trial.encode_action(me, msg.get("action"))
            except CodecError as exc:
                await ws.send_json({"type": "error", "reason": f"not a valid action: {exc}"})
                continue
            state.answered.add(tick)
            await gw.publish(Action(tid, tick=tick, actor=me, payload=payload))
        elif kind == "reward":
            reward = _reward(msg, state.trial, sender=me, current_tick=state.observation.tick if state.observation else 0)
            if isinstance(reward, str):
                await ws.send_json({"type": "error", "reason": reward})
            else:
                await gw.publish(reward)
        elif kind == "message" and isinstance(msg.get("payload"), dict) and isinstance(msg.get("receivers"), list):
            tick = state.observation.tick if state.observation else 0
            await gw.publish(Message(tid, tick=tick, sender=me, receivers=tuple(str(r) for r in msg["receivers"]),
                                     message_id=f"{me}-{tick}-{msg.get('id', '')}", payload=dumps(msg["payload"])))  # fmt: skip
        else:
            await ws.send_json({"type": "error", "reason": f"unknown message type {kind!r}"})


def _reward(msg: dict[str, Any], trial: TrialView, *, sender: str, current_tick: int) -> Reward | str:
    """A reward asked for by a person, checked (or the reason it is refused)."""
    receiver, tick, value, confidence = msg.get("receiver"), msg.get("tick"), msg.get("value"), msg.get("confidence", 1.0)
    names = set(trial.class_of)
    classes = {f"{c}.*" for c in trial.class_of.values()}
    if receiver not in names | classes | {"*"} or receiver == sender:
        return f"no actor {receiver!r} to reward in this trial"
    if not isinstance(tick, int) or isinstance(tick, bool) or not 0 <= tick <= current_tick:
        return f"tick must be a whole number from 0 to the current tick {current_tick}"
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in (value, confidence)):
        return "value and confidence must be finite numbers"
    if not 0 < confidence <= 1:
        return "confidence must be in (0, 1]"
    return Reward(trial.resolved.trial_id, tick=tick, receiver=receiver, value=float(value), confidence=float(confidence), sender=sender)


async def watch_socket(ws: WebSocket) -> None:
    """Every event of a trial from its first (history, then live), and the judge's rewards."""
    gw: Gateway = ws.app.state.gateway
    await ws.accept()
    state = _Watched()
    try:
        async with gw.feed.subscribe(ws.path_params["trial_id"], timeout=10) as records:
            await _until_either(_watch_from_log(ws, gw, state, records), _after(state.trial_known, lambda: _judge(ws, gw, state)))
    except TrialogError as exc:
        await _refuse(ws, str(exc))
    except WebSocketDisconnect:
        pass


class _Watched:
    def __init__(self) -> None:
        self.trial: TrialView | None = None
        self.trial_known = asyncio.Event()
        self.tick = 0


async def _watch_from_log(ws: WebSocket, gw: Gateway, state: _Watched, records) -> None:
    async for record in records:
        if record is CAUGHT_UP:
            await ws.send_json({"type": "live"})
            continue
        event = decode(gw.bus, record)
        if event is None:
            continue
        if isinstance(event, ResolvedTrial):
            if state.trial is None:
                state.trial = TrialView(gw.bus, event)
                await ws.send_json({"type": "trial", **state.trial.describe()})
                state.trial_known.set()
            continue
        if state.trial is None:
            continue
        state.tick = max(state.tick, getattr(event, "tick", 0))
        message = state.trial.message(event)
        if message is not None:
            await ws.send_json(message)


async def _judge(ws: WebSocket, gw: Gateway, state: _Watched) -> None:
    async for msg in _received(ws):
        if msg.get("type") != "reward":
            await ws.send_json({"type": "error", "reason": "a watcher sends only rewards: {type: reward, judge, receiver, tick, value, confidence}"})
            continue
        name = str(msg.get("judge", ""))
        if not NAME.match(name):
            await ws.send_json({"type": "error", "reason": "give your name (letters, digits, . _ -; up to 64) to judge"})
            continue
        reward = _reward(msg, state.trial, sender=f"person:{name}", current_tick=state.tick)
        if isinstance(reward, str):
            await ws.send_json({"type": "error", "reason": reward})
            continue
        await gw.publish(reward)
        await ws.send_json({"type": "rewarded", "tick": reward.tick, "receiver": reward.receiver, "value": reward.value})
