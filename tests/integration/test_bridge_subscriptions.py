"""What a connection sends outside any call reaches the caller's Bridge session (F14): resource
updates to the session that subscribed (through the Bridge) until it unsubscribes, and list
changes to the caller's live sessions — with an SDK-built server that supports subscriptions and
the SDK client as the caller."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app

DEADLINE = 10.0


class Inbox:
    """The notifications one client received, with a wait for the next of a kind."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = asyncio.Condition()

    async def __call__(self, message: Any) -> None:
        async with self._changed:
            self.items.append(message)
            self._changed.notify_all()

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.items if isinstance(m, kind)]

    async def wait_for(self, kind: type, count: int = 1) -> list[Any]:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.of(kind)) >= count), DEADLINE)
        return self.of(kind)


def updated_uris(inbox: Inbox) -> list[str]:
    return [str(m.params.uri) for m in inbox.of(types.ResourceUpdatedNotification)]


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def caller(bridge_url: str, key: str, inbox: Inbox | None = None) -> Client:
    """A session-ful (2025-11-25) SDK client of the Bridge presenting `key`, its notifications in `inbox`."""
    return Client(streamable_http_client(f"{bridge_url}/mcp", http_client=mcp_http(key)), mode="legacy", message_handler=inbox)


@contextlib.contextmanager
def quiet() -> Any:
    with warnings.catch_warnings():  # subscriptions are deprecated as of 2026-07-28, still served before
        warnings.simplefilter("ignore")
        yield


async def test_a_subscriber_gets_the_resource_updates_of_its_connection_until_it_unsubscribes(tmp_path: Path) -> None:
    # R: F14, F13
    state = McpServerState()
    with serve(http_app(state, legacy_only=True, subscriptions=True)) as server:
        config = BridgeConfig.model_validate(
            {
                "database": "sub.db",
                "connections": [
                    {"id": "docs", "owner": "alice", "endpoint": f"{server.url}/mcp"},
                    {"id": "his", "owner": "bob", "endpoint": f"{server.url}/mcp"},
                ],
            }
        )
        with serve(bridge_app(config, tmp_path).app) as bridge:
            alice_inbox, bob_inbox = Inbox(), Inbox()
            async with (
                caller(bridge.url, "alice-key", alice_inbox) as alice,
                caller(bridge.url, "bob-key", bob_inbox) as bob,
                Client(f"{server.url}/mcp", mode="legacy") as changer,
            ):
                with quiet():
                    await alice.subscribe_resource("docs://guide")
                    await bob.subscribe_resource("docs://notes")
                told_alice = text(await changer.call_tool("touch", {"uri": "docs://guide"}))
                await alice_inbox.wait_for(types.ResourceUpdatedNotification)
                told_bob = text(await changer.call_tool("touch", {"uri": "docs://notes"}))
                await bob_inbox.wait_for(types.ResourceUpdatedNotification)
                alice_saw, bob_saw = updated_uris(alice_inbox), updated_uris(bob_inbox)
                with quiet():
                    await alice.unsubscribe_resource("docs://guide")
                told_after = text(await changer.call_tool("touch", {"uri": "docs://guide"}))
    assert (told_alice, told_bob) == ("told 1", "told 1"), "each subscription reached the server on its caller's session"
    assert alice_saw == ["docs://guide"], "the update, under the resource's URI in the federation (unchanged)"
    assert bob_saw == ["docs://notes"], "nothing crosses callers"
    assert [uri for _, uri in state.unsubscribed] == ["docs://guide"]
    assert told_after == "told 0", "the unsubscription reached the server"


async def test_a_connections_list_changes_reach_its_callers_session_and_the_new_tool_list_is_served_at_once(
    tmp_path: Path,
) -> None:
    # R: F14, F13
    state = McpServerState()
    with serve(http_app(state, legacy_only=True, subscriptions=True)) as server:
        config = BridgeConfig.model_validate(
            {"database": "grow.db", "connections": [{"id": "docs", "owner": "alice", "endpoint": f"{server.url}/mcp"}]}
        )
        with serve(bridge_app(config, tmp_path).app) as bridge:
            inbox = Inbox()
            async with (
                caller(bridge.url, "alice-key", inbox) as alice,
                Client(f"{server.url}/mcp", mode="legacy") as changer,
            ):
                before = {t.name for t in (await alice.list_tools()).tools}  # listed and cached (toolListTtlSeconds: 30)
                await alice.call_tool("docs__count", {})  # the caller's session of the connection is open
                await changer.call_tool("grow", {})
                for kind in (types.ToolListChangedNotification, types.ResourceListChangedNotification,
                             types.PromptListChangedNotification):
                    await inbox.wait_for(kind)
                after = {t.name for t in (await alice.list_tools()).tools}
    assert "docs__grown" not in before
    assert after == before | {"docs__grown"}, "the connection's cached listing was dropped on its list_changed"


async def test_a_subscribed_session_stays_open_while_idle_sessions_are_closed(tmp_path: Path) -> None:
    # R: F14, F15
    state = McpServerState()
    with serve(http_app(state, legacy_only=True, subscriptions=True)) as server:
        config = BridgeConfig.model_validate(
            {
                "database": "idle.db",
                "sessionIdleSeconds": 0.3,
                "connections": [
                    {"id": "docs", "owner": "alice", "endpoint": f"{server.url}/mcp"},
                    {"id": "his", "owner": "bob", "endpoint": f"{server.url}/mcp"},
                ],
            }
        )
        with serve(bridge_app(config, tmp_path).app) as bridge:
            inbox = Inbox()
            async with (
                caller(bridge.url, "alice-key", inbox) as alice,
                caller(bridge.url, "bob-key") as bob,
                Client(f"{server.url}/mcp", mode="legacy") as changer,
            ):
                with quiet():
                    await alice.subscribe_resource("docs://guide")
                subscribed = set(state.subscribers["docs://guide"])
                # bob's session of his connection opens after alice subscribed, so it idles out after hers would
                bob_session = text(await bob.call_tool("his__count", {})).split()[1]
                closed = await asyncio.to_thread(state.wait_for, lambda: bob_session in state.deleted, DEADLINE)
                kept = not (subscribed & set(state.deleted))
                told = text(await changer.call_tool("touch", {"uri": "docs://guide"}))
                await inbox.wait_for(types.ResourceUpdatedNotification)
            # alice's client closed (DELETE): her subscription ends with her Bridge session, and the
            # upstream session kept for it is closed once idle
            released = await asyncio.to_thread(state.wait_for, lambda: subscribed <= set(state.deleted), DEADLINE)
    assert closed, "an idle session without subscriptions is closed"
    assert kept and told == "told 1", "the subscribed session was kept open"
    assert updated_uris(inbox) == ["docs://guide"]
    assert released, "nothing is left behind once the subscriber is gone"
