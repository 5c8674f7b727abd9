"""Bad connections behind the Bridge (issue 11, "Bad input"): an answer too large to relay, a server
that dies mid-call, a server that ends the session. The caller gets a clear error, the Bridge
keeps serving everyone else, and no upstream session is left behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.faults import FaultState, FaultSubprocess, fault_app
from tests.support.http_server import serve


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_an_answer_too_large_to_relay_is_a_clear_error_and_others_are_served_meanwhile(tmp_path: Path) -> None:
    # R: F14, F15
    state = FaultState()
    with serve(fault_app(state)) as faulty:
        config = BridgeConfig.model_validate(
            {
                "database": "f.db",
                "connections": [
                    {"id": "faulty", "owner": "alice", "endpoint": f"{faulty.url}/mcp"},
                    {"id": "same", "owner": "bob", "endpoint": f"{faulty.url}/mcp"},
                ],
            }
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            async with (
                Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice,
                Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("bob-key"))) as bob,
            ):
                big, bobs = await asyncio.gather(
                    alice.call_tool("faulty__big", {"megabytes": 20}), bob.call_tool("same__count", {})
                )
                after = await alice.call_tool("faulty__count", {})
        closed = state.wait_for(lambda: sorted(state.deleted) == sorted(state.opened), timeout=10)
    assert big.is_error
    assert text(big) == (
        "tool faulty__big failed: call big on faulty: the MCP server's answer could not be read (too large or malformed)"
    )
    assert not bobs.is_error and text(bobs).endswith(" call 1")
    assert text(after).endswith(" call 1") and not after.is_error, "alice's session survives an answer it could not read"
    assert state.calls["big"] == 1, "the same call would fail the same way: not run again"
    assert closed, "stopping the Bridge closed (DELETE) every upstream session"


async def test_a_connection_dying_mid_call_fails_that_call_and_the_next_call_opens_a_new_session(tmp_path: Path) -> None:
    # R: B16, F15
    dying = FaultSubprocess()
    try:
        config = BridgeConfig.model_validate(
            {"database": "d.db", "connections": [{"id": "dying", "owner": "alice", "endpoint": dying.url}]}
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice:
                died = await asyncio.wait_for(alice.call_tool("dying__exit", {}), 30)
                gone = await asyncio.wait_for(alice.call_tool("dying__count", {}), 30)
    finally:
        dying.stop()
    assert died.is_error and text(died).startswith("tool dying__exit failed: call exit on dying: ")
    assert gone.is_error and text(gone) == "tool dying__count failed: call count on dying: the MCP server could not be reached"
    assert app.service.upstreams.sessions_open("dying") == 0, "no session of a dead server is kept"
