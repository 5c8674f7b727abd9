"""Against a server we did not write: npm `@modelcontextprotocol/server-everything` (TypeScript SDK),
restarted mid-conversation. Its new process answers the old session id with HTTP 400 "Bad Request:
No valid session ID provided" (not 404); the next turn must still work (B16)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import serve
from tests.support.mcp_bridge import context, metric, running_bridge
from tests.support.node_servers import EverythingServer

DOC = "demo://resource/static/document/architecture.md"


@pytest.fixture
def everything() -> Iterator[EverythingServer]:
    server = EverythingServer().start()
    try:
        yield server
    finally:
        server.stop()


def ask(text: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}]}


async def test_a_conversation_survives_a_typescript_server_restart_tool_prefetch_and_resource(
    everything: EverythingServer,
) -> None:
    # R: B16
    fields = dict(endpoint=everything.url, authHeaderName=None, resources=DOC, prefetchTool="echo",
                  prefetchArguments={"message": "{{last_user_message}}"})
    async with running_bridge(**fields) as (bridge, registry):
        first = await bridge.call_tool(context("conv-ts"), "echo", {"message": "before"})
        everything.restart()
        second = await bridge.call_tool(context("conv-ts"), "echo", {"message": "after"})
        out = await bridge.before_model(context("conv-ts"), ask("still here"))
        replaced = metric(registry, "toolgate_mcp_sessions_replaced_total", server="docs")
    assert (first.text, first.is_error) == ("Echo: before", False)
    assert (second.text, second.is_error) == ("Echo: after", False), "the turn after the restart works"
    injected = str(out["messages"][-1]["content"])  # type: ignore[index]
    assert "Echo: still here" in injected, "the prefetch after the restart works"
    assert "Everything Server – Architecture" in injected, "the resource read after the restart works"
    assert replaced == 1, "the ended session was replaced once, not per call"


async def test_a_federated_call_through_the_bridge_survives_a_typescript_server_restart(
    everything: EverythingServer, tmp_path: Path
) -> None:
    # R: B16, F15
    config = BridgeConfig.model_validate(
        {"database": "ts.db", "connections": [{"id": "every", "owner": "alice", "endpoint": everything.url}]}
    )
    app = bridge_app(config, tmp_path)
    with serve(app.app) as bridge:
        async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice:
            names = {t.name for t in (await alice.list_tools()).tools}
            before = await alice.call_tool("every__echo", {"message": "one"})
            again = await alice.call_tool("every__echo", {"message": "two"})
            pooled = app.service.upstreams.sessions_open(("alice", "every"))
            everything.restart()
            after = await alice.call_tool("every__echo", {"message": "three"})
    assert "every__echo" in names and "every__get-sum" in names
    # R: F14 — a tool that requires task-augmented execution could never succeed through the Bridge
    assert "every__simulate-research-query" not in names
    assert [r.content[0].text for r in (before, again, after)] == ["Echo: one", "Echo: two", "Echo: three"]  # type: ignore[union-attr]
    assert not after.is_error
    assert pooled == 1, "two calls of one caller share one upstream session"


async def test_resource_updates_of_a_typescript_server_reach_the_subscriber_through_the_bridge_across_a_restart(
    everything: EverythingServer, tmp_path: Path
) -> None:
    # R: F14, B16
    config = BridgeConfig.model_validate(
        {"database": "sub.db", "connections": [{"id": "every", "owner": "alice", "endpoint": everything.url}]}
    )
    updates: list[str] = []
    arrived = asyncio.Condition()

    async def inbox(message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            async with arrived:
                updates.append(str(message.params.uri))
                arrived.notify_all()

    async def updated(count: int) -> None:
        async with arrived:
            await asyncio.wait_for(arrived.wait_for(lambda: len(updates) >= count), 20)

    with serve(bridge_app(config, tmp_path).app) as bridge:
        async with Client(
            streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key")), mode="legacy", message_handler=inbox
        ) as alice:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # subscriptions are deprecated as of 2026-07-28
                await alice.subscribe_resource(DOC)
            started = await alice.call_tool("every__toggle-subscriber-updates", {})  # the server sends one now, then every 5 s
            await updated(1)
            everything.restart()  # its sessions and subscriptions are gone
            count = len(updates)
            restarted = await alice.call_tool("every__toggle-subscriber-updates", {})  # replaces the session, which subscribes again
            await updated(count + 1)
    assert not started.is_error and not restarted.is_error
    assert set(updates) == {DOC}
