"""Every route of the gateway, in one list: pages, their JSON API, the two sockets and
the static files. A new page is a file under ``static/`` and, if it needs data, an
entry here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from trialog.controller import join_link as link
from services.gateway.sockets import seat_socket, watch_socket
from trialog.errors import TrialogError

if TYPE_CHECKING:
    from services.gateway.app import Gateway

STATIC = Path(__file__).resolve().parent / "static"


def page(name: str):
    async def serve(request: Request) -> Response:
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-cache"})

    return serve


async def lobby(request: Request) -> JSONResponse:
    """Trials waiting for people, trials running, and the seats each spec offers."""
    gw: Gateway = request.app.state.gateway
    trials = [
        {"trial": r.trial_id, "spec": r.spec, "status": r.status, "ticks": r.ticks, "reason": r.reason,
         "seats": gw.client_seats(r.spec, r.implementations), "created_ms": r.created_ms}
        for r in sorted(gw.feed.index.values(), key=lambda r: -r.created_ms)[:200]
    ]  # fmt: skip
    return JSONResponse({"trials": trials, "specs": gw.spec_seats()})


async def take_seat(request: Request) -> JSONResponse:
    """A join link for one seat of a trial that waits for people."""
    gw: Gateway = request.app.state.gateway
    body = await _json(request)
    trial_id, actor = str(body.get("trial", "")), str(body.get("actor", ""))
    record = gw.feed.index.get(trial_id)
    if record is None or actor not in gw.client_seats(record.spec, record.implementations):
        return JSONResponse({"error": f"trial {trial_id!r} has no seat {actor!r} for a person"}, status_code=404)
    return JSONResponse({"url": link(gw.base_url, gw.bus.trust.keyring, trial_id, actor)})


async def new_trial(request: Request) -> JSONResponse:
    """Start a trial of a spec with the asker in one client seat; answers its join link."""
    gw: Gateway = request.app.state.gateway
    body = await _json(request)
    try:
        trial_id, url = await gw.start_with_person(str(body.get("spec", "")), str(body.get("actor", "")))
    except TrialogError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse({"trial": trial_id, "url": url})


async def _json(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def dashboard(request: Request) -> JSONResponse:
    """The live dashboard's data (see :mod:`services.gateway.dashboard`)."""
    gw: Gateway = request.app.state.gateway
    return JSONResponse(gw.dashboard.snapshot(gw.feed.index), headers={"Cache-Control": "no-store"})


async def livez(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """Ready once the trials index is read: before that the lobby would be empty."""
    gw: Gateway = request.app.state.gateway
    ready = gw.feed.index_ready.is_set()
    return JSONResponse({"status": "ok" if ready else "unavailable"}, status_code=200 if ready else 503)


ROUTES = [
    Route("/", page("lobby.html")),
    Route("/play", page("play.html")),
    Route("/watch/{trial_id}", page("watch.html")),
    Route("/dashboard", page("dashboard.html")),
    Route("/api/dashboard", dashboard),
    Route("/api/lobby", lobby),
    Route("/api/seat", take_seat, methods=["POST"]),
    Route("/api/trials", new_trial, methods=["POST"]),
    Route("/livez", livez),
    Route("/readyz", readyz),
    WebSocketRoute("/ws/seat", seat_socket),
    WebSocketRoute("/ws/watch/{trial_id}", watch_socket),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]
