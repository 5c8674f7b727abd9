"""The pool holds more open sessions than an HTTP client's default connection limit (B14).

Each open session of a session-ful server keeps one HTTP connection for its event stream for
as long as the session lives, so a limit of 100 connections (httpx's default) would make the
101st conversation wait for a connection until `timeoutSeconds` and fail, and its replaced
sessions could not be closed either (found by the 200-conversation load test, bench/load.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.support.http_server import ServerThread, serve
from tests.support.mcp_bridge import context, metric, running_bridge
from tests.support.mcp_servers import McpServerState, http_app

CONVERSATIONS = 120


@pytest.fixture
def state() -> McpServerState:
    return McpServerState(require_credential=True)


@pytest.fixture
def sessionful(state: McpServerState) -> Iterator[ServerThread]:
    with serve(http_app(state, legacy_only=True)) as server:
        yield server


# R: B14, B17
async def test_more_open_sessions_than_a_default_connection_limit_all_work_and_all_close(
    state: McpServerState, sessionful: ServerThread
) -> None:
    async with running_bridge(endpoint=sessionful.url + "/mcp", timeoutSeconds=20,
                              sessionIdleSeconds=60) as (bridge, registry):
        first = await asyncio.gather(*(bridge.call_tool(context(f"conv-{i}"), "count", {}) for i in range(CONVERSATIONS)))
        assert [r.text.endswith(" call 1") for r in first] == [True] * CONVERSATIONS
        assert len(state.live_sessions) == CONVERSATIONS
        # Every session is still usable while all of them are open: the second turn reuses it.
        second = await asyncio.gather(*(bridge.call_tool(context(f"conv-{i}", "r2"), "count", {}) for i in range(CONVERSATIONS)))
        assert [r.text.endswith(" call 2") for r in second] == [True] * CONVERSATIONS
        assert metric(registry, "toolgate_mcp_sessions_open", server="docs") == CONVERSATIONS
    # Stopping the plugin closes every session on the server (DELETE got through for each).
    assert await asyncio.to_thread(state.wait_for, lambda: not state.live_sessions, 20.0)
    assert len(state.opened) == CONVERSATIONS
