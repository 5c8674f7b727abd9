"""How the gateway wires the Bridge (F1, F2): with auth off, only loopback hosts may reach /mcp."""

from __future__ import annotations

from pathlib import Path

import httpx2

from tests.support.gateway import running_gateway, simple_config
from tests.support.upstream import ScriptedUpstream

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_anonymous_bridge_refuses_a_foreign_host_or_origin(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: F1, F2
    config = simple_config(upstream.url, bridge={"enabled": True, "database": str(tmp_path / "bridge.db")})
    with running_gateway(config, tmp_path) as gw:
        local = httpx2.post(gw.url + "/mcp", json=INITIALIZE, headers=HEADERS)
        local_origin = httpx2.post(gw.url + "/mcp", json=INITIALIZE, headers={**HEADERS, "origin": f"http://127.0.0.1:{gw.port}"})
        rebound = httpx2.post(gw.url + "/mcp", json=INITIALIZE, headers={**HEADERS, "host": "evil.example"})
        foreign_origin = httpx2.post(gw.url + "/mcp", json=INITIALIZE, headers={**HEADERS, "origin": "http://evil.example"})
    assert local.status_code == 200 and local_origin.status_code == 200
    assert rebound.status_code == 421
    assert foreign_origin.status_code == 403
