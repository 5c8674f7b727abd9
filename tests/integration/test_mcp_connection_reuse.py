"""The MCP client layer's HTTP client (gateway/mcp/reuse.py) against a real server: a response
closed before its end keeps its connection when the stream ends right after (as an MCP server's
streamed answer does), and closing a stream that never ends, or a body too large to read, still
returns at once (bounded) instead of hanging the closing task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.mcp.target import mcp_http_client
from tests.support.http_server import serve

DEADLINE = 10.0


def streams(peers: list[int]) -> Starlette:
    async def answered(request: Request) -> Response:
        peers.append(request.client.port if request.client else 0)

        async def events() -> AsyncIterator[bytes]:
            yield b'event: message\ndata: {"jsonrpc": "2.0", "id": 1, "result": {}}\n\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    async def forever(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            while True:
                yield b"data: tick\n\n"
                await asyncio.sleep(0.01)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def big(request: Request) -> Response:
        return Response(b"x" * (4 * 1024 * 1024), media_type="application/octet-stream")

    return Starlette(routes=[Route("/answered", answered), Route("/forever", forever), Route("/big", big)])


async def first_chunk_then_close(client: httpx2.AsyncClient, url: str) -> bytes:
    response = await client.send(client.build_request("GET", url), stream=True)
    chunk = await anext(response.aiter_raw())
    await asyncio.wait_for(response.aclose(), DEADLINE)  # a close that hangs fails here
    return bytes(chunk)


async def test_answers_closed_at_their_result_keep_one_connection() -> None:
    # R: F15
    peers: list[int] = []
    with serve(streams(peers)) as server:
        async with mcp_http_client() as client:
            chunks = [await first_chunk_then_close(client, f"{server.url}/answered") for _ in range(5)]
    assert all(chunk.startswith(b"event: message") for chunk in chunks)
    assert len(peers) == 5 and len(set(peers)) == 1, f"one TCP connection for five answers, not {len(set(peers))}"


async def test_closing_an_endless_stream_or_a_huge_body_early_returns_and_the_client_goes_on() -> None:
    # R: F15, B17
    peers: list[int] = []
    with serve(streams(peers)) as server:
        async with mcp_http_client() as client:
            tick = await first_chunk_then_close(client, f"{server.url}/forever")
            blob = await first_chunk_then_close(client, f"{server.url}/big")
            after = await first_chunk_then_close(client, f"{server.url}/answered")
    assert tick.startswith(b"data: tick") and blob.startswith(b"x") and after.startswith(b"event: message")
