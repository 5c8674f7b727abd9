"""The Bridge's upstream sessions (F15): reused per caller, never shared, closed when idle; the
discovery result cached; connection name prefixes, the empty one included; TCP connections and
the caller's connection list reused between calls."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from gateway.bridge.config import BridgeConfig
from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.store_sqlite import SqliteStore
from gateway.bridge.upstream import Upstreams
from gateway.identity import Identity
from gateway.secrets import SecretSet
from tests.support.bridge_servers import bridge_app, edge, graph, mcp_http, node, pipeline, tool_node
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app


def texts(result: Any) -> str:
    return str(result.content[0].text)


@contextlib.asynccontextmanager
async def upstreams_over(server_url: str, tmp_path: Path, connection_id: str, owner: str) -> AsyncIterator[tuple[Upstreams, ConnectionRecord]]:
    """The Bridge's client side with one connection to the server at `server_url`; closed after."""
    upstreams = Upstreams(base_dir=tmp_path, secrets=SecretSet(), list_ttl=30)
    try:
        yield upstreams, ConnectionRecord(connection_id, owner, f"{server_url}/mcp", source="config")
    finally:
        await upstreams.close()


async def test_a_callers_federated_calls_share_one_upstream_session_that_no_other_caller_uses(tmp_path: Path) -> None:
    # R: F15
    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as server:
        async with upstreams_over(server.url, tmp_path, "shared", "org:acme") as (upstreams, conn):
            alice = [texts(await upstreams.call_tool_as("alice", conn, "count", {})) for _ in range(3)]
            bob = texts(await upstreams.call_tool_as("bob", conn, "count", {}))
            open_now = upstreams.sessions_open(conn.key)
    alice_session = alice[0].split()[1]
    assert alice == [f"session {alice_session} call {n}" for n in (1, 2, 3)], "one session for all of alice's calls"
    assert bob.startswith("session ") and bob.endswith(" call 1") and alice_session not in bob, "bob has his own"
    assert open_now == 2 and len(state.opened) == 2
    assert sorted(state.deleted) == sorted(state.opened), "closing the Bridge closes (DELETE) every session"


@pytest.mark.parametrize("legacy_only", [True, False], ids=["2025-11-25 session", "2026-07-28 stateless"])
async def test_a_callers_calls_reuse_one_tcp_connection_although_the_answers_are_streamed(tmp_path: Path, legacy_only: bool) -> None:
    # R: F15
    # The SDK closes an answer's event stream before the server's end of it; unless the rest is
    # read, that connection cannot be reused and each call costs a new TCP connection.
    state = McpServerState()
    with serve(http_app(state, legacy_only=legacy_only)) as server:
        async with upstreams_over(server.url, tmp_path, "tools", "alice") as (upstreams, conn):
            answers = [texts(await upstreams.call_tool_as("alice", conn, "count", {})) for _ in range(6)]
    assert answers[-1].endswith(" call 6")
    assert sum(state.call_peers.values()) == 6, "every call was a POST"
    # The calls go on the session's lean HTTP/1.1 client (one connection); the session's opening
    # (initialize, its notification, the event stream) on its httpx2 client, which may take a second
    # connection when a POST overlapped the GET: the calls alone must share one.
    assert len(state.call_peers) == 1, f"the calls came over {len(state.call_peers)} TCP connections: {dict(state.call_peers)}"
    assert len(state.peers) <= 3, f"POSTs came over {len(state.peers)} TCP connections: {dict(state.peers)}"


async def test_through_the_endpoint_each_caller_keeps_one_session_and_an_idle_one_is_closed(tmp_path: Path) -> None:
    # R: F15
    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as server:
        config = BridgeConfig.model_validate(
            {
                "database": "s.db",
                "sessionIdleSeconds": 0.5,
                "connections": [
                    {"id": "mine", "owner": "alice", "endpoint": f"{server.url}/mcp"},
                    {"id": "his", "owner": "bob", "endpoint": f"{server.url}/mcp"},
                ],
            }
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice:
                first = [texts(await alice.call_tool("mine__count", {})) for _ in range(2)]
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("bob-key"))) as bob:
                his = texts(await bob.call_tool("his__count", {}))
            opened = list(state.opened)
            closed = state.wait_for(lambda: len(state.deleted) >= 2, timeout=10)
    assert first[1].endswith(" call 2") and first[0].split()[1] == first[1].split()[1]
    assert his.endswith(" call 1") and his.split()[1] != first[0].split()[1]
    # Listing opens a one-off session per connection (closed at once); the calls one pooled session per caller.
    called = {line.split()[1] for line in (*first, his)}
    assert called <= set(opened)
    assert closed and called <= set(state.deleted), "an idle pooled session is closed with DELETE, not forgotten"


