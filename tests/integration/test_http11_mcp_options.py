"""What the MCP layer's use of the lean HTTP/1.1 client adds to it (gateway/upstream/http11.py,
gateway/mcp/lean_http.py), against raw HTTP servers on loopback: a request whose *new* connection
was dropped before any answer is not sent again (a tool call is not repeated), while one written on
a kept-alive connection the server was just closing still is; new connections go where `address_of`
says (the egress check), and a refusal there leaves no connection attempted."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from gateway.upstream.http11 import Http11Pool
from tests.integration.test_upstream_http11 import RawServer, answer, post


async def test_without_resend_fresh_a_new_connection_dropped_before_any_answer_is_not_sent_again() -> None:
    async def dropping(body: bytes, writer: asyncio.StreamWriter) -> bool:
        return False  # closed without a byte of response

    pool = Http11Pool(resend_fresh=False)
    try:
        async with RawServer(dropping) as server:
            with pytest.raises(httpx2.RemoteProtocolError, match="without a response"):
                await post(pool, server.url)
            assert (len(server.requests), server.connections) == (1, 1)
    finally:
        await pool.aclose()


async def test_without_resend_fresh_a_kept_connection_the_server_closed_is_still_replaced() -> None:
    calls = {"n": 0}

    async def once_per_connection(body: bytes, writer: asyncio.StreamWriter) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:  # the kept connection's second request: closed unanswered, as a server's keep-alive end
            return False
        writer.write(answer(b'{"ok": %d}' % calls["n"]))
        await writer.drain()
        return True

    pool = Http11Pool(resend_fresh=False)
    try:
        async with RawServer(once_per_connection) as server:
            assert await post(pool, server.url) == (200, b'{"ok": 1}')
            assert await post(pool, server.url) == (200, b'{"ok": 3}')
            assert (len(server.requests), server.connections) == (3, 2)
    finally:
        await pool.aclose()


async def test_new_connections_go_where_address_of_says_and_its_refusal_stops_them() -> None:
    asked: list[tuple[str, int]] = []
    refuse = {"now": False}

    async def address_of(host: str, port: int) -> str:
        asked.append((host, port))
        if refuse["now"]:
            raise httpx2.ConnectError("refused here")
        return "127.0.0.1"

    async def answering(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b'{"ok": 1}', b"connection: close"))
        await writer.drain()
        return False

    pool = Http11Pool(address_of=address_of)
    try:
        async with RawServer(answering) as server:
            port = int(server.url.split(":")[2].split("/")[0])
            named = f"http://tools.test:{port}/mcp"
            assert await post(pool, named) == (200, b'{"ok": 1}')
            refuse["now"] = True
            with pytest.raises(httpx2.ConnectError, match="^refused here$"):
                await post(pool, named)
            assert asked == [("tools.test", port)] * 2 and server.connections == 1
    finally:
        await pool.aclose()
