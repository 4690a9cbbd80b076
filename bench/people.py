"""The gateway benchmark's simulated people: a WebSocket client (RFC 6455) small enough that
the benchmark's load costs the machine little beside the services it measures.

A seat's page is a browser, on another machine. The benchmark runs the simulated people in its
own process, on the two cores the services share, so their CPU is taken from the gateway and the
services under test. With the ``websockets`` client, the people cost 78–92 µs of CPU a seat-tick
(one observation received, one action sent) at 128–256 seats; with this client, 46–57 µs
(docs/performance.md, "A page's catch-up, and the benchmark's people"). The gateway sees the same
bytes from either: a handshake, masked text frames, a close answered.

Only what a seat's socket uses is here: text and binary messages (fragmented or not),
pings answered, the close handshake. No extensions are offered (the gateway compresses
nothing either).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
from collections.abc import Callable
from urllib.parse import urlsplit

# RFC 6455 §1.3: the server proves it read the handshake by hashing the key with this.
ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA
CLOSE_NORMAL = 1000
CLOSE_WITHIN_S = 1.0  # how long a close waits for the server's answer (websockets' own default is 10 s)
HANDSHAKE_LIMIT = 64 * 1024  # a response head larger than this is not a WebSocket server's


class HandshakeRefused(ConnectionError):
    """The server did not switch to WebSocket (its status line and head are in the message)."""


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final frame, masked with a fresh key as a client's must be (§5.3)."""
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 1 << 16:
        length = b"\xfe" + struct.pack("!H", n)
    else:
        length = b"\xff" + struct.pack("!Q", n)
    key = os.urandom(4)
    if n:  # XOR as one big integer: a few operations, not one per byte
        mask = int.from_bytes((key * (n // 4 + 1))[:n], "big")
        payload = (int.from_bytes(payload, "big") ^ mask).to_bytes(n, "big")
    return bytes([0x80 | opcode]) + length + key + payload


def accept_for(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + ACCEPT_GUID).digest())


class Socket(asyncio.Protocol):
    """One connection: the handshake, then the server's frames parsed as they arrive and each
    whole message handed to ``on_message``, which answers with :meth:`send`."""

    def __init__(self, path: str, host: str, on_message: Callable[[Socket, bytes], bool]):
        self.path, self.host, self.on_message = path, host, on_message
        self.key = base64.b64encode(os.urandom(16))
        self.buffer = bytearray()
        self.parts: list[bytes] = []
        self.closing = False
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()  # the handshake's outcome
        self.closed: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        head = (
            b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        transport.write(head % (self.path.encode(), self.host.encode(), self.key))

    def send(self, payload: bytes, opcode: int = TEXT) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(opcode, payload))

    def close(self, code: int = CLOSE_NORMAL) -> None:
        """Start the close handshake: done when the server's close frame comes back or the
        connection drops, at most ``CLOSE_WITHIN_S`` later."""
        if not self.closing:
            self.closing = True
            self.send(struct.pack("!H", code), CLOSE)
            asyncio.get_running_loop().call_later(CLOSE_WITHIN_S, self._end, None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.ready.done() and not self._handshake():
            return
        buffer = self.buffer
        while len(buffer) >= 2 and not self.closed.done():
            first, second = buffer[0], buffer[1]
            if second & 0x80:
                self._end(ConnectionError("the server masked a frame (RFC 6455 §5.1)"))
                return
            size, start = second & 0x7F, 2
            if size == 126:
                if len(buffer) < 4:
                    return
                size, start = struct.unpack_from("!H", buffer, 2)[0], 4
            elif size == 127:
                if len(buffer) < 10:
                    return
                size, start = struct.unpack_from("!Q", buffer, 2)[0], 10
            if len(buffer) < start + size:
                return
            payload = bytes(buffer[start : start + size])
            del buffer[: start + size]
            self._frame(first & 0x80, first & 0x0F, payload)

    def _handshake(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > HANDSHAKE_LIMIT:
                self._end(HandshakeRefused(f"no end to the response's head in {HANDSHAKE_LIMIT} bytes"))
            return False
        head = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        lines = head.split(b"\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        if lines[0].split(b" ")[1:2] != [b"101"] or fields.get(b"sec-websocket-accept") != accept_for(self.key):
            self._end(HandshakeRefused(head.decode("latin-1")[:500]))
            return False
        self.ready.set_result(None)
        return True

    def _frame(self, final: int, opcode: int, payload: bytes) -> None:
        if opcode == CLOSE:
            if not self.closing:  # the server's close: echo its code, then stop
                self.send(payload[:2], CLOSE)
            self._end(None)
        elif opcode == PING:
            self.send(payload, PONG)
        elif opcode in (TEXT, BINARY, CONTINUATION):
            self.parts.append(payload)
            if final:
                message = b"".join(self.parts)
                self.parts.clear()
                if not self.on_message(self, message):
                    self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(None)

    def _end(self, error: Exception | None) -> None:
        """Closed, with ``error`` if it was not a clean close: raised from the handshake's wait
        when it came first, else from the wait for the close."""
        if not self.ready.done():
            self.ready.set_exception(error or ConnectionError("closed before the handshake's answer"))
            self.ready.exception()  # retrieved here: no one awaits it once talk() timed out
            error = None
        if not self.closed.done():
            if error is None:
                self.closed.set_result(None)
            else:
                self.closed.set_exception(error)
        if self.transport is not None:
            self.transport.close()


async def talk(url: str, on_message: Callable[[Socket, bytes], bool], *, open_timeout: float = 60) -> None:
    """Connect to ``url`` (``ws://host:port/path?query``) and hand every message the server sends
    to ``on_message(socket, message)``, which may :meth:`~Socket.send` and returns False once
    it is done (the client then closes). Returns when the connection is closed by either side;
    raises :class:`HandshakeRefused` if the server does not switch protocols."""
    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname:
        raise ValueError(f"not a ws:// address: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    loop = asyncio.get_running_loop()
    socket = None
    try:
        async with asyncio.timeout(open_timeout):
            _, socket = await loop.create_connection(
                lambda: Socket(path, parts.netloc, on_message), parts.hostname, parts.port or 80
            )
            await socket.ready
        await socket.closed
    finally:
        if socket is not None:
            socket._end(None)  # noqa: SLF001 - a timeout or a caller's cancel: the connection goes with it
