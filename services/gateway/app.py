"""The web gateway: pages for people and WebSockets bridged to trial events.

Starlette on uvicorn: an ASGI stack with first-class WebSockets, small enough to
read in an afternoon, served by one asyncio event loop (uvloop) like every other
Trialog service — so a socket handler awaits Kafka directly, with no thread hop.

JSON on the sockets, Avro on Kafka, Kafka credentials on the server only. The
gateway keeps nothing the log cannot rebuild (see :mod:`trialog.services.gateway.feed`):
run as many instances as you like behind one address.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from starlette.applications import Starlette

from trialog.bus.base import Bus
from trialog.controller import Controller
from trialog.controller import join_link as link
from trialog.errors import TrialError
from trialog.protocol.events import HEADER_KIND, ActorJoined
from trialog.protocol.roles import GATEWAY
from trialog.protocol.topics import EVENTS
from trialog.services.gateway.dashboard import Dashboard
from trialog.services.gateway.door import SLOW, Door, Limits, Refused
from trialog.services.gateway.feed import CAUGHT_UP, Feed
from trialog.services.gateway.messages import Decoded
from trialog.services.gateway.routes import ROUTES, user_page
from trialog.spec import Spec
from trialog.telemetry.health import Health, serve_health
from trialog.telemetry.logs import get_logger
from trialog.trust.authenticator import Authenticator

log = get_logger(__name__)

# How long each part of the gateway (the feed, the controller, the dashboard) and each
# open socket get to finish when the gateway stops, before they are abandoned.
STOP_WITHIN_S = 5.0


class Gateway:
    """What every page and socket of one gateway process shares."""

    def __init__(
        self,
        bus: Bus,
        specs: Mapping[str, Spec],
        *,
        base_url: str,
        join_wait_s: float = 60.0,
        limits: Limits | None = None,
        pages: Path | None = None,
    ):
        self.bus = bus
        # The operator's folder of page modules (``--pages``): the module a spec's environment names
        # (``page:``), else ``<environment>.js``, draws that environment.
        self.pages = Path(pages).resolve() if pages is not None else None
        self.named_pages = _named_pages(specs, self.pages)
        self.door = Door(limits)
        # People's rewards and messages, and the trials the lobby starts, are the gateway's to sign.
        bus.trust = Authenticator(bus.trust.keyring, role=GATEWAY)
        self.specs = dict(specs)
        self.base_url = base_url
        self.join_wait_s = join_wait_s
        self.feed = Feed(bus, self.door.limits)
        self.decoded = Decoded(bus)  # records of events as events, once per process
        self.dashboard = Dashboard(bus)
        self.feed.watchers.append(self.dashboard.on_record)
        self.controller = Controller(bus, name="gateway", watch=False)  # the lobby asks; the feed follows

    def page_of(self, spec: str, environment: str) -> str | None:
        """Where a seat's page module is, when the operator's pages folder has one for the
        trial's environment: the module the trial's spec names for it (``page:``), else
        ``<environment>.js`` (``/pages/…``); None: the shipped page, if any, else the generic one."""
        if self.pages is None:
            return None
        for name in (self.named_pages.get((spec, environment)), f"{environment}.js"):
            if name and user_page(self.pages, name) is not None:
                return f"/pages/{quote(name)}"
        return None

    async def publish(self, event) -> None:
        await self.bus.publish(EVENTS, event)

    # --- seats, from the specs this gateway was started with --------------------------------
    def client_seats(self, spec_name: str, implementations: Mapping[str, str]) -> list[str]:
        """The actors of a trial played by a client implementation (a person's seat)."""
        spec = self.specs.get(spec_name)
        return spec.seats(implementations) if spec is not None else []

    def spec_seats(self) -> list[dict]:
        """Per spec with a client implementation, the actors a person may play."""
        out = []
        for spec in self.specs.values():
            clients = [name for name, impl in spec.actors.items() if impl.client]
            if not clients:
                continue
            seats = [
                {
                    "actor": a.name,
                    "class": a.actor_class,
                    "partners": {b.name: b.implementation for b in spec.trial.actors if b.name != a.name},
                }
                for a in spec.trial.actors
                if any(not spec.actors[c].classes or a.actor_class in spec.actors[c].classes for c in clients)
            ]
            out.append({"spec": spec.name, "environment": spec.trial.environment, "seats": seats})
        return out

    async def seat_is_open(self, trial_id: str, actor: str) -> bool:
        """Has no page joined this seat yet? Read from the trial's log (any instance may have
        written the join), through the same bounded catch-up as a socket."""
        async with self.feed.subscribe(trial_id, timeout=5) as records:
            async for record in records:
                if record is CAUGHT_UP:
                    return True
                if (
                    record.header(HEADER_KIND) == ActorJoined.KIND
                    and isinstance(event := self.decoded(record), ActorJoined)
                    and event.actor == actor
                ):
                    return False
        return True

    async def start_with_person(self, spec_name: str, actor: str) -> tuple[str, str]:
        """Start a trial of ``spec_name`` with a person in ``actor``'s seat; (trial ID, join link)."""
        spec = self.specs.get(spec_name)
        if spec is None:
            raise TrialError(f"this gateway serves no spec {spec_name!r}; it serves {', '.join(self.specs) or 'none'}")
        default = next((a for a in spec.trial.actors if a.name == actor), None)
        client = next(
            (
                name
                for name, impl in spec.actors.items()
                if impl.client and default and (not impl.classes or default.actor_class in impl.classes)
            ),
            None,
        )
        if default is None or client is None:
            raise TrialError(f"spec {spec_name!r} has no seat {actor!r} a person can take")
        trial_id = await self.controller.start_trial(spec_name, implementations={actor: client})
        return trial_id, link(self.base_url, self.bus.trust.keyring, trial_id, actor)


def _named_pages(specs: Mapping[str, Spec], folder: Path | None) -> dict[tuple[str, str], str]:
    """(spec, environment) → the page module the spec names for it (``page:``, checked when the
    spec was loaded): two specs may draw one environment name with pages of their own. A page
    named but not in the folder is said once here; the trials of that environment then get the
    next page in line (``<environment>.js``, shipped, generic)."""
    named: dict[tuple[str, str], str] = {}
    for spec in specs.values():
        for environment, impl in spec.environments.items():
            if not impl.page:
                continue
            named[(spec.name, environment)] = impl.page
            if folder is None or user_page(folder, impl.page) is None:
                log.warning(
                    "a spec names a page the gateway's pages folder does not have; another page draws its trials",
                    spec=spec.name,
                    environment=environment,
                    page=impl.page,
                    pages=str(folder) if folder else "none (--pages)",
                )
    return named


def build_app(
    bus: Bus,
    specs: Mapping[str, Spec],
    *,
    base_url: str,
    join_wait_s: float = 60.0,
    limits: Limits | None = None,
    pages: Path | None = None,
) -> Starlette:
    gateway = Gateway(bus, specs, base_url=base_url, join_wait_s=join_wait_s, limits=limits, pages=pages)
    app = Starlette(routes=ROUTES, lifespan=_lifespan(gateway))
    app.state.gateway = gateway
    return app


def _lifespan(gateway: Gateway):
    """Start the feed, the controller and the dashboard; stop each, last first, within its bound."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette | None):
        started = []
        try:
            for part in (gateway.feed, gateway.controller, gateway.dashboard):
                await part.__aenter__()
                started.append(part)
            yield
        finally:
            for part in reversed(started):
                await _stop(part)

    return lifespan


async def _stop(part) -> None:
    """Stop one part of the gateway within :data:`STOP_WITHIN_S`: a Kafka client that does
    not close (a broker gone, a request never answered) must not keep the process from
    exiting on SIGTERM. The log says which part was left to the process exit."""
    try:
        await asyncio.wait_for(part.__aexit__(None, None, None), STOP_WITHIN_S)
    except TimeoutError:
        log.warning(
            "a part of the gateway did not stop in time; left to the process exit",
            part=type(part).__name__,
            seconds=STOP_WITHIN_S,
        )


CLOSE_WITHIN_S = 1.0  # after the gateway's close frame, how long a page has to read it before the connection is closed
# How long a page that has not read what it was sent, the close frame behind it, keeps its
# connection before it is cut off and the unsent bytes dropped.
DRAIN_WITHIN_S = 30.0


def _socket_protocol(send_timeout_s: float):
    """uvicorn's wsproto protocol, parsing a page's frames one message at a time as the
    gateway reads them. uvicorn parsed every frame of a chunk it read at once: 256 KB of
    tiny frames from a flooding page took the event loop for a tenth of a second, in which
    other trials' pages missed their deadlines. Here the frames wait, unparsed, in wsproto's
    buffer (and the rest in the kernel's) until the gateway reads the next message. And the
    connection closes :data:`CLOSE_WITHIN_S` after the gateway's close frame, not 10 s, and
    nothing the page sends after it is parsed or read: a page closed for a flood goes on
    sending (the close frame, code and reason, is written first and read by the page). The
    overridden methods are uvicorn's (tests/integration/test_gateway_limits.py floods a socket
    through them).

    A send to a page waits only while the page has not read what it was sent before (the
    transport has paused writing); that wait is bounded here by ``send_timeout_s``, and a
    send that does not wait, nearly every one, costs no timer (one per message, made by
    ``asyncio.timeout`` around every send, was ~4 % of the gateway's CPU at 96 seats).

    The close frame never waits for the page to read: it goes behind what the page has not
    read, and the socket's handler ends at once, giving back the page's place at the door
    (uvicorn waited, without a bound, for the page to read first). The connection is closed
    once the page has had :data:`CLOSE_WITHIN_S` to read the close frame, and a page that has
    not read up to it within :data:`DRAIN_WITHIN_S` is cut off."""
    from uvicorn.protocols.websockets.wsproto_impl import WSProtocol
    from wsproto import events

    class GatewaySocket(WSProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.close_timeout = CLOSE_WITHIN_S

        def data_received(self, data: bytes) -> None:
            if self.close_sent:
                # The gateway closed this socket: what the page still sends is not parsed, and
                # no more is read (the page still reads the close frame, code and reason).
                self.transport.pause_reading()
                return
            super().data_received(data)

        def handle_events(self) -> None:  # uvicorn's dispatch, stopping once a message waits for the gateway
            for event in self.conn.events():
                if self.close_sent:
                    if isinstance(event, events.CloseConnection):
                        self.handle_close(event)
                    continue
                if isinstance(event, events.Request):
                    self.handle_connect(event)
                elif isinstance(event, events.TextMessage | events.BytesMessage):
                    self.handle_message(event)
                    if self.read_paused:
                        return  # the rest stays in wsproto's buffer until the gateway reads on
                elif isinstance(event, events.CloseConnection):
                    self.handle_close(event)
                elif isinstance(event, events.Ping):
                    self.handle_ping(event)
                elif isinstance(event, events.Pong):
                    self.handle_pong(event)

        async def send(self, message) -> None:
            kind = message["type"]
            if not self.writable.is_set() and self.handshake_complete and not self.close_sent:
                if kind == "websocket.close":
                    self._close_behind_unread(message.get("code", 1000), message.get("reason") or "")
                    return
                if kind == "websocket.send":
                    try:
                        async with asyncio.timeout(send_timeout_s):
                            await self.writable.wait()
                    except TimeoutError:  # not an OSError for Starlette to take for a disconnection
                        raise Refused(f"this page did not read for {send_timeout_s:g} s", SLOW) from None
            await super().send(message)
            if kind == "websocket.close" and self.close_timer is not None:
                self._close_later()

        def _close_behind_unread(self, code: int, reason: str) -> None:
            """uvicorn's close, without its wait for the page to read what it was sent."""
            self.close_sent = True
            self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
            if not self.transport.is_closing():
                self.transport.write(self.conn.send(events.CloseConnection(code=code, reason=reason)))
                self._close_later()

        def _close_later(self) -> None:
            if self.close_timer is not None:
                self.close_timer.cancel()
            self.cut_off_at = self.loop.time() + DRAIN_WITHIN_S
            self.draining = False
            self.close_timer = self.loop.call_later(CLOSE_WITHIN_S, self._shut)

        def _shut(self) -> None:
            """Close once the page has had CLOSE_WITHIN_S to read the close frame: after it was
            written, as uvicorn does, or, if it waited behind unread bytes, after they left. Not
            before: closing a socket whose page's bytes were not read (they are not, once the
            close is sent) resets the connection, and a page can lose what it had not yet read,
            the close frame with it. The page's echo of the close frame (uvicorn's handle_close)
            or the connection's loss cancels this timer."""
            unread = self.transport.get_write_buffer_size()
            if not unread and not self.draining:
                self.transport.close()
            elif unread and self.loop.time() >= self.cut_off_at:
                self.transport.abort()
            else:  # unread bytes left, or drained since the last look: one more CLOSE_WITHIN_S
                self.draining = bool(unread)
                self.close_timer = self.loop.call_later(CLOSE_WITHIN_S, self._shut)

        async def receive(self):
            message = await super().receive()
            if self.queue.empty() and not self.close_sent:
                self.handle_events()  # the next message from the buffer, if one is there
            return message

    return GatewaySocket


def _http_protocol(door: Door):
    """uvicorn's h11 protocol behind the door's connection rate: a connection from an address
    over its rate is answered 429 with the reason as soon as its request head has arrived,
    unparsed — a crowd of handshakes costs a few bytes' search each instead of an HTTP and a
    WebSocket handshake, so it does not take the event loop other trials' pages need. (The
    head is read before the answer: closing a socket with unread data resets the connection,
    and the answer with it.)"""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GatewayHTTP(H11Protocol):
        refusal: bytes | None = None
        head = b""

        def connection_made(self, transport) -> None:
            peer = transport.get_extra_info("peername")
            reason = door.connect(peer[0] if peer else "?")
            if reason is None:
                super().connection_made(transport)
                return
            body = reason.encode()
            self.refusal = (
                b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if self.refusal is None:
                super().data_received(data)
                return
            self.head = (self.head + data)[-4:]
            if b"\r\n\r\n" in self.head or b"\r\n\r\n" in data:
                self.transport.write(self.refusal)
                self.transport.close()

        def connection_lost(self, exc) -> None:
            if self.refusal is None:
                super().connection_lost(exc)

    return GatewayHTTP


def server_config(app: Starlette, *, host: str, port: int, limits: Limits):
    """uvicorn's settings for the gateway: HTTP through h11 behind the door's connection rate
    (:func:`_http_protocol`); h11 bounds a request's head
    (httptools, when installed, takes a megabyte of headers), sockets through wsproto (a
    handshake of any size gets an HTTP status; see pyproject.toml), frames over the limit
    close 1009."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        http=_http_protocol(app.state.gateway.door),
        ws=_socket_protocol(limits.send_timeout_s),
        ws_max_size=limits.frame_bytes,
        # A page's messages are small JSON: compressing each cost the gateway more CPU than
        # the bytes saved are worth on the tick path (measured with bench/gateway.py's seats).
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=STOP_WITHIN_S,
    )


async def main(
    bus: Bus,
    specs: Mapping[str, Spec],
    *,
    host: str,
    port: int,
    base_url: str,
    health_port: int = 0,
    limits: Limits | None = None,
    pages: Path | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn handles the signals and closes the sockets)."""
    import uvicorn

    limits = limits or Limits()
    app = build_app(bus, specs, base_url=base_url, limits=limits, pages=pages)
    config = server_config(app, host=host, port=port, limits=limits)
    health = Health()
    probes = await serve_health(health, bus.settings.health_host, health_port) if health_port else None
    watcher = asyncio.create_task(_watch_health(health, app.state.gateway))
    log.info("gateway starting", port=port, health_port=health_port or None, links=base_url)
    try:
        await uvicorn.Server(config).serve()
    finally:
        watcher.cancel()
        if probes is not None:
            probes.close()


async def _watch_health(health: Health, gateway: Gateway) -> None:
    """Live while the event loop turns; ready once the trials index is read (the lobby needs it)."""
    while True:
        health.beat()
        ready = gateway.feed.index_ready.is_set()
        health.set_ready(ready, "" if ready else "reading the trials index")
        await asyncio.sleep(1.0)
