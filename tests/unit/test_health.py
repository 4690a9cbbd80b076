"""The health endpoints answer real HTTP requests the way Kubernetes probes expect.

Each test starts :func:`trialog.telemetry.health.serve_health` on a free port and talks to
it with a real HTTP client (urllib, in a worker thread so the server's event
loop keeps running) or with raw sockets for the malformed cases.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable

import pytest

from trialog.commands.parts import HEALTH_PORTS
from trialog.errors import TrialogError
from trialog.telemetry.health import Health, serve_health


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One blocking HTTP request; error statuses are answers, not exceptions."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def _with_server(health: Health, scenario: Callable[[str], Awaitable[None]]) -> None:
    """Serve ``health`` on a free loopback port, run ``scenario(base_url)``, close."""

    async def main() -> None:
        server = await serve_health(health, host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        try:
            await scenario(f"http://127.0.0.1:{port}")
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


async def _fetch(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await asyncio.to_thread(_get, url, method)


def test_a_new_service_is_live_but_not_ready() -> None:
    health = Health()

    async def scenario(base: str) -> None:
        status, headers, body = await _fetch(base + "/livez")
        assert status == 200
        assert headers["Content-Type"] == "application/json"
        assert json.loads(body) == {"status": "ok", "reason": ""}

        status, _, body = await _fetch(base + "/readyz")
        assert status == 503
        assert json.loads(body) == {"status": "unavailable", "reason": "starting"}

    _with_server(health, scenario)


def test_readiness_follows_set_ready_with_its_reason() -> None:
    health = Health()

    async def scenario(base: str) -> None:
        health.set_ready(True, "owns 4 partitions")
        status, _, body = await _fetch(base + "/readyz")
        assert (status, json.loads(body)) == (200, {"status": "ok", "reason": "owns 4 partitions"})

        health.set_ready(False, "partitions revoked by a rebalance")
        status, _, body = await _fetch(base + "/readyz")
        assert (status, json.loads(body)) == (
            503,
            {"status": "unavailable", "reason": "partitions revoked by a rebalance"},
        )

    _with_server(health, scenario)


def test_a_loop_that_stops_beating_is_neither_live_nor_ready() -> None:
    clock = FakeClock()
    health = Health(liveness_timeout_s=30, clock=clock)
    health.set_ready(True)

    async def scenario(base: str) -> None:
        clock.now += 29
        assert (await _fetch(base + "/livez"))[0] == 200

        clock.now += 2  # 31 s since the last beat
        status, _, body = await _fetch(base + "/livez")
        assert status == 503
        assert json.loads(body) == {"status": "unavailable", "reason": "no heartbeat for 31.0s (limit 30s)"}
        status, _, body = await _fetch(base + "/readyz")
        assert status == 503
        assert json.loads(body)["reason"].startswith("not live: no heartbeat")

        health.beat()
        assert (await _fetch(base + "/livez"))[0] == 200
        assert (await _fetch(base + "/readyz"))[0] == 200

    _with_server(health, scenario)


def test_status_reports_both_probes() -> None:
    clock = FakeClock()
    health = Health(liveness_timeout_s=10, clock=clock)
    clock.now += 2.5
    assert health.status() == {
        "live": True,
        "ready": False,
        "liveness_reason": "",
        "readiness_reason": "starting",
        "seconds_since_beat": 2.5,
        "liveness_timeout_s": 10,
    }


def test_query_strings_and_head_requests_are_probes_too() -> None:
    health = Health()
    health.set_ready(True)

    async def scenario(base: str) -> None:
        status, _, body = await _fetch(base + "/readyz?verbose=1")
        assert (status, json.loads(body)["status"]) == (200, "ok")
        status, headers, body = await _fetch(base + "/livez", method="HEAD")
        assert (status, body) == (200, b"")
        assert int(headers["Content-Length"]) > 0

    _with_server(health, scenario)


def test_unknown_paths_are_404_and_other_methods_405() -> None:
    health = Health()

    async def scenario(base: str) -> None:
        status, _, body = await _fetch(base + "/stats")
        assert status == 404
        assert "/livez" in json.loads(body)["reason"]
        status, headers, _ = await _fetch(base + "/livez", method="POST")
        assert status == 405
        assert headers["Allow"] == "GET, HEAD"

    _with_server(health, scenario)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NONSENSE\r\n\r\n",
        b"GET /livez HTTP/1.1\r\nX-Filler: " + b"x" * 20000 + b"\r\n\r\n",
    ],
    ids=["malformed request line", "oversized headers"],
)
def test_garbage_gets_400_and_the_server_keeps_serving(request_bytes: bytes) -> None:
    health = Health()

    async def scenario(base: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request_bytes)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert (await _fetch(base + "/livez"))[0] == 200

    _with_server(health, scenario)


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="liveness_timeout_s must be positive"):
        Health(liveness_timeout_s=0)


def test_metrics_are_served_in_prometheus_text_format() -> None:
    from trialog.telemetry import metrics

    metrics.TRIALS_ENDED.labels("test_reason").inc()

    async def scenario(base: str) -> None:
        status, headers, body = await _fetch(base + "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        text = body.decode()
        assert "# TYPE trialog_trials_ended_total counter" in text
        assert 'trialog_trials_ended_total{reason="test_reason"}' in text

    _with_server(Health(), scenario)


def test_a_taken_health_port_is_refused_with_what_to_do():
    async def main() -> None:
        first = await serve_health(Health(), host="127.0.0.1", port=0)
        port = first.sockets[0].getsockname()[1]
        try:
            with pytest.raises(TrialogError, match=f"health port {port} on 127.0.0.1 is taken.*--health-port"):
                await serve_health(Health(), host="127.0.0.1", port=port)
        finally:
            first.close()
            await first.wait_closed()

    asyncio.run(main())


def test_each_service_has_a_health_port_of_its_own_by_default():
    """One of each service on one host, without flags, does not collide."""
    from trialog.cli import build_parser

    parser = build_parser()
    ports = {}
    for service in HEALTH_PORTS:
        args = ["serve", service, "--spec", "x.yaml"] if service in ("orchestrator", "environment", "actors") else None
        args = (
            args
            or {
                "gateway": ["serve", "gateway", "--spec", "x.yaml"],
                "logger": ["serve", "logger", "--archive-dir", "x"],
                "learner": ["serve", "learner", "--spec", "x.yaml", "--implementation", "dqn"],
                "analytics": ["serve", "analytics"],
            }[service]
        )
        ports[service] = parser.parse_args(args).health_port
    assert ports == HEALTH_PORTS and len(set(ports.values())) == len(ports)


def test_local_services_read_the_version_their_actor_services_act_with():
    """An evaluation waits on this: the oldest version any actor service serves the implementation
    with, 0 while one has none (or does not answer), and other services' gauges not counted."""
    from trialog.telemetry import metrics
    from trialog.tools.campaign import Services

    async def scenario(base: str) -> None:
        port = int(base.rsplit(":", 1)[1])
        services = Services()
        services.ports.update({"orchestrator": port, "actors-0": port})
        assert await asyncio.to_thread(services.served_version, "gauge-test") == 0  # nothing loaded yet
        metrics.MODEL_VERSION.labels("gauge-test").set(12)
        metrics.MODEL_VERSION.labels("gauge-test-2").set(40)  # another implementation's, a prefix of none
        assert await asyncio.to_thread(services.served_version, "gauge-test") == 12
        services.ports["actors-1"] = _closed_port()
        assert await asyncio.to_thread(services.served_version, "gauge-test") == 0  # one does not answer
        assert await asyncio.to_thread(services.settled_steps, "gauge-test") == -1  # no learner among them
        services.ports["learner-0"] = port
        assert await asyncio.to_thread(services.settled_steps, "gauge-test") == -1  # no such learner here
        learner = _Learner()
        metrics.watch_learner(learner)
        assert await asyncio.to_thread(services.settled_steps, "gauge-test") == 4200

    _with_server(Health(), scenario)


class _Learner:
    """What the gauge reads off a learner handler."""

    implementation = "gauge-test"

    def settled_steps(self) -> int:
        return 4200


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