async def test_federated_calls_and_pipeline_nodes_never_probe_the_server_again(tmp_path: Path) -> None:
    # R: F15, F10
    state = McpServerState()
    with serve(http_app(state)) as server:  # speaks the stateless 2026-07-28 generation
        config = BridgeConfig.model_validate(
            {
                "database": "d.db",
                "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{server.url}/mcp"}],
                "bridges": [{"id": "pipes", "owner": "alice", "connections": ["tools"]}],
            }
        )
        pipes = graph(
            [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", inputs=["text"]), node("out1", "output", inputs=["r"])],
            [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.r")],
            [pipeline("say")],
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            async with mcp_http("alice-key") as rest:
                assert (await rest.put(f"{bridge.url}/bridges/pipes/graph", json=pipes)).status_code == 200
            async with Client(streamable_http_client(f"{bridge.url}/mcp/pipes", http_client=mcp_http("alice-key"))) as alice:
                federated = [await alice.call_tool("tools__echo", {"n": i}) for i in range(3)]
                piped = [await alice.call_tool("say", {"text": f"t{i}"}) for i in range(3)]
    assert all(not r.is_error for r in federated + piped)
    assert [r.structured_content for r in piped] == [{"r": {"text": f"t{i}"}} for i in range(3)]
    assert state.calls["echo"] == 6
    assert state.methods["server/discover"] == 1, "the protocol is probed once per connection, not per call"


async def test_a_connection_with_the_empty_prefix_lists_its_tools_under_their_own_names(tmp_path: Path) -> None:
    # R: F15
    state = McpServerState()
    with serve(http_app(state)) as server:
        config = BridgeConfig.model_validate(
            {"database": "p.db", "apiEndpointAllowPrivate": ["127.0.0.0/8"],  # connections made below point at loopback
             "connections": [{"id": "plain", "owner": "alice", "endpoint": f"{server.url}/mcp", "prefix": ""}]}
        )
        app = bridge_app(config, tmp_path)
        with serve(app.app) as bridge:
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as alice:
                names = {t.name for t in (await alice.list_tools()).tools}
                echoed = await alice.call_tool("echo", {"said": "hi"})
                prefixed = await alice.call_tool("plain__echo", {"said": "hi"})
            async with mcp_http("alice-key") as rest:
                listed = (await rest.get(f"{bridge.url}/connections")).json()["data"]
                clash = await rest.post(f"{bridge.url}/connections", json={"id": "other", "endpoint": f"{server.url}/mcp"})
                named = await rest.post(
                    f"{bridge.url}/connections", json={"id": "third", "endpoint": f"{server.url}/mcp", "prefix": "x"}
                )
    assert {"echo", "count", "fail"} <= names and not any("__" in n for n in names)
    assert texts(echoed) == '{"said": "hi"}'
    assert prefixed.is_error, "with the empty prefix there is no prefixed name"
    assert listed[0]["prefix"] == ""
    assert clash.status_code == 409
    assert "connection plain has the empty prefix and could collide with connection other" in clash.json()["error"]["message"]
    assert named.status_code == 409, "any other connection next to an empty prefix could collide"


def test_prefixes_that_could_collide_are_refused_naming_the_connections() -> None:
    # R: F15
    def conn(cid: str, owner: str, prefix: str | None = None) -> dict[str, Any]:
        return {"id": cid, "owner": owner, "endpoint": "http://127.0.0.1:9/mcp", **({"prefix": prefix} if prefix is not None else {})}

    with pytest.raises(ValidationError, match="connections a and b share the prefix 'gh'"):
        BridgeConfig.model_validate({"connections": [conn("a", "alice", "gh"), conn("b", "org:acme", "gh")]})
    with pytest.raises(ValidationError, match="connection a has the empty prefix and could collide with connection b"):
        BridgeConfig.model_validate({"connections": [conn("a", "alice", ""), conn("b", "alice")]})
    with pytest.raises(ValidationError, match="bridge mix: connections a and b share the prefix 'x'"):
        BridgeConfig.model_validate(
            {"connections": [conn("a", "alice", "x"), conn("b", "bob", "x")],
             "bridges": [{"id": "mix", "owner": "alice", "connections": ["a", "b"]}]}
        )
    ok = BridgeConfig.model_validate({"connections": [conn("a", "alice", ""), conn("b", "bob", "")]})
    assert [c.name_prefix for c in ok.connections] == ["", ""], "two users never see each other's connections"
    assert BridgeConfig.model_validate({"connections": [conn("a", "alice"), conn("b", "alice")]}).connections[1].name_prefix == "b"


async def test_an_upstreams_cache_is_dropped_when_its_connection_changes(tmp_path: Path) -> None:
    # R: F15
    first, second = McpServerState(), McpServerState()
    with serve(http_app(first)) as one, serve(http_app(second)) as two:
        upstreams = Upstreams(base_dir=tmp_path, secrets=SecretSet(), list_ttl=30)
        try:
            await upstreams.call_tool_as("alice", ConnectionRecord("c", "alice", f"{one.url}/mcp", source="config"), "echo", {"to": 1})
            await upstreams.call_tool_as("alice", ConnectionRecord("c", "alice", f"{two.url}/mcp", source="config"), "echo", {"to": 2})
        finally:
            await upstreams.close()
    assert (first.arguments, second.arguments) == ([{"to": 1}], [{"to": 2}])


async def test_with_auth_off_two_clients_sessions_never_share_an_upstream_session(tmp_path: Path) -> None:
    # R: F15
    from tests.support.bridge_servers import anonymous

    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as server:
        config = BridgeConfig.model_validate(
            {"database": "a.db", "connections": [{"id": "local", "owner": "anonymous", "endpoint": f"{server.url}/mcp"}]}
        )
        with serve(bridge_app(config, tmp_path, authenticate=anonymous).app) as bridge:
            seen = []
            for _ in range(2):
                http = mcp_http("no-key")
                async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=http), mode="legacy") as client:
                    seen.append([texts(await client.call_tool("local__count", {})) for _ in range(2)])
    (a1, a2), (b1, b2) = seen
    assert a1.split()[1] == a2.split()[1] and a2.endswith(" call 2"), "one client's calls share its upstream session"
    assert b1.endswith(" call 1") and b1.split()[1] != a1.split()[1], "the next client gets its own"


class CountingStore(SqliteStore):
    """The real store, counting the connection listings asked of it."""

    listings = 0

    async def list_connections(self, owners: Sequence[str]) -> list[ConnectionRecord]:
        self.listings += 1
        return await super().list_connections(owners)


async def test_a_callers_connection_list_is_reused_between_calls_and_changes_are_seen_at_once(tmp_path: Path) -> None:
    # R: F1, F3, S2
    state = McpServerState()
    with serve(http_app(state)) as server:
        store = CountingStore(tmp_path / "f.db")
        await store.open()
        upstreams = Upstreams(base_dir=tmp_path, secrets=SecretSet(), list_ttl=30)
        federation = Federation(store, upstreams)
        alice = CallerScope(Identity(user_id="alice"), ("alice",))
        try:
            await store.upsert_connection(ConnectionRecord("tools", "alice", f"{server.url}/mcp", source="config"))
            first = await federation.resolve(alice, "tools__count")
            again = await federation.resolve(alice, "tools__count")
            reused = store.listings
            # Made by another replica sharing the store: this process was not told, a name no
            # connection it knows answers to is looked up afresh.
            await store.upsert_connection(ConnectionRecord("more", "alice", f"{server.url}/mcp", source="config"))
            elsewhere = await federation.resolve(alice, "more__count")
            # Deleted through this process (the REST API forgets the connection): gone at once.
            await store.delete_connection(("alice", "tools"))
            upstreams.forget(("alice", "tools"))
            deleted = await federation.resolve(alice, "tools__count")
        finally:
            await upstreams.close()
            await store.close()
    assert first is not None and again is not None and first.connection.id == again.connection.id == "tools"
    assert reused == 1, "the second call asked the store again"
    assert elsewhere is not None and elsewhere.connection.id == "more"
    assert deleted is None
