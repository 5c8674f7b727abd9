"""Small things of the Bridge's `/mcp` seen with clients we did not write: a Host header without a
port, an oversized body, an unknown session id."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.bridge.config import BridgeConfig
from gateway.bridge.endpoint import with_bare_hosts
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import serve

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_a_port_wildcard_admits_the_host_without_a_port() -> None:
    # R: F1
    assert with_bare_hosts(["127.0.0.1:*", "localhost:*", "h:8080"]) == ["127.0.0.1:*", "localhost:*", "h:8080", "127.0.0.1", "localhost"]


async def test_host_without_port_passes_the_loopback_list_a_foreign_host_does_not_and_a_huge_body_is_a_json_rpc_413(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # R: F1
    config = BridgeConfig.model_validate({"database": "e.db", "allowedHosts": ["127.0.0.1:*", "localhost:*"]})
    with serve(bridge_app(config, tmp_path).app) as bridge:
        async with mcp_http("alice-key") as http:
            bare = await http.post(f"{bridge.url}/mcp", json=INIT, headers={**HEADERS, "host": "localhost"})
            loopback = await http.post(f"{bridge.url}/mcp", json=INIT, headers={**HEADERS, "host": "127.0.0.1"})
            foreign = await http.post(f"{bridge.url}/mcp", json=INIT, headers={**HEADERS, "host": "evil.example"})
            huge = await http.post(f"{bridge.url}/mcp", content=b" " * (5 * 1024 * 1024), headers=HEADERS)
            with caplog.at_level(logging.INFO, logger="toolgate.bridge.endpoint"):
                stale = await http.post(f"{bridge.url}/mcp", json=INIT, headers={**HEADERS, "mcp-session-id": "f" * 32})
    assert (bare.status_code, loopback.status_code) == (200, 200)
    assert foreign.status_code == 421
    assert huge.status_code == 413 and huge.headers["content-type"] == "application/json"
    assert huge.json()["error"] == {"code": -32600, "message": "Request body too large (over 4 MiB)"}
    assert stale.status_code == 404
    assert "unknown here (ended, deleted, expired, or opened on another replica)" in caplog.text
    assert "opened by another caller" not in caplog.text
