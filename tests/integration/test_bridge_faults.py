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
        "tool faulty__big failed: the result of big is over the limit of 4194304 bytes"
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
    assert app.service.upstreams.sessions_open(("alice", "dying")) == 0, "no session of a dead server is kept"


async def garbage_app(scope: dict[str, object], receive: object, send: object) -> None:
    """Answers every HTTP request with 200 and an HTML page: not MCP at all."""
    if scope["type"] != "http":
        return
    body = b"<html><body>It works!</body></html>"
    await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                "headers": [(b"content-type", b"text/html"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


async def test_a_connection_answering_garbage_contributes_nothing_and_fails_calls_clearly(tmp_path: Path) -> None:
    # R: F13, F14
    good = FaultState()
    with serve(garbage_app) as garbage, serve(fault_app(good)) as fine:
        config = BridgeConfig.model_validate(
            {
                "database": "g.db",
                "connections": [
                    {"id": "junk", "owner": "alice", "endpoint": f"{garbage.url}/mcp"},
                    {"id": "fine", "owner": "alice", "endpoint": f"{fine.url}/mcp"},
                ],
            }
        )
        with serve(bridge_app(config, tmp_path).app) as bridge:
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice:
                names = {t.name for t in (await alice.list_tools()).tools}
                junk = await asyncio.wait_for(alice.call_tool("junk__count", {}), 30)
                ok = await alice.call_tool("fine__count", {})
                resources = (await alice.list_resources()).resources
    assert names and all(n.startswith("fine__") for n in names), "the garbage connection lists nothing"
    assert junk.is_error and text(junk).startswith("tool junk__count failed: ")
    assert not ok.is_error and text(ok).endswith(" call 1")
    assert resources == []
