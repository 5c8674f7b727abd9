"""A connection's answer cannot pass the result bound by being compressed (issue 32, N2, review).

The bound of gateway/mcp/bounds.py counts bytes as the transport reads them; httpx2 decodes a
`Content-Encoding` only after that, while the SDK reads the body. A server that gzips a 16 MiB
tool result sends about 16 KiB, so counted on the wire the bound never fired and the Bridge held
the whole decoded answer. Now the gateway asks MCP servers for identity-encoded answers and
refuses an encoded one unread. The server here is a plain JSON-RPC-over-HTTP MCP server whose
`bomb` tool answers gzip-compressed whatever the client asked.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.limits import MIB
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import ServerThread, request_body, serve

BOUND = 4 * MIB
"""`bridge.limits.resultBytes` by default."""
DECODED = 16 * MIB
"""The bomb's answer once decoded: four times the bound."""

TOOLS = [{"name": "bomb", "description": "a gzip-compressed 16 MiB answer", "inputSchema": {"type": "object"}},
         {"name": "small", "description": "a small plain answer", "inputSchema": {"type": "object"}}]


def gzip_server(seen: list[str]) -> Any:
    """A stateless MCP server; `bomb` answers gzip-compressed JSON, everything else plain JSON.
    `seen` collects the Accept-Encoding of every tools/call."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # served with lifespan="off"
        body = await request_body(receive)
        request = json.loads(body) if body else {}
        if scope["method"] != "POST" or "id" not in request:
            await send({"type": "http.response.start", "status": 202 if scope["method"] == "POST" else 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        method, params = request["method"], request.get("params") or {}
        headers = [(b"content-type", b"application/json")]
        if method == "initialize":
            answer: dict[str, Any] = {"result": {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                                                 "serverInfo": {"name": "gzip", "version": "1"}}}
        elif method == "tools/list":
            answer = {"result": {"tools": TOOLS}}
        elif method == "tools/call":
            seen.append(dict(scope["headers"]).get(b"accept-encoding", b"").decode())
            text = "x" * (DECODED if params.get("name") == "bomb" else 10)
            answer = {"result": {"content": [{"type": "text", "text": text}]}}
        else:
            answer = {"error": {"code": -32601, "message": f"no method {method}"}}
        data = json.dumps({"jsonrpc": "2.0", "id": request["id"], **answer}).encode()
        if method == "tools/call" and params.get("name") == "bomb":
            data = gzip.compress(data)
            headers.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, list[str]]]:
    seen: list[str] = []
    with serve(gzip_server(seen), lifespan="off") as upstream:
        config = BridgeConfig.model_validate({
            "database": "bridge.db",
            "connections": [{"id": "zip", "owner": "alice", "endpoint": f"{upstream.url}/mcp"}],
        })
        app = bridge_app(config, Path(tmp_path_factory.mktemp("gzip")))
        with serve(app.app) as server:
            yield server, seen


async def call(server: ServerThread, tool: str) -> types.CallToolResult:
    transport = streamable_http_client(f"{server.url}/mcp", http_client=mcp_http("alice-key"), max_sse_event_size=64 * MIB)
    async with Client(transport, mode="legacy") as client:
        return await asyncio.wait_for(client.call_tool(tool, {}), 30)


async def test_a_gzip_compressed_answer_four_times_the_bound_is_not_relayed(bridge: tuple[ServerThread, list[str]]) -> None:
    # R: F1, F10 (the bound counted compressed bytes: 16 KiB on the wire, 16 MiB once decoded)
    server, _ = bridge
    result = await call(server, "zip__bomb")
    assert result.is_error
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert content.text.startswith("tool zip__bomb failed: call bomb on zip:"), content.text
    assert content.text.endswith("the MCP server's answer is content-encoded (gzip); only identity is read"), content.text


async def test_the_gateway_asks_mcp_servers_for_uncompressed_answers_and_reads_plain_ones(
    bridge: tuple[ServerThread, list[str]],
) -> None:
    # R: F1 (a server that honours Accept-Encoding is never refused)
    server, seen = bridge
    result = await call(server, "zip__small")
    assert result.content == [types.TextContent(text="x" * 10)]
    assert seen[-1] == "identity"
