"""A session-ful server sends what belongs to no request of the client (list_changed, resource
updates, and the TypeScript SDK's `server.request` elicitations) on the session's own event stream
only, and drops it while that stream is not open. The MCP client layer hands out a session only
once the server answered the stream, so a call made at once does not lose what its server sends
there — against a real Python SDK server that is slow to open the stream, and the TypeScript
conformance fixture whose elicitation tool asks that way."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types

from gateway.mcp.target import McpClients, McpTarget
from tests.support.conformance import ConformanceFixture
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app

DEADLINE = 10.0


async def test_what_a_slow_server_sends_on_the_session_stream_during_the_first_call_arrives() -> None:
    # R: F14
    state = McpServerState(event_stream_delay=0.5)
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    clients = McpClients()
    try:
        with serve(http_app(state, legacy_only=True, subscriptions=True)) as server:
            target = McpTarget(label="slow-stream", endpoint=f"{server.url}/mcp")
            async with clients.session(target, {"message_handler": on_message}) as client:
                result = await client.call_tool("grow", {})  # the server tells every session: on the stream
                assert not result.is_error and result.content[0].text == "told 1"
                await asyncio.wait_for(changed.wait(), DEADLINE)
    finally:
        await clients.close()


async def test_an_elicitation_the_typescript_fixture_asks_outside_the_call_reaches_the_client() -> None:
    # R: F14
    fixture = ConformanceFixture().start()
    clients = McpClients()
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"untitledSingle": "option1"})

    try:
        target = McpTarget(label="fixture", endpoint=fixture.url, protocol="legacy")
        for _ in range(3):  # each a new session, its first call at once
            async with clients.session(target, {"elicitation_callback": elicit}) as client:
                result = await client.call_tool("test_elicitation_sep1330_enums", {})
            assert "Elicitation completed: action=accept" in result.content[0].text
        assert len(asked) == 3
    finally:
        await clients.close()
        fixture.stop()
