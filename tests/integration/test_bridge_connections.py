"""Connections as the Bridge's client: credentials by reference, unreachable servers, the per-call
timeout (F3, F10, F11, B4)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.bridge_servers import CallLog, bridge_app, mcp_http, tool_server
from tests.support.http_server import serve

TOKEN = canary.CONNECTION_TOKEN


async def test_a_connections_credential_is_sent_as_its_header_and_never_recorded(tmp_path: Path) -> None:
    # R: F3, F4, B4, G8
    locked, dead = CallLog(), "http://127.0.0.1:9/mcp"
    with serve(tool_server(locked, delay=0, required_header=(canary.CONNECTION_HEADER, TOKEN))) as server:
        config = BridgeConfig.model_validate(
            {
                "database": "c.db",
                "connections": [
                    {"id": "locked", "owner": "alice", "endpoint": f"{server.url}/mcp", **canary.connection_auth()},
                    {"id": "bare", "owner": "alice", "endpoint": f"{server.url}/mcp"},
                    {"id": "gone", "owner": "alice", "endpoint": dead},
                ],
            }
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            http = mcp_http("alice-key")
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=http)) as alice:
                names = {t.name for t in (await alice.list_tools()).tools}
                ok = await alice.call_tool("locked__echo", {"text": "in", "query": TOKEN})
                refused = await alice.call_tool("bare__echo", {"text": "in"})
                unreachable = await alice.call_tool("gone__echo", {"text": "in"})
            assert bridge.loop is not None
            flushed = asyncio.run_coroutine_threadsafe(app.service.audit.flushed(), bridge.loop)
            await asyncio.wait_for(asyncio.wrap_future(flushed), timeout=10)
            async with mcp_http("alice-key") as rest:
                records = (await rest.get(f"{bridge.url}/audit")).json()["data"]
    assert {n.split("__")[0] for n in names} == {"locked", "bare"}, "an unreachable connection lists nothing"
    assert not ok.is_error and ok.content[0].text == "in"
    assert [c.headers.get("x-api-token") for c in locked.of("echo")] == [TOKEN, None]
    assert refused.is_error and TOKEN not in refused.content[0].text
    assert unreachable.is_error and unreachable.content[0].text.startswith("tool gone__echo failed:")
    assert [r["status"] for r in records] == ["failure", "failure", "success"]
    assert records[2]["args"] == {"text": {"type": "string", "length": 2}, "query": {"type": "string", "length": len(TOKEN)}}
    assert TOKEN not in str(records)


async def test_a_tool_call_that_outlives_the_timeout_fails_as_timed_out() -> None:
    # R: F11
    log = CallLog()
    with serve(tool_server(log, delay=5)) as server:
        upstreams = Upstreams(base_dir=Path("."), secrets=SecretSet(), list_ttl=30, timeout=0.3)
        try:
            conn = ConnectionRecord("slow", "alice", f"{server.url}/mcp", source="config")
            with pytest.raises(UpstreamCallFailed, match=r"^call slow_a on slow: timed out after 0.3s$"):
                await upstreams.call_tool(conn, "slow_a", {"query": "q"})
            result = await upstreams.call_tool(conn, "echo", {"text": "still fine"})
        finally:
            await upstreams.close()
    assert result.content[0].text == "still fine"


async def test_a_tool_whose_server_wants_mcp_param_headers_is_called_after_listing_it() -> None:
    # R: F10
    log = CallLog()
    with serve(tool_server(log, delay=0)) as server:
        upstreams = Upstreams(base_dir=Path("."), secrets=SecretSet(), list_ttl=30)
        try:
            conn = ConnectionRecord("hdr", "alice", f"{server.url}/mcp", source="config")
            results = [await upstreams.call_tool(conn, "regional", {"region": "eu"}) for _ in range(2)]
        finally:
            await upstreams.close()
    assert [r.content[0].text for r in results] == ["region=eu", "region=eu"]
    assert [c.headers.get("mcp-param-region") for c in log.of("regional")] == ["eu", "eu"]
