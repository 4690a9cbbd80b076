"""Liveness and readiness over a tiny HTTP server, for Kubernetes probes.

Every long-running service (orchestrator, environment host, actor host, logger)
owns one :class:`Health` and serves it with :func:`serve_health`; the Helm chart
points its probes at ``GET /livez`` and ``GET /readyz`` on port 8080.

What the two answers mean:

* **Live** — the service's main loop called :meth:`Health.beat` within the last
  ``liveness_timeout_s`` seconds. A loop that is stuck (deadlocked, blocked on a
  synchronous call, starved) stops beating, and Kubernetes restarts the pod. A
  service that is merely waiting for Kafka is still live: it beats while it waits.
* **Ready** — connected to Kafka and its consumer owns its partitions
  (assignment received, catch-up from the log finished): the service would act
  on a trial's next event right now. The service calls ``set_ready(True)`` when
  its consumer's assignment has been rebuilt from the log (I-7), and
  ``set_ready(False, reason)`` when it loses the connection or a rebalance
  revokes its partitions. An empty assignment counts: an instance with no
  partitions (more instances than partitions) holds its share, nothing, and is
  ready; otherwise a rolling update would wait for it forever. A service that
  is not live is not ready either.

Readiness gates no traffic (no Service routes to these pods: all work arrives
through Kafka). It paces rolling updates, counts for PodDisruptionBudgets and
tells operators (``kubectl rollout status``) when a new instance has really
taken over its share of the partitions.

The same port answers ``GET /metrics`` with the process's Prometheus metrics
(:mod:`trialog.telemetry.metrics`), so one port serves probes and scrapes.

The server is deliberately small (asyncio streams, HTTP/1.1 with
``Connection: close``): probes send one small GET and read one small answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import time
from collections.abc import Callable
from http import HTTPStatus

from trialog.errors import TrialogError

__all__ = ["Health", "serve_health"]

# A probe's request is a request line and a few short headers; anything bigger
# or slower is not a probe, and must not tie up the service's event loop.
_MAX_REQUEST_BYTES = 8192
_READ_TIMEOUT_S = 5.0


class Health:
    """The health state of one service, updated by its main loop.

    ``clock`` is injectable so tests can move time without sleeping.
    """

    def __init__(self, liveness_timeout_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        if liveness_timeout_s <= 0:
            raise ValueError(f"liveness_timeout_s must be positive, got {liveness_timeout_s}")
        self.liveness_timeout_s = liveness_timeout_s
        self._clock = clock
        # Creation counts as a beat, so a service has a full timeout to start its loop.
        self._last_beat = clock()
        self._ready = False
        self._reason = "starting"

    def beat(self) -> None:
        """Record that the main loop is making progress (call it every iteration)."""
        self._last_beat = self._clock()

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Say whether the service is connected and owns its partitions, and why not."""
        self._ready = ready
        self._reason = reason

    def liveness(self) -> tuple[bool, str]:
        """``(live, reason)``: live when the last beat is recent enough."""
        age = self._clock() - self._last_beat
        if age <= self.liveness_timeout_s:
            return True, ""
        return False, f"no heartbeat for {age:.1f}s (limit {self.liveness_timeout_s:g}s)"

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``: ready when set ready and live."""
        live, why = self.liveness()
        if not live:
            return False, f"not live: {why}"
        if not self._ready:
            return False, self._reason or "not ready"
        return True, self._reason

    def status(self) -> dict[str, object]:
        """Everything at once, for logs and debugging."""
        live, live_reason = self.liveness()
        ready, ready_reason = self.readiness()
        return {
            "live": live,
            "ready": ready,
            "liveness_reason": live_reason,
            "readiness_reason": ready_reason,
            "seconds_since_beat": round(self._clock() - self._last_beat, 3),
            "liveness_timeout_s": self.liveness_timeout_s,
        }


async def serve_health(health: Health, host: str = "127.0.0.1", port: int = 8080) -> asyncio.AbstractServer:
    """Start answering ``GET /livez`` and ``GET /readyz`` for ``health``; return the server.

    Both answer 200 ``{"status": "ok", "reason": ...}`` or 503
    ``{"status": "unavailable", "reason": ...}``; ``HEAD`` is accepted too, any
    other method on those paths gets 405, any other path 404. ``port=0`` binds
    a free port chosen by the OS (read it from ``server.sockets``); a service
    whose ``--health-port`` is 0 does not call this at all. Close the server
    with ``server.close(); await server.wait_closed()``.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        content_type = "application/json"
        try:
            status, body, head_only = await _respond(health, reader)
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, ValueError):
            status, body, head_only = HTTPStatus.BAD_REQUEST, {"status": "error", "reason": "bad request"}, False
        except ConnectionError:
            writer.close()
            return
        if isinstance(body, bytes):  # /metrics
            from trialog.telemetry.metrics import CONTENT_TYPE_LATEST

            payload, content_type = body, CONTENT_TYPE_LATEST
        else:
            payload = json.dumps(body).encode()
        allow = "Allow: GET, HEAD\r\n" if status is HTTPStatus.METHOD_NOT_ALLOWED else ""
        head = (
            f"HTTP/1.1 {status.value} {status.phrase}\r\n"
            f"{allow}"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        # A probe that hung up early is no reason to log an error in the service.
        with contextlib.suppress(ConnectionError):
            writer.write(head if head_only else head + payload)
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    try:
        return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST_BYTES)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise TrialogError(f"cannot serve health on {host}:{port}: {exc}") from exc
        raise TrialogError(
            f"the health port {port} on {host} is taken (another service on this host?): "
            "give this one --health-port N, or --health-port 0 for none"
        ) from exc


async def _respond(health: Health, reader: asyncio.StreamReader) -> tuple[HTTPStatus, dict[str, str] | bytes, bool]:
    """Read one request and decide the answer: ``(status, json body or metrics text, HEAD?)``."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
    request_line = raw.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"malformed request line {request_line!r}")
    method, target = parts[0], parts[1]
    path = target.split("?", 1)[0]
    checks = {"/livez": health.liveness, "/readyz": health.readiness}
    if path not in checks and path != "/metrics":
        return (
            HTTPStatus.NOT_FOUND,
            {"status": "error", "reason": f"no such endpoint {path}; try /livez, /readyz or /metrics"},
            False,
        )
    if method not in ("GET", "HEAD"):
        return HTTPStatus.METHOD_NOT_ALLOWED, {"status": "error", "reason": f"{method} not allowed; use GET"}, False
    if path == "/metrics":
        from trialog.telemetry.metrics import exposition

        return HTTPStatus.OK, exposition(), method == "HEAD"
    ok, reason = checks[path]()
    if ok:
        return HTTPStatus.OK, {"status": "ok", "reason": reason}, method == "HEAD"
    return HTTPStatus.SERVICE_UNAVAILABLE, {"status": "unavailable", "reason": reason}, method == "HEAD"
