"""Every route of the gateway, in one list: pages, their JSON API, the two sockets and
the static files. A new page is a file under ``static/`` and, if it needs data, an
entry here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from trialog.controller import join_link as link
from trialog.errors import TrialogError
from trialog.services.gateway.door import Refused
from trialog.services.gateway.sockets import seat_socket, watch_socket

if TYPE_CHECKING:
    from trialog.services.gateway.app import Gateway

STATIC = Path(__file__).resolve().parent / "static"


def page(name: str):
    async def serve(request: Request) -> Response:
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-cache"})

    return serve


def user_page(folder: Path, name: str) -> Path | None:
    """The file ``name`` inside the operator's pages folder, or None: missing, or a path
    that leads out of the folder (``..``, an absolute path, a link pointing elsewhere)."""
    try:
        path = (folder / name).resolve()
    except (OSError, ValueError):
        return None
    return path if path.is_relative_to(folder) and path.is_file() else None


async def pages(request: Request) -> Response:
    """A file from the operator's pages folder (``trialog serve gateway --pages DIR``): a
    page module for an environment and whatever it imports. Never a path from a record."""
    gw: Gateway = request.app.state.gateway
    path = user_page(gw.pages, request.path_params["name"]) if gw.pages is not None else None
    if path is None:
        return JSONResponse({"error": "no such page"}, status_code=404)
    media = "text/javascript" if path.suffix in (".js", ".mjs") else None
    return FileResponse(path, media_type=media, headers={"Cache-Control": "no-cache"})


async def lobby(request: Request) -> JSONResponse:
    """Trials waiting for people, trials running, and the seats each spec offers."""
    gw: Gateway = request.app.state.gateway
    trials = [
        {"trial": r.trial_id, "spec": r.spec, "status": r.status, "ticks": r.ticks, "reason": r.reason,
         "experiment": r.experiment, "phase": r.phase,
         "seats": gw.client_seats(r.spec, r.implementations), "created_ms": r.created_ms}
        for r in sorted(gw.feed.index.values(), key=lambda r: -r.created_ms)[:200]
    ]  # fmt: skip
    return JSONResponse({"trials": trials, "specs": gw.spec_seats()})


async def take_seat(request: Request) -> JSONResponse:
    """A join link for an **open seat**: a client seat of a trial still waiting for people
    (``pending``) that no page has joined. A seat with a holder, or any seat of a trial
    that has started, is reached only with the link its starter was given."""
    gw: Gateway = request.app.state.gateway
    body = await _json(request)
    if isinstance(body, Response):
        return body
    trial_id, actor = str(body.get("trial", ""))[:128], str(body.get("actor", ""))[:64]
    record = gw.feed.index.get(trial_id)
    if record is None or actor not in gw.client_seats(record.spec, record.implementations):
        return JSONResponse({"error": f"trial {trial_id!r} has no seat {actor!r} for a person"}, status_code=404)
    if record.status != "pending":
        error = (
            f"trial {trial_id} is {record.status}: its seats are reached only with the join links its starter was given"
        )
        return JSONResponse({"error": error}, status_code=409)
    try:
        is_open = await gw.seat_is_open(trial_id, actor)
    except (Refused, TrialogError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=503)
    if not is_open:
        return JSONResponse(
            {"error": f"seat {actor} of trial {trial_id} is taken: ask whoever holds it, or the trial's starter"},
            status_code=409,
        )
    return JSONResponse({"url": link(gw.base_url, gw.bus.trust.keyring, trial_id, actor)})


async def new_trial(request: Request) -> JSONResponse:
    """Start a trial of a spec with the asker in one client seat; answers its join link."""
    gw: Gateway = request.app.state.gateway
    body = await _json(request)
    if isinstance(body, Response):
        return body
    try:
        trial_id, url = await gw.start_with_person(str(body.get("spec", "")), str(body.get("actor", "")))
    except TrialogError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse({"trial": trial_id, "url": url})


async def _json(request: Request) -> dict | Response:
    """A JSON API request's body as an object; the answer to send instead when it is over
    the size limit, not JSON, or asked too often from one address."""
    gw: Gateway = request.app.state.gateway
    limit = gw.door.limits.body_bytes
    why = gw.door.speak(request.client.host if request.client else "?", None)
    if why is not None:
        return JSONResponse({"error": why}, status_code=429)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return JSONResponse({"error": f"a request body is at most {limit} bytes"}, status_code=413)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            return JSONResponse({"error": f"a request body is at most {limit} bytes"}, status_code=413)
    try:
        body = orjson.loads(bytes(data)) if data else {}
    except orjson.JSONDecodeError:
        return JSONResponse({"error": "the request body is not JSON"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the request body is a JSON object"}, status_code=400)
    return body


async def dashboard(request: Request) -> JSONResponse:
    """The live dashboard's data (see :mod:`trialog.services.gateway.dashboard`)."""
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
    Route("/pages/{name:path}", pages),
    Route("/livez", livez),
    Route("/readyz", readyz),
    WebSocketRoute("/ws/seat", seat_socket),
    WebSocketRoute("/ws/watch/{trial_id}", watch_socket),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]
