"""Tenant boundaries (issue 15, findings 3 and 5; F2, F4, G4) and the checks that held.

Three callers: alice and carol in org acme, bob in globex; plus two credentials that name only the
org acme and no user (JWTs without `sub`, API keys with only `org_id`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from gateway.bridge.config import BridgeConfig
from gateway.bridge.federation import CallerScope, owners_of
from gateway.bridge.records import BridgeRecord
from gateway.conversation import conversation_key
from gateway.identity import Identity
from tests.support import canary
from tests.support.bridge_servers import (
    BridgeApp, CallLog, audit_flushed, authenticate_by_name, bridge_app, edge, graph, node, pipeline, tool_node, tool_server,
)
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import Reply, ScriptedUpstream

CALLERS = {
    "alice": Identity("alice", "acme", "Alice", "alice@acme.test", hashlib.sha256(b"alice").hexdigest()),
    "carol": Identity("carol", "acme", "Carol", "carol@acme.test", hashlib.sha256(b"carol").hexdigest()),
    "bob": Identity("bob", "globex", "Bob", "bob@globex.test", hashlib.sha256(b"bob").hexdigest()),
    "org-key-1": Identity(None, "acme", None, None, hashlib.sha256(b"org-key-1").hexdigest()),
    "org-key-2": Identity(None, "acme", None, None, hashlib.sha256(b"org-key-2").hexdigest()),
}


authenticate = authenticate_by_name(CALLERS)


def http(who: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {who}"}, timeout=30)


@dataclass
class World:
    url: str
    app: BridgeApp
    tools: CallLog
    server: ServerThread

    async def flushed(self) -> None:
        """Wait (with a deadline) until the audit queue is drained."""
        await audit_flushed(self.app, self.server)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    log = CallLog()
    with serve(tool_server(log, delay=0)) as tools:
        endpoint = f"{tools.url}/mcp"
        config = BridgeConfig.model_validate({
            "database": "bridge.db",
            "connections": [
                {"id": "personal", "owner": "alice", "endpoint": endpoint, **canary.connection_auth()},
                {"id": "shared", "owner": "org:acme", "endpoint": endpoint, **canary.connection_auth()},
            ],
            "bridges": [{"id": "acme-bridge", "owner": "org:acme", "connections": ["shared"]}],
        })
        app = bridge_app(config, tmp_path_factory.mktemp("tenants"), authenticate=authenticate)
        with serve(app.app) as bridge:
            yield World(bridge.url, app, log, bridge)


@contextlib.asynccontextmanager
async def mcp(world: World, who: str, path: str) -> AsyncIterator[Client]:
    async with Client(streamable_http_client(f"{world.url}{path}", http_client=http(who))) as client:
        yield client


async def test_an_org_bridge_cannot_be_made_with_a_members_personal_connection(world: World) -> None:
    # R: F2, F3 (issue 15: the org confused deputy)
    async with http("alice") as client:
        refused = await client.post(f"{world.url}/bridges", json={"id": "deputy", "owner": "org:acme",
                                                                  "connections": ["personal", "shared"]})
        allowed = await client.post(f"{world.url}/bridges", json={"id": "alices-own", "connections": ["personal", "shared"]})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "bridge deputy belongs to org:acme: it may hold only that org's connections, not personal "
        "(every member of the org can call it and edit its graph)"
    )
    assert allowed.status_code == 201, "a user's own bridge may hold her connections and her org's"


def test_a_config_that_puts_a_personal_connection_in_an_org_bridge_is_refused() -> None:
    # R: F3, G8
    with pytest.raises(ValidationError, match="bridge b1 belongs to org:acme: it may hold only that org's connections, not mine"):
        BridgeConfig.model_validate({
            "connections": [{"id": "mine", "owner": "alice", "endpoint": "http://127.0.0.1:1/mcp"}],
            "bridges": [{"id": "b1", "owner": "org:acme", "connections": ["mine"]}],
        })


def deputy_graph() -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", "personal", inputs=["text"]),
         node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.r")],
        [pipeline("whoami")],
    )


async def test_an_org_bridge_stored_before_the_rule_never_lends_a_personal_connection(world: World) -> None:
    # R: F2, F9 (a bridge stored by an older version, or edited in the database)
    await world.app.service.store.upsert_bridge(BridgeRecord("old-org-bridge", "org:acme", ("personal", "shared"), "api"))
    async with mcp(world, "alice", "/mcp/old-org-bridge") as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert "shared__echo" in names and not any(n.startswith("personal__") for n in names)
    async with http("carol") as client:
        saved = await client.put(f"{world.url}/bridges/old-org-bridge/graph", json=deputy_graph())
    assert saved.status_code == 400  # R: C7 — the graph names a connection of the bridge's list the bridge cannot use
    assert [(e["node"], 'connection "personal" does not exist or cannot be used' in e["message"])
            for e in saved.json()["error"]["errors"]] == [("t1", True)]
    # ...and stored anyway (by an older version, or in the database), a run never reaches it
    await world.app.service.store.save_graph(("org:acme", "old-org-bridge"), deputy_graph(), 0.0, "carol")
    echoes = world.tools.count("echo")
    async with mcp(world, "alice", "/mcp/old-org-bridge") as client:
        result = await client.call_tool("whoami", {"text": "hi"})
    assert result.is_error  # ...but a run never reaches it
    assert world.tools.count("echo") == echoes


async def audit_of(world: World, who: str, **params: str) -> list[dict[str, Any]]:
    async with http(who) as client:
        response = await client.get(f"{world.url}/audit", params=params)
    return response.json()["data"]


async def test_a_graph_save_is_audited_with_its_editor_and_a_run_names_whose_graph_ran(world: World) -> None:
    # R: F4 (issue 15: the audit showed only the caller, never the graph's editor)
    data = graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", "shared", inputs=["text"]),
         node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.r")],
        [pipeline("shout")],
    )
    async with http("carol") as client:
        assert (await client.put(f"{world.url}/bridges/acme-bridge/graph", json=data)).status_code == 200
    async with mcp(world, "alice", "/mcp/acme-bridge") as client:
        assert not (await client.call_tool("shout", {"text": "hi"})).is_error
    await world.flushed()
    saves = await audit_of(world, "carol", action="bridge.graph_save")
    runs = await audit_of(world, "alice", action="mcp.pipeline_call", resource="shout")
    assert saves[0]["actor"] == {"id": "carol", "email": "carol@acme.test"}
    assert (saves[0]["resource"], saves[0]["scope"], saves[0]["mutating"]) == ("acme-bridge", "bridge:acme-bridge", True)
    assert saves[0]["args"] == {"owner": "org:acme", "nodes": 3, "edges": 2, "pipelines": ["shout"]}
    assert runs[0]["actor"]["id"] == "alice"
    assert runs[0]["args"]["$graph"] == {"savedBy": "carol"}


def test_two_credentials_naming_only_an_org_never_share_a_conversation_key() -> None:
    # R: G4 (issue 15: two JWTs with org_id acme and no sub shared one MCP session)
    one, two = CALLERS["org-key-1"], CALLERS["org-key-2"]
    messages = [{"role": "user", "content": "hi"}]
    assert conversation_key(one, "conv-1", messages) != conversation_key(two, "conv-1", messages)
    assert conversation_key(one, "conv-1", messages) == conversation_key(one, "conv-1", messages)
    assert conversation_key(one, None, messages) != conversation_key(two, None, messages)


def test_two_credentials_naming_only_an_org_never_share_a_pooled_upstream_session() -> None:
    # R: F15, G4 (issue 15 x issue 11: the Bridge pools upstream sessions per caller by this key)
    def key(who: str) -> str:
        return CallerScope(CALLERS[who], owners_of(CALLERS[who])).session_key

    assert key("org-key-1") != key("org-key-2"), "never keyed by the org alone"
    assert key("org-key-1") == key("org-key-1")
    assert len({key(who) for who in CALLERS}) == len(CALLERS)


@pytest.mark.parametrize(("owner", "intruder"), [("org-key-1", "org-key-2"), ("alice", "carol"), ("alice", "bob")])
async def test_a_bridge_session_is_refused_to_any_other_credential_even_of_the_same_org(
    world: World, owner: str, intruder: str
) -> None:
    # R: F2, G4 (org-only credentials used to share each other's Bridge sessions)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with http(owner) as client:
        opened = await client.post(f"{world.url}/mcp", json=init, headers=headers)
    session = opened.headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with http(intruder) as client:
        stolen = await client.post(f"{world.url}/mcp", json=ping, headers={**headers, "mcp-session-id": session})
    async with http(owner) as client:
        own = await client.post(f"{world.url}/mcp", json=ping, headers={**headers, "mcp-session-id": session})
    assert stolen.status_code == 404
    assert own.status_code == 200


async def test_another_orgs_bridge_and_connections_are_not_found(world: World) -> None:
    # R: F2 (a check that held in the probe; kept so it keeps holding)
    async with http("bob") as client:
        bridge = await client.get(f"{world.url}/bridges/acme-bridge")
        graph_put = await client.put(f"{world.url}/bridges/acme-bridge/graph", json=deputy_graph())
        connection = await client.delete(f"{world.url}/connections/personal")
        listed = await client.get(f"{world.url}/connections")
    assert (bridge.status_code, graph_put.status_code, connection.status_code) == (404, 404, 404)
    assert listed.json()["data"] == []
    async with mcp(world, "bob", "/mcp") as client:
        assert (await client.list_tools()).tools == []


def test_two_org_only_api_keys_with_one_conversation_id_get_two_mcp_sessions(upstream: ScriptedUpstream) -> None:
    # R: B14, G4 (issue 15: the second caller saw the first one's session and prefetch result)
    state = McpServerState(require_credential=True)
    keys = {"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "org_id": "acme"},
                                             {"key": canary.BOB_KEY_REF, "org_id": "acme"}]}
    with serve(http_app(state, legacy_only=True)) as mcp_server:
        plugin = {"type": "mcp_bridge", "id": "docs", "endpoint": mcp_server.url + "/mcp", "timeoutSeconds": 5, **canary.mcp_auth()}
        with running_gateway(simple_config(upstream.url, [plugin], auth=keys)) as gw:
            for key in (canary.ALICE_KEY, canary.BOB_KEY, canary.ALICE_KEY):
                upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="ok"))
                client(gw, key, **{"X-Conversation-Id": "shared-id"}).chat.completions.create(
                    model="assistant", messages=[{"role": "user", "content": "hi"}])
    first, second = state.opened
    tool_texts = [upstream.requests[i]["messages"][-1]["content"] for i in (1, 3, 5)]
    assert tool_texts == [f"session {first} call 1", f"session {second} call 1", f"session {first} call 2"]


async def test_org_only_credentials_are_told_apart_in_the_audit_log(world: World) -> None:
    # R: F4, G4 (who acted: never just "the org" when several credentials act for it)
    async with mcp(world, "org-key-1", "/mcp/acme-bridge") as client:
        await client.call_tool("shared__echo", {"text": "one"})
    await world.flushed()
    mine = await audit_of(world, "org-key-1")
    others = await audit_of(world, "org-key-2")
    assert mine and mine[0]["actor"]["id"] == f"org:acme#{CALLERS['org-key-1'].credential_fp[:12]}"
    assert others == []


@pytest.mark.parametrize("path", ["/bridges/ACME-BRIDGE", "/bridges/acme%2Dbridge", "/bridges/..%2Facme-bridge",
                                  "/bridges/acme-bridge%00", "/bridges/acme-bridge/graph", "/bridges/%20acme-bridge"])
async def test_another_tenants_bridge_is_not_found_under_any_spelling(world: World, path: str) -> None:
    # R: F2 (held in the probe: ids in other case or encoding, traversal)
    async with http("bob") as client:
        response = await client.get(f"{world.url}{path}")
    assert response.status_code == 404


@pytest.mark.parametrize("owner", ["org:acme", "alice", "ALICE", "org:ACME", "user:alice", "anonymous"])
async def test_a_caller_cannot_create_things_for_another_owner(world: World, owner: str) -> None:
    # R: F2, F3 (held in the probe: owner spoofing)
    async with http("bob") as client:
        connection = await client.post(f"{world.url}/connections",
                                       json={"id": "spoof", "owner": owner, "endpoint": "https://mcp.example.com/mcp"})
        bridge = await client.post(f"{world.url}/bridges", json={"id": "spoof-b", "owner": owner, "connections": []})
    assert (connection.status_code, bridge.status_code) == (403, 403)


async def test_a_session_opened_on_one_door_is_refused_on_another(world: World) -> None:
    # R: F2 (held in the probe: session ids of another bridge)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with http("alice") as client:
        session = (await client.post(f"{world.url}/mcp", json=init, headers=headers)).headers["mcp-session-id"]
        elsewhere = await client.post(f"{world.url}/mcp/acme-bridge", json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                                      headers={**headers, "mcp-session-id": session})
    assert elsewhere.status_code == 404


async def test_changes_to_org_items_are_audited_with_the_member_who_made_them(world: World) -> None:
    # R: F4 (who did what to org items: a member's create and another member's delete)
    async with http("alice") as client:
        made = await client.post(f"{world.url}/connections",
                                 json={"id": "orgwiki", "owner": "org:acme", "endpoint": "https://mcp.example.com/mcp"})
    async with http("carol") as client:
        gone = await client.delete(f"{world.url}/connections/orgwiki")
    assert (made.status_code, gone.status_code) == (201, 204)
    await world.flushed()
    created = await audit_of(world, "alice", action="connection.create", resource="orgwiki")
    deleted = await audit_of(world, "carol", action="connection.delete", resource="orgwiki")
    assert [(r["actor"]["id"], r["scope"], r["args"]) for r in created] == [("alice", "connection:orgwiki", {"owner": "org:acme"})]
    assert [(r["actor"]["id"], r["scope"], r["args"]) for r in deleted] == [("carol", "connection:orgwiki", {"owner": "org:acme"})]
