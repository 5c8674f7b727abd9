"""Ids are per owner (issue 15, finding 7: "409 on create reveals that another tenant's id exists").

alice and carol are in org acme, bob in org umbrella. Two real MCP servers (`server_a`, `server_b`)
tell apart where a call went: each counts the calls and sessions it saw. A create is refused only
for an id the creator can see; every item, cache, pooled session and session binding is the
owner's own; of two items one caller sees under one id, their own shadows the org's (tenancy.py).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.identity import Identity
from tests.support.bridge_servers import (
    BridgeApp, audit_flushed, authenticate_by_name, bridge_app, edge, graph, mcp_http, node, pipeline, tool_node,
)
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import McpServerState, http_app

CALLERS = {
    "alice": Identity("alice", "acme", "Alice", "alice@acme.test", hashlib.sha256(b"alice").hexdigest()),
    "carol": Identity("carol", "acme", "Carol", "carol@acme.test", hashlib.sha256(b"carol").hexdigest()),
    "bob": Identity("bob", "umbrella", "Bob", "bob@umbrella.test", hashlib.sha256(b"bob").hexdigest()),
}


@dataclass
class World:
    url: str
    app: BridgeApp
    a: McpServerState
    b: McpServerState
    a_url: str
    b_url: str
    server: ServerThread

    async def call(self, who: str, method: str, path: str, body: Any = None) -> httpx2.Response:
        async with mcp_http(who) as client:
            return await client.request(method, f"{self.url}{path}", json=body)

    async def connection(self, who: str, server: str, connection_id: str = "gh", **fields: Any) -> httpx2.Response:
        endpoint = f"{self.a_url if server == 'a' else self.b_url}/mcp"
        return await self.call(who, "POST", "/connections", {"id": connection_id, "endpoint": endpoint, **fields})

    @contextlib.asynccontextmanager
    async def mcp(self, who: str, path: str = "/mcp") -> AsyncIterator[Client]:
        async with Client(streamable_http_client(f"{self.url}{path}", http_client=mcp_http(who))) as client:
            yield client


def counted(state: McpServerState) -> int:
    """`count` calls a server answered."""
    with state.cond:
        return sum(state.per_session.values())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    a, b = McpServerState(), McpServerState()
    with serve(http_app(a, legacy_only=True)) as server_a, serve(http_app(b, legacy_only=True)) as server_b:
        config = BridgeConfig.model_validate({"database": "ids.db", "apiEndpointAllowPrivate": ["127.0.0.0/8"]})
        app = bridge_app(config, tmp_path, authenticate=authenticate_by_name(CALLERS))
        with serve(app.app) as bridge:
            yield World(bridge.url, app, a, b, server_a.url, server_b.url, bridge)


def counting_graph(connection: str = "gh") -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=[]), tool_node("t1", "count", connection, outputs=["result"]),
         node("out1", "output", inputs=["r"])],
        [edge("e1", "t1.result", "out1.r")],
        [pipeline("tally")],
    )


def texts(result: Any) -> str:
    return str(result.content[0].text)


async def test_another_tenants_id_is_free_to_take_and_each_sees_only_their_own(world: World) -> None:
    # R: F2, F3 (issue 15: 409 on create told bob that another tenant had `gh`)
    assert (await world.connection("alice", "a")).status_code == 201
    taken_elsewhere = await world.connection("bob", "b")
    assert taken_elsewhere.status_code == 201, taken_elsewhere.text
    for who, server in (("alice", world.a_url), ("bob", world.b_url)):
        listed = (await world.call(who, "GET", "/connections")).json()["data"]
        assert [(c["id"], c["owner"], c["endpoint"]) for c in listed] == [("gh", who, f"{server}/mcp")]
    patched = await world.call("bob", "PATCH", "/connections/gh", {"prefix": "hub"})
    assert (patched.status_code, patched.json()["owner"], patched.json()["prefix"]) == (200, "bob", "hub")
    assert (await world.call("alice", "GET", "/connections")).json()["data"][0]["prefix"] == "gh", "alice's is untouched"
    assert (await world.call("bob", "DELETE", "/connections/gh")).status_code == 204
    assert (await world.call("bob", "DELETE", "/connections/gh")).status_code == 404
    assert [c["owner"] for c in (await world.call("alice", "GET", "/connections")).json()["data"]] == ["alice"]
    assert (await world.call("alice", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201
    assert (await world.connection("bob", "b")).status_code == 201  # a bridge needs a connection (C7)
    assert (await world.call("bob", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201
    for who in ("alice", "bob"):
        got = await world.call(who, "GET", "/bridges/b1")
        assert (got.json()["owner"], got.json()["mcpPath"]) == (who, "/mcp/b1")
        assert [b["owner"] for b in (await world.call(who, "GET", "/bridges")).json()["data"]] == [who]
    assert (await world.call("bob", "DELETE", "/bridges/b1")).status_code == 204
    assert (await world.call("alice", "GET", "/bridges/b1")).status_code == 200


async def test_a_create_is_refused_only_for_an_id_the_creator_sees(world: World) -> None:
    # R: F2 (409 tells the caller nothing it cannot already see)
    assert (await world.connection("alice", "a")).status_code == 201
    mine_again = await world.connection("alice", "a")
    for_my_org = await world.connection("alice", "b", owner="org:acme")
    assert (mine_again.status_code, for_my_org.status_code) == (409, 409)
    assert mine_again.json()["error"]["message"] == "connection id gh is taken"
    assert (await world.connection("carol", "b", owner="org:acme")).status_code == 201, "carol cannot see alice's"
    assert (await world.connection("carol", "b")).status_code == 409, "carol sees the org's `gh`"
    assert (await world.connection("bob", "b")).status_code == 201
    assert (await world.call("alice", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201
    assert (await world.call("alice", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 409
    assert (await world.call("carol", "POST", "/bridges", {"id": "b1", "owner": "org:acme", "connections": ["gh"]})).status_code == 201
    assert (await world.call("bob", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201


async def test_each_tenants_gh_reaches_its_own_server_and_never_shares_a_pooled_session(world: World) -> None:
    # R: F2, F15, G4 (two tenants' `gh`: two targets, two pools, two catalogs, two relays)
    assert (await world.connection("alice", "a")).status_code == 201
    assert (await world.connection("bob", "b")).status_code == 201
    async with world.mcp("alice") as alice, world.mcp("bob") as bob:
        alice_names = {t.name for t in (await alice.list_tools()).tools}
        bob_names = {t.name for t in (await bob.list_tools()).tools}
        calls = [texts(await client.call_tool("gh__count", {})) for client in (alice, bob, alice, bob)]
    assert "gh__count" in alice_names and alice_names == bob_names
    a_session, b_session = calls[0].split()[1], calls[1].split()[1]
    assert a_session in world.a.opened and b_session in world.b.opened  # (listing opened sessions of its own)
    assert calls == [f"session {a_session} call 1", f"session {b_session} call 1",
                     f"session {a_session} call 2", f"session {b_session} call 2"]
    upstreams = world.app.service.upstreams
    assert (upstreams.sessions_open(("alice", "gh")), upstreams.sessions_open(("bob", "gh"))) == (1, 1)


async def test_a_bridge_id_two_tenants_use_runs_each_ones_own_graph_over_their_own_connection(world: World) -> None:
    # R: F2, F9, F12 (`/mcp/<bridgeId>` and a tool node's `connectionId` resolve in the owner's view)
    for who, server in (("alice", "a"), ("bob", "b")):
        assert (await world.connection(who, server)).status_code == 201
        assert (await world.call(who, "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201
        assert (await world.call(who, "PUT", "/bridges/b1/graph", counting_graph())).status_code == 200
    async with world.mcp("alice", "/mcp/b1") as alice:
        assert not (await alice.call_tool("tally", {})).is_error
        assert not (await alice.call_tool("gh__count", {})).is_error
    assert (counted(world.a), counted(world.b)) == (2, 0)
    async with world.mcp("bob", "/mcp/b1") as bob:
        assert not (await bob.call_tool("tally", {})).is_error
    assert (counted(world.a), counted(world.b)) == (2, 1)
    ran = await world.call("bob", "POST", "/bridges/b1/run", {"name": "tally"})
    assert not ran.json()["isError"] and (counted(world.a), counted(world.b)) == (2, 2)
    await audit_flushed(world.app, world.server)
    for who in ("alice", "bob"):  # each one's record says whose `b1` ran (the scope is the id as typed)
        runs = (await world.call(who, "GET", "/audit?action=mcp.pipeline_call")).json()["data"]
        times = 1 if who == "alice" else 2  # bob ran it on /mcp/b1 and in the editor
        assert [(r["scope"], r["args"]["$bridge"]) for r in runs] == [("bridge:b1", {"owner": who})] * times


async def test_a_members_own_item_shadows_the_orgs_and_an_org_bridge_holds_only_the_orgs(world: World) -> None:
    # R: F2, F3 (alice's personal `gh` and org acme's `gh`, made later by carol, who cannot see alice's)
    assert (await world.connection("alice", "a")).status_code == 201
    assert (await world.connection("carol", "b", owner="org:acme")).status_code == 201
    listed = (await world.call("alice", "GET", "/connections")).json()["data"]
    assert sorted((c["id"], c["owner"]) for c in listed) == [("gh", "alice"), ("gh", "org:acme")], "both are hers to see"
    org_bridge = await world.call("carol", "POST", "/bridges", {"id": "ob", "owner": "org:acme", "connections": ["gh"]})
    assert org_bridge.status_code == 201
    assert (await world.call("carol", "PUT", "/bridges/ob/graph", counting_graph())).status_code == 200
    async with world.mcp("alice") as alice:
        assert texts(await alice.call_tool("gh__count", {})).split()[1] in world.a.opened
    assert (counted(world.a), counted(world.b)) == (1, 0), "her own `gh` on /mcp"
    async with world.mcp("alice", "/mcp/ob") as alice:
        assert not (await alice.call_tool("gh__count", {})).is_error
        assert not (await alice.call_tool("tally", {})).is_error
    assert (counted(world.a), counted(world.b)) == (1, 2), "the org's `gh` in the org's bridge, for her too"
    patched = await world.call("alice", "PATCH", "/connections/gh", {"prefix": "mine"})
    assert patched.json()["owner"] == "alice"
    org_tools = await world.call("alice", "GET", "/connections/gh/tools?owner=org:acme")  # the shadowed one, by owner
    assert org_tools.status_code == 200 and "count" in {t["name"] for t in org_tools.json()["data"]}
    for path in ("/connections/gh/tools?owner=bob", "/connections/gh/tools?owner=umbrella"):
        assert (await world.call("alice", "GET", path)).status_code == 404
    assert (await world.call("alice", "DELETE", "/connections/gh?owner=org:umbrella")).status_code == 404
    assert (await world.call("alice", "DELETE", "/connections/gh")).status_code == 204
    left = (await world.call("carol", "GET", "/connections")).json()["data"]
    assert [(c["id"], c["owner"], c["prefix"]) for c in left] == [("gh", "org:acme", "gh")], "the org's is untouched"
    async with world.mcp("alice") as alice:
        assert not (await alice.call_tool("gh__count", {})).is_error
    assert (counted(world.a), counted(world.b)) == (1, 3), "with hers gone, `gh` names the org's"


async def test_a_bridge_session_is_bound_to_the_bridge_not_to_the_id_it_was_opened_under(world: World) -> None:
    # R: F2, G4 (alice's `b1` deleted, the org's `b1` now answers to that id: her session does not move)
    assert (await world.connection("alice", "a")).status_code == 201  # a bridge needs a connection (C7)
    assert (await world.connection("carol", "b", owner="org:acme")).status_code == 201
    assert (await world.call("alice", "POST", "/bridges", {"id": "b1", "connections": ["gh"]})).status_code == 201
    assert (await world.call("carol", "POST", "/bridges", {"id": "b1", "owner": "org:acme", "connections": ["gh"]})).status_code == 201
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with mcp_http("alice") as client:
        opened = await client.post(f"{world.url}/mcp/b1", json=init, headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        before = await client.post(f"{world.url}/mcp/b1", json=ping, headers=session)
        other_door = await client.post(f"{world.url}/mcp/b1?owner=org:acme", json=ping, headers=session)
        shadowed = await client.get(f"{world.url}/bridges/b1?owner=org:acme")
        assert (await client.delete(f"{world.url}/bridges/b1")).status_code == 204
        after = await client.post(f"{world.url}/mcp/b1", json=ping, headers=session)
        org = await client.get(f"{world.url}/bridges/b1")
    assert (before.status_code, other_door.status_code, after.status_code) == (200, 404, 404)
    assert shadowed.json()["owner"] == "org:acme", "the org's `b1`, named by owner while alice's shadows it"
    assert shadowed.json()["mcpPath"] == "/mcp/b1?owner=org%3Aacme", "its MCP path names its owner while shadowed"
    assert (org.json()["owner"], org.json()["mcpPath"]) == ("org:acme", "/mcp/b1")
