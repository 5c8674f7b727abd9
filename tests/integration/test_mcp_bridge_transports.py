"""Both server generations and stdio (B1, B14, B15): session-ful, stateless, and a child process."""

from __future__ import annotations

import sys

from gateway.mcp.target import stdio_parameters
from tests.support.http_server import serve
from tests.support.mcp_bridge import context, metric, running_bridge
from tests.support.mcp_servers import McpServerState, http_app

STDIO = ["python", "-m", "tests.support.mcp_servers", "--stdio"]


# R: B1, B14
async def test_a_stateless_2026_server_is_served_without_a_session_and_the_pooled_client_is_reused() -> None:
    state = McpServerState(require_credential=True)  # running_bridge sends the canary credential
    with serve(http_app(state, stateless=True)) as server:
        async with running_bridge(endpoint=server.url + "/mcp") as (bridge, registry):
            tools = [t.name for t in await bridge.tools(context("conv-a"))]
            results = [(await bridge.call_tool(context("conv-a", f"r{i}"), "count", {})).text for i in range(2)]
            assert metric(registry, "toolgate_mcp_sessions_opened_total", server="docs") == 1
    assert "count" in tools
    assert results == ["session stateless call 1", "session stateless call 2"]
    assert state.opened == []
    assert state.methods["initialize"] == 0


# R: B14
async def test_protocol_legacy_forces_a_2025_session_on_a_server_that_speaks_both() -> None:
    state = McpServerState(require_credential=True)
    with serve(http_app(state)) as server:
        async with running_bridge(endpoint=server.url + "/mcp", protocol="legacy") as (bridge, _):
            first = await bridge.call_tool(context("conv-a"), "count", {})
            second = await bridge.call_tool(context("conv-a", "r2"), "count", {})
    assert len(state.opened) == 1
    assert [first.text, second.text] == [f"session {state.opened[0]} call 1", f"session {state.opened[0]} call 2"]
    assert state.deleted == state.opened


# R: B1, B14, B15
async def test_a_stdio_server_keeps_one_process_per_conversation_and_one_per_unpooled_request() -> None:
    async with running_bridge(command=STDIO, timeoutSeconds=20) as (bridge, registry):
        pooled = [(await bridge.call_tool(context("conv-a", f"r{i}"), "count", {})).text for i in range(3)]
        unpooled = context(None, "req-x")
        alone = (await bridge.call_tool(unpooled, "count", {})).text
        await bridge.end_request(unpooled)
        assert metric(registry, "toolgate_mcp_sessions_open", server="docs") == 1
    assert pooled == ["session stdio call 1", "session stdio call 2", "session stdio call 3"]
    assert alone == "session stdio call 1"


def test_a_bare_python_command_runs_under_this_interpreter() -> None:
    assert stdio_parameters(["python3", "-m", "x"]).command == sys.executable
    assert stdio_parameters(["python", "-m", "x"]).args == ["-m", "x"]
    assert stdio_parameters(["/usr/bin/env", "node"]).command == "/usr/bin/env"


# R: B16
async def test_a_stdio_server_that_dies_is_replaced_by_a_new_process_and_the_call_succeeds() -> None:
    import os
    import signal

    async with running_bridge(command=STDIO, timeoutSeconds=20) as (bridge, registry):
        first = int((await bridge.call_tool(context("conv-a"), "pid", {})).text)
        os.kill(first, signal.SIGKILL)
        again = await bridge.call_tool(context("conv-a", "r2"), "pid", {})
        assert metric(registry, "toolgate_mcp_sessions_replaced_total", server="docs") == 1
    assert again.is_error is False
    assert int(again.text) != first
