"""The session pool against real MCP servers on loopback (B13–B17)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tests.support.http_server import ServerThread, serve
from tests.support.mcp_bridge import context, metric, running_bridge
from tests.support.mcp_servers import HttpSubprocess, McpServerState, http_app


@pytest.fixture
def state() -> McpServerState:
    return McpServerState(require_credential=True)  # running_bridge sends the canary credential


@pytest.fixture
def sessionful(state: McpServerState) -> Iterator[ServerThread]:
    """A 2025-11-25 server: refuses the 2026 probe, so clients open an `Mcp-Session-Id` session."""
    with serve(http_app(state, legacy_only=True)) as server:
        yield server


SCALE_CONVERSATIONS = 120
"""More open sessions than an HTTP client's default connection limit (100)."""


async def wait(state: McpServerState, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Wait, off the event loop, until the server's state satisfies `predicate` (deadline `timeout`)."""
    return await asyncio.to_thread(state.wait_for, predicate, timeout)


# R: B14
async def test_three_turns_of_one_conversation_share_one_session_and_another_conversation_gets_its_own(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, registry):
        texts = [(await bridge.call_tool(context("conv-a", f"r{i}"), "count", {})).text for i in range(3)]
        other = (await bridge.call_tool(context("conv-b", "r9"), "count", {})).text
    first, second = state.opened
    assert texts == [f"session {first} call 1", f"session {first} call 2", f"session {first} call 3"]
    assert other == f"session {second} call 1"
    assert metric(registry, "toolgate_mcp_sessions_opened_total", server="docs") == 2


# R: B14, B16
async def test_the_protocol_is_probed_once_for_all_sessions_of_a_node(state: McpServerState) -> None:
    with serve(http_app(state)) as stateless:  # speaks 2026-07-28: the probe (server/discover) is answered
        async with running_bridge(endpoint=stateless.url + "/mcp") as (bridge, _):
            texts = [(await bridge.call_tool(context(f"conv-{i}", f"r{i}"), "echo", {"i": i})).text for i in range(4)]
    assert texts == [f'{{"i": {i}}}' for i in range(4)]
    assert state.methods["server/discover"] == 1, "four conversations' sessions, one probe"


# R: B14
async def test_tools_listing_is_cached_on_the_pooled_session(state: McpServerState, sessionful: ServerThread) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, _):
        for i in range(3):
            names = [t.name for t in await bridge.tools(context("conv-a", f"r{i}"))]
    assert names == ["count", "echo", "fail", "slow", "image", "secret_tool", "pid", "whoami"]
    assert state.methods["tools/list"] == 1


