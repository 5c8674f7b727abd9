"""What the MCP layer's use of the lean HTTP/1.1 client adds to it (gateway/upstream/http11.py,
gateway/mcp/lean_http.py), against raw HTTP servers on loopback: without `resend`, a request once
written is never sent again, on a new connection or a kept-alive one (the server may have run the
tool before the connection broke; httpx2 raises the same way); new connections go where
`address_of` says (the egress check), and a refusal there leaves no connection attempted."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from gateway.upstream.http11 import Http11Pool
from tests.integration.test_upstream_http11 import RawServer, answer, post


async def test_without_resend_a_new_connection_dropped_before_any_answer_is_not_sent_again() -> None:
    async def dropping(body: bytes, writer: asyncio.StreamWriter) -> bool:
        return False  # closed without a byte of response

    pool = Http11Pool(resend=False)
    try:
        async with RawServer(dropping) as server:
            with pytest.raises(httpx2.RemoteProtocolError, match="without a response"):
                await post(pool, server.url)
            assert (len(server.requests), server.connections) == (1, 1)
    finally:
        await pool.aclose()


def second_request_unanswered() -> Any:
    """A raw server's handler: the n-th request is answered `{"ok": n}`, except the second, which
    is read and then left unanswered, its (kept-alive) connection closed."""
    calls = {"n": 0}

    async def handle(body: bytes, writer: asyncio.StreamWriter) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:
            return False
        writer.write(answer(b'{"ok": %d}' % calls["n"]))
        await writer.drain()
        return True

    return handle


async def test_without_resend_a_request_written_on_a_kept_connection_that_breaks_unanswered_is_not_sent_again() -> None:
    # the server read the second request (it may have run the tool) and the connection broke
    # before any byte of the answer: a resend would run the tool twice
    pool = Http11Pool(resend=False)
    try:
        async with RawServer(second_request_unanswered()) as server:
            assert await post(pool, server.url) == (200, b'{"ok": 1}')
            with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
                await post(pool, server.url)
            assert (len(server.requests), server.connections) == (2, 1)
            assert await post(pool, server.url) == (200, b'{"ok": 3}')  # the broken connection is not reused
            assert (len(server.requests), server.connections) == (3, 2)
    finally:
        await pool.aclose()


async def test_with_resend_the_chat_paths_request_on_a_kept_connection_closed_unanswered_is_sent_once_more() -> None:
    pool = Http11Pool()
    try:
        async with RawServer(second_request_unanswered()) as server:
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
