"""A gateway served in the test's event loop (uvicorn on a free port), beside a
deployment from :mod:`tests.harness`, and a small WebSocket client for its sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
import websockets

from tests.conftest import free_ports
from tests.harness import deployment
from trialog.bus.base import Bus
from trialog.bus.kafka import KafkaBus
from trialog.services.gateway.app import build_app, server_config
from trialog.services.gateway.door import Limits
from trialog.settings import Settings
from trialog.spec import Spec, load_spec


@contextlib.asynccontextmanager
async def gateway(
    bus: Bus, specs: list[Spec], limits: Limits | None = None, pages: Path | None = None
) -> AsyncIterator[str]:
    """Serve a gateway (uvicorn configured as ``trialog serve gateway`` does); yields its base URL (http://127.0.0.1:PORT)."""
    port = free_ports(1)[0]
    base = f"http://127.0.0.1:{port}"
    limits = limits or Limits()
    app = build_app(bus, {s.name: s for s in specs}, base_url=base, join_wait_s=30, limits=limits, pages=pages)
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, limits=limits))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        await app.state.gateway.feed.index_ready.wait()
        yield base
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@contextlib.asynccontextmanager
async def people_deployment(
    settings: Settings, spec_file, limits: Limits | None = None, pages: Path | None = None
) -> AsyncIterator[tuple]:
    """Services for a spec and a gateway beside them, on the real broker: (bus, controller, gateway URL)."""
    bus = KafkaBus(settings)
    spec = load_spec(spec_file, bus.store)
    async with deployment(bus, spec) as (_, ctl), gateway(KafkaBus(settings, bus.store), [spec], limits, pages) as base:
        yield bus, ctl, base


class Socket:
    """A JSON WebSocket client as a browser page would hold it."""

    def __init__(self, ws):
        self.ws = ws

    async def send(self, message: dict) -> None:
        await self.ws.send(json.dumps(message))

    async def next(self, *types: str, timeout: float = 30) -> dict:
        """The next message of one of ``types`` (others are skipped)."""
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if not types or msg["type"] in types:
                return msg


@contextlib.asynccontextmanager
async def socket(url: str, **options) -> AsyncIterator[Socket]:
    """``options``: websockets.connect's (``max_queue=1``: a page that stops reading)."""
    async with websockets.connect(url.replace("http://", "ws://", 1), open_timeout=30, **options) as ws:
        yield Socket(ws)


def seat_url(link: str, holder: str = "page-1", *, takeover: bool = False) -> str:
    """The seat socket behind a join link, for one holder (what play.js opens)."""
    base, _, query = link.partition("/play?")
    return f"{base}/ws/seat?{query}&holder={holder}" + ("&takeover=1" if takeover else "")


async def play(seat: Socket, move: str = "PAPER", *, until_tick: int | None = None) -> list[int]:
    """Answer every observation with ``move`` at once; stop at the end, when the seat is
    refused or taken over, or after ``until_tick``. Returns the ticks answered."""
    answered = []
    while True:
        msg = await seat.next("observation", "end", "replaced", "refused")
        if msg["type"] != "observation":
            return answered
        if not msg["final"]:
            await seat.send({"type": "action", "tick": msg["tick"], "action": move})
            answered.append(msg["tick"])
            if until_tick is not None and msg["tick"] >= until_tick:
                return answered