# R: B14
async def test_a_session_idle_past_its_lifetime_is_closed_on_the_server(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", sessionIdleSeconds=0.2) as (bridge, registry):
        await bridge.call_tool(context("conv-a"), "count", {})
        assert state.live_sessions == state.opened
        assert await wait(state, lambda: state.deleted == state.opened)
        assert metric(registry, "toolgate_mcp_sessions_open", server="docs") == 0
        assert metric(registry, "toolgate_mcp_sessions_closed_total", server="docs") == 1
        again = await bridge.call_tool(context("conv-a", "r2"), "count", {})
    assert again.text == f"session {state.opened[1]} call 1"


# R: B15
async def test_a_request_without_a_conversation_key_gets_its_own_session_closed_when_it_ends(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, _):
        ctx = context(None, "req-x")
        await bridge.call_tool(ctx, "count", {})
        await bridge.call_tool(ctx, "count", {})
        assert len(state.live_sessions) == 1
        await bridge.end_request(ctx)
        assert state.deleted == state.opened
        await bridge.call_tool(context(None, "req-y"), "count", {})
    assert len(state.opened) == 2


# R: B15, G4
async def test_two_unpooled_requests_sending_the_same_request_id_never_share_a_session(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, _):
        one, two = context(None, "same-id"), context(None, "same-id")
        a = await bridge.call_tool(one, "count", {})
        b = await bridge.call_tool(two, "count", {})
        await bridge.end_request(one)
        c = await bridge.call_tool(two, "count", {})
        assert len(state.live_sessions) == 1
        await bridge.end_request(two)
        first, second = state.opened
        assert [a.text, b.text, c.text] == [f"session {first} call 1", f"session {second} call 1", f"session {second} call 2"]
        assert state.deleted == [first, second]


# R: B15
async def test_an_unpooled_session_whose_request_end_never_came_is_closed_when_idle(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", sessionIdleSeconds=0.2) as (bridge, registry):
        await bridge.call_tool(context(None, "lost"), "count", {})
        assert await wait(state, lambda: len(state.opened) == 1 and state.deleted == state.opened)
        assert metric(registry, "toolgate_mcp_sessions_open", server="docs") == 0


# R: B16
async def test_a_session_killed_on_the_server_is_replaced_and_the_call_succeeds(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, registry):
        await bridge.call_tool(context("conv-a"), "count", {})
        state.kill(state.opened[0])
        result = await bridge.call_tool(context("conv-a", "r2"), "count", {})
        assert metric(registry, "toolgate_mcp_sessions_replaced_total", server="docs") == 1
    assert result.is_error is False
    assert result.text == f"session {state.opened[1]} call 1"
    assert state.calls["count"] == 2


# R: B16
async def test_a_call_is_retried_once_not_twice_when_the_new_session_is_ended_too(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, registry):
        await bridge.call_tool(context("conv-a"), "count", {})
        state.end_every_session = True
        result = await bridge.call_tool(context("conv-a", "r2"), "count", {})
        assert metric(registry, "toolgate_mcp_tool_calls_total", server="docs", status="failed") == 1
    assert result.is_error is True
    assert result.text == "the tool failed: the MCP session ended"
    assert len(state.opened) == 2


# R: B13, B16
async def test_a_stopped_server_yields_the_tool_failed_and_the_next_call_does_not_hang() -> None:
    server = HttpSubprocess("--legacy-only")
    try:
        async with running_bridge(endpoint=server.url) as (bridge, registry):
            ok = await bridge.call_tool(context("conv-a"), "count", {})
            server.stop()
            failed = await bridge.call_tool(context("conv-a", "r2"), "count", {})
            tools = await bridge.tools(context("conv-b", "r3"))
    finally:
        server.stop()
    assert ok.is_error is False
    assert failed.is_error is True
    assert failed.text == "the tool failed: the MCP server could not be reached"
    assert tools == []


# R: B13, B17
async def test_a_call_past_timeout_seconds_fails_and_leaves_the_session_usable(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", timeoutSeconds=0.3) as (bridge, _):
        slow = await bridge.call_tool(context("conv-a"), "slow", {"delay": 5})
        after = await bridge.call_tool(context("conv-a", "r2"), "count", {})
    assert slow.is_error is True
    assert slow.text.startswith("the tool failed: ")
    assert after.text == f"session {state.opened[0]} call 1"
    assert len(state.opened) == 1


# R: B17
async def test_session_set_up_is_bounded_by_timeout_seconds() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts connections, never answers
    port = listener.getsockname()[1]
    try:
        async with running_bridge(endpoint=f"http://127.0.0.1:{port}/mcp", timeoutSeconds=0.3) as (bridge, _):
            result = await bridge.call_tool(context("conv-a"), "count", {})
    finally:
        listener.close()
    assert result.is_error is True
    assert result.text == "the tool failed: the MCP session could not be opened within 0.3s"


# R: B14
async def test_parallel_calls_of_one_conversation_open_a_single_session(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, _):
        results = await asyncio.gather(*(bridge.call_tool(context("conv-a", f"r{i}"), "count", {}) for i in range(4)))
    assert len(state.opened) == 1
    assert sorted(r.text for r in results) == [f"session {state.opened[0]} call {n}" for n in range(1, 5)]


# R: B14
async def test_stop_closes_every_session_on_the_server(state: McpServerState, sessionful: ServerThread) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, _):
        await bridge.call_tool(context("conv-a"), "count", {})
        await bridge.call_tool(context("conv-b"), "count", {})
    assert sorted(state.deleted) == sorted(state.opened)
    assert state.live_sessions == []


# R: B3
async def test_a_call_outside_the_filter_is_answered_with_an_error_and_never_reaches_the_server(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", toolFilter=["count"]) as (bridge, registry):
        offered = [t.name for t in await bridge.tools(context())]
        refused = await bridge.call_tool(context(), "secret_tool", {})
        assert metric(registry, "toolgate_mcp_tool_calls_total", server="docs", status="refused") == 1
    assert offered == ["count"]
    assert refused.is_error is True
    assert refused.text == "the tool failed: tool 'secret_tool' is not allowed on this server"
    assert state.calls["secret_tool"] == 0


# R: B1, B10
async def test_tool_results_report_binary_content_by_mime_type_and_tool_errors_as_failures(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp") as (bridge, registry):
        image = await bridge.call_tool(context(), "image", {})
        failed = await bridge.call_tool(context(), "fail", {})
        assert metric(registry, "toolgate_mcp_tool_calls_total", server="docs", status="error") == 1
    assert (image.text, image.is_error) == ("a logo\n[binary content: image/png, 64 bytes]", False)
    assert (failed.text, failed.is_error) == ("the tool failed: boom", True)


# R: B14
async def test_a_session_with_a_call_in_flight_is_not_closed_before_its_idle_lifetime_after_the_call(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", sessionIdleSeconds=0.2) as (bridge, _):
        slow = await bridge.call_tool(context("conv-a"), "slow", {"delay": 0.6})
        assert state.deleted == []
        assert await wait(state, lambda: state.deleted == state.opened)
    assert slow.text == "slow done"


# More open sessions than an HTTP client's default connection limit: each open session of a session-ful
# server keeps one connection for its event stream while it lives, so a limit of 100 (httpx's
# default) made the 101st conversation wait until `timeoutSeconds` and fail (found by bench/load.py).
# R: B14, B17
async def test_more_open_sessions_than_a_default_connection_limit_all_work_and_all_close(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", timeoutSeconds=20,
                              sessionIdleSeconds=60) as (bridge, registry):
        first = await asyncio.gather(*(bridge.call_tool(context(f"conv-{i}"), "count", {}) for i in range(SCALE_CONVERSATIONS)))
        assert [r.text.endswith(" call 1") for r in first] == [True] * SCALE_CONVERSATIONS
        assert len(state.live_sessions) == SCALE_CONVERSATIONS
        # Every session is still usable while all of them are open: the second turn reuses it.
        second = await asyncio.gather(*(bridge.call_tool(context(f"conv-{i}", "r2"), "count", {}) for i in range(SCALE_CONVERSATIONS)))
        assert [r.text.endswith(" call 2") for r in second] == [True] * SCALE_CONVERSATIONS
        assert metric(registry, "toolgate_mcp_sessions_open", server="docs") == SCALE_CONVERSATIONS
    # Stopping the plugin closes every session on the server (DELETE got through for each).
    assert await asyncio.to_thread(state.wait_for, lambda: not state.live_sessions, 20.0)
    assert len(state.opened) == SCALE_CONVERSATIONS
