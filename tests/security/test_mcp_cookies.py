"""A cookie one owner's MCP server sets never goes out with another owner's calls (issue 32,
review of round 3). The gateway keeps one HTTP client per auth header, shared by every owner whose
connections send the same header (or none); its cookie jar was shared with it, so a session cookie
a server set during alice's call went to that host with bob's calls. The server here is the tests'
real tool server behind a layer that sets a cookie on every answer and records each request's
`Cookie` header."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import CallLog, bridge_app, mcp_http, tool_server
from tests.support.http_server import ServerThread, serve


def setting_cookies(app: Any, seen: list[str]) -> Any:
    """`app`, answering with `Set-Cookie: sid=<n>` and recording the `Cookie` each request carried."""
    count = 0

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal count
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        seen.append(dict(scope["headers"]).get(b"cookie", b"").decode())
        count += 1
        cookie = f"sid=server-session-{count}; Path=/".encode()

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await app(scope, receive, send_with_cookie)

    return wrapped


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[ServerThread, list[str]]]:
    seen: list[str] = []
    with serve(setting_cookies(tool_server(CallLog(), delay=0), seen)) as upstream:
        config = BridgeConfig.model_validate({
            "database": "bridge.db",
            "connections": [{"id": "a", "owner": "alice", "endpoint": f"{upstream.url}/mcp"},
                            {"id": "b", "owner": "bob", "endpoint": f"{upstream.url}/mcp"}],
        })
        with serve(bridge_app(config, tmp_path).app) as server:
            yield server, seen


async def call(server: ServerThread, caller: str, tool: str) -> types.CallToolResult:
    transport = streamable_http_client(f"{server.url}/mcp", http_client=mcp_http(caller))
    async with Client(transport, mode="legacy") as client:
        return await asyncio.wait_for(client.call_tool(tool, {"text": "hi"}), 30)


async def test_a_cookie_alices_server_set_never_goes_out_with_bobs_calls(bridge: tuple[ServerThread, list[str]]) -> None:
    # R: F2, F3, F15 (two owners' connections to one host share an HTTP client, never its cookies)
    server, seen = bridge
    alices = await call(server, "alice-key", "a__echo")
    requests_of_alice = len(seen)
    bobs = await call(server, "bob-key", "b__echo")
    assert not alices.is_error and not bobs.is_error
    assert requests_of_alice > 0 and len(seen) > requests_of_alice  # both reached the server
    assert seen == [""] * len(seen)  # no request of either carried a cookie the server set
