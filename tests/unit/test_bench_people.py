"""The gateway benchmark's WebSocket client (bench/people.py) against the `websockets`
library's server, which refuses a client frame that is not masked or not well formed."""

from __future__ import annotations

import asyncio

import pytest
import websockets

from bench import people


async def _serve(handler):
    return await websockets.serve(handler, "127.0.0.1", 0, compression=None, max_size=None)


def _url(server, path="/seat?x=1") -> str:
    port = next(iter(server.sockets)).getsockname()[1]
    return f"ws://127.0.0.1:{port}{path}"


async def test_messages_of_every_length_both_ways_with_pings_and_fragments():
    sizes = [0, 5, 125, 126, 200, 65535, 65536, 70_000]
    got_by_server: list[bytes] = []
    paths: list[str] = []

    async def handler(ws):
        paths.append(ws.request.path)
        for n in sizes:
            await ws.send(bytes(range(256)) * (n // 256) + bytes(n % 256))  # binary, each length class
        await ws.send(["frag", "mented"])  # one text message in two frames
        pong = await ws.ping(b"are you there")
        await asyncio.wait_for(pong, 5)  # the client answered the ping
        await ws.send("last")
        async for message in ws:
            got_by_server.append(message)

    server = await _serve(handler)
    received: list[bytes] = []

    def on_message(socket: people.Socket, message: bytes) -> bool:
        received.append(message)
        socket.send(message, people.BINARY)  # echoed back, masked: the server unmasks and checks each frame
        if message == b"last":
            socket.send("bye ✓".encode())  # text: the server checks it is UTF-8
        return message != b"last"

    try:
        await asyncio.wait_for(people.talk(_url(server), on_message), 10)
    finally:
        server.close()
        await server.wait_closed()
    expected = [bytes(range(256)) * (n // 256) + bytes(n % 256) for n in sizes] + [b"fragmented", b"last"]
    assert received == expected
    assert got_by_server == [*expected, "bye ✓"]
    assert paths == ["/seat?x=1"]


async def test_the_server_closing_ends_the_talk():
    async def handler(ws):
        await ws.send("hello")
        await ws.close(4408, "too slow")

    server = await _serve(handler)
    received: list[bytes] = []
    try:
        await asyncio.wait_for(people.talk(_url(server), lambda s, m: received.append(m) is None), 10)
    finally:
        server.close()
        await server.wait_closed()
    assert received == [b"hello"]


async def test_a_server_that_does_not_switch_protocols_is_refused():
    async def not_websocket(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(not_websocket, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(people.HandshakeRefused, match="404"):
            await asyncio.wait_for(people.talk(f"ws://127.0.0.1:{port}/", lambda s, m: True), 10)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_server_that_never_answers_times_out():
    async def silent(reader, writer):
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(TimeoutError):
            await people.talk(f"ws://127.0.0.1:{port}/", lambda s, m: True, open_timeout=0.3)
    finally:
        server.close()


async def test_not_a_ws_address():
    with pytest.raises(ValueError, match="ws://"):
        await people.talk("http://127.0.0.1:1/", lambda s, m: True)
