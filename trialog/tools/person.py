"""Stand-in people: a scripted player in a seat, through the gateway's seat socket as a page would.

A person plays a seat of a trial in the browser; a *stand-in* plays it the same way, from a
program: it opens the seat's socket behind the join link (``/ws/seat?token=T&holder=H``, see
docs/humans.md, "The socket protocol"), reads ``welcome``, and answers each ``observation``
that waits for an action with ``{"type": "action", "tick": t, "action": value}`` — so the
gateway checks it, writes it under the seat's key and the log holds it like a person's.
``trialog teaming --scripted`` uses it to rehearse a teaming evaluation without people.

A scripted person is a function ``person(page) -> action`` (or a coroutine function) given a :class:`Page`: what a
page has received so far (the welcome with the action schema, the latest observation
message, the latest view). :func:`random_person` is the default: a random valid action from
the seat's action schema (its ``trialog.space``), for any environment.

Needs the ``gateway`` extra's ``websockets``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trialog.errors import TrialogError
from trialog.protocol.spaces import action_space_of, as_json, sample_action

__all__ = [
    "Page",
    "Person",
    "SeatResult",
    "load_person",
    "play_seat",
    "random_person",
    "seat_players",
    "seat_socket_url",
    "until_ended",
]


@dataclass
class Page:
    """What a seat's page has received: the welcome, the latest observation and view."""

    welcome: Mapping[str, Any]
    observation: Mapping[str, Any] = field(default_factory=dict)  # the message: tick, actor, final, observation
    view: Any = None  # the latest view (None when the environment has none)
    rng: np.random.Generator = field(default_factory=np.random.default_rng)

    @property
    def actor(self) -> str:
        return str(self.welcome["actor"])

    @property
    def action_schema(self) -> Any:
        """The Avro action schema (parsed JSON) of this seat's actor class."""
        me = next(a for a in self.welcome["actors"] if a["name"] == self.actor)
        schema = self.welcome["classes"][me["class"]]["action_schema"]
        return json.loads(schema) if isinstance(schema, str) else schema

    @property
    def tick(self) -> int:
        return int(self.observation["tick"])


Person = Callable[[Page], Any]


def random_person(page: Page) -> Any:
    """A random valid action of the seat's action schema (an ``action_mask`` in the
    observation, when the page is sent observations, limits a Discrete choice)."""
    space = action_space_of(page.action_schema)
    return as_json(sample_action(space, page.rng, page.observation.get("observation")))


def load_person(name: str) -> Person:
    """A scripted person named ``module:function``."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise TrialogError(f"a scripted person is named module:function, got {name!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise TrialogError(f"cannot load the scripted person {name!r}: {exc}") from exc
    if not callable(fn):
        raise TrialogError(f"the scripted person {name!r} is not a function")
    return fn


def seat_players(ctl, spec, trial_id: str, implementations: Mapping[str, str], person: Person | None, *, seed: int):
    """A trial's seats of people (its client implementations, ``Spec.seats``): their join links,
    and — when a scripted ``person`` stands in — the coroutines that play them through the
    gateway (:func:`play_seat`), one per seat. Call it right after the trial is started."""
    links = ctl.join_links(trial_id, spec.seats(implementations))
    if person is None:
        return links, []
    return links, [play_seat(link, person, holder=f"stand-in-{actor}", seed=seed) for actor, link in links.items()]


async def until_ended(ctl, spec, preset, trial_id: str, setup: Mapping[str, Any], *, seed: int, quiet: bool):
    """How the trial ended (:class:`trialog.controller.TrialResult`: its ticks and returns), its
    seats of people (if any) played meanwhile by the preset's scripted
    ``person`` through the gateway, or their join links printed for people to open (``preset``:
    a :class:`trialog.learn.train.Preset`, its ``person`` and ``name``)."""
    person = load_person(preset.person) if preset.person else None
    links, stand_ins = seat_players(ctl, spec, trial_id, setup.get("implementations", {}), person, seed=seed)
    for actor, link in links.items() if person is None and not quiet else ():
        print(f"{preset.name}: trial {trial_id}: seat {actor}: open {link}", file=sys.stderr, flush=True)
    ended, *_ = await asyncio.gather(ctl.wait_result(trial_id, timeout=600), *stand_ins)
    return ended


def seat_socket_url(link: str, holder: str) -> str:
    """The seat socket behind a join link (``http://…/play?token=T``), for one holder: what the play page opens."""
    base, sep, query = link.partition("/play?")
    if not sep:
        raise TrialogError(f"not a join link: {link!r}")
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return f"{base}/ws/seat?{query}&holder={holder}"


@dataclass
class SeatResult:
    """How a stand-in's seat went."""

    actor: str
    actions: int = 0  # actions sent
    errors: list[str] = field(default_factory=list)  # the gateway's `error` answers
    end: Mapping[str, Any] | None = None  # the `end` message


async def play_seat(link: str, person: Person, *, holder: str, seed: int = 0, timeout: float = 120) -> SeatResult:
    """Hold the seat of a join link and play it with ``person`` until the trial ends.
    ``timeout``: the longest wait for any message. Raises :class:`TrialogError` when the
    seat is refused or taken over."""
    import websockets

    url = seat_socket_url(link, holder)
    async with websockets.connect(url, open_timeout=30, max_size=None) as ws:
        page: Page | None = None
        result = SeatResult(actor="")
        while True:
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            except websockets.ConnectionClosed as exc:
                raise TrialogError(f"seat socket closed before the end: {exc}") from exc
            kind = msg.get("type")
            if kind == "welcome":
                rng = np.random.default_rng([seed % 2**63, zlib.crc32(str(msg["actor"]).encode())])
                page = Page(msg, rng=rng)
                result.actor = page.actor
            elif kind in ("refused", "replaced"):
                raise TrialogError(f"seat {result.actor or link}: {kind}: {msg.get('reason')}")
            elif kind == "view" and page is not None:
                page.view = msg.get("view")
            elif kind == "error":
                result.errors.append(str(msg.get("reason")))
            elif kind == "end":
                result.end = msg
                return result
            elif kind == "observation" and page is not None and msg.get("actor", page.actor) == page.actor:
                page.observation = msg
                if not msg.get("final"):
                    action = person(page)
                    if inspect.isawaitable(action):
                        action = await action
                    await ws.send(json.dumps({"type": "action", "tick": msg["tick"], "action": action}))
                    result.actions += 1
