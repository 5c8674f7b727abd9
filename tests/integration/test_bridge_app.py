"""The Bridge inside the gateway app (`create_app`): G3 auth at the edge, MCP and REST routes (F1, F2, F5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.app import create_app
from gateway.config import parse_config
from tests.support import canary
from tests.support.bridge_servers import CallLog, mcp_http, tool_server
from tests.support.http_server import serve


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_gateway_app_serves_the_bridge_behind_its_own_auth(
    tmp_path: Path, mode: str
) -> None:
    # R: F1, F2, F5, B4
    log = CallLog()
    with serve(tool_server(log, delay=0, required_header=(canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN))) as tools:
        config = parse_config(
            {
                "auth": {"mode": "api_keys", "api_keys": [
                    {"key": canary.ALICE_KEY_REF, "user_id": "alice", "email": "alice@acme.test"}]},
                "upstreams": [{"name": "echo", "kind": "inspect"}],
                "routes": [{"model": "m", "upstream": "echo"}],
                "bridge": {
                    "database": "bridge.db",
                    "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp", **canary.connection_auth()}],
                    "bridges": [{"id": "demo", "owner": "alice", "connections": ["tools"]}],
                },
            },
            base_dir=tmp_path,
        )
        with serve(create_app(config)) as gateway:
            http = mcp_http("alice-key")  # alice's canary key
            async with Client(streamable_http_client(f"{gateway.url}/mcp/demo", http_client=http), mode=mode) as alice:
                names = {t.name for t in (await alice.list_tools()).tools}
                result = await alice.call_tool("tools__echo", {"text": "via app"})
            async with mcp_http("wrong-key") as stranger:
                refused = await stranger.get(f"{gateway.url}/bridges")
            async with mcp_http("alice-key") as rest:
                bridges = (await rest.get(f"{gateway.url}/bridges")).json()["data"]
    assert "tools__echo" in names
    assert result.content[0].text == "via app"
    assert refused.status_code == 401
    assert [b["id"] for b in bridges] == ["demo"]
    assert (tmp_path / "bridge.db").exists()
