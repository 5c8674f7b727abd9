"""The Bridge's MCP endpoint with the official SDK client, both protocol generations (F1–F3, F12)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support import canary
from tests.support.bridge_servers import BridgeApp, CallLog, bridge_app, mcp_http, tool_server
from tests.support.http_server import serve

MODES = ["legacy", "auto"]


@dataclass
class World:
    bridge: BridgeApp
    url: str
    gh: CallLog
    jira: CallLog


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    gh_log, jira_log, org_log = CallLog(), CallLog(), CallLog()
    locked = {"required_header": (canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN)}  # the canary secret must arrive
    with serve(tool_server(gh_log, **locked)) as gh, serve(tool_server(jira_log, **locked)) as jira, serve(tool_server(org_log, **locked)) as org:
        config = BridgeConfig.model_validate(
            {
                "database": "bridge.db",
                "connections": [
                    {"id": "gh", "owner": "alice", "endpoint": f"{gh.url}/mcp", **canary.connection_auth()},
                    {"id": "shared", "owner": "org:acme", "endpoint": f"{org.url}/mcp", **canary.connection_auth()},
                    {"id": "jira", "owner": "bob", "endpoint": f"{jira.url}/mcp", **canary.connection_auth()},
                ],
                "bridges": [
                    {"id": "alice-b", "owner": "alice", "connections": ["gh"]},
                    {"id": "bob-b", "owner": "bob", "connections": ["jira"]},
                ],
            }
        )
        app = bridge_app(config, tmp_path_factory.mktemp("bridge"))
        with serve(app.app) as bridge:
            yield World(app, bridge.url, gh_log, jira_log)


def client(world: World, key: str, path: str, mode: str, **kwargs: object) -> Client:
    return Client(streamable_http_client(f"{world.url}{path}", http_client=mcp_http(key, **kwargs)), mode=mode)


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_sees_only_the_tools_of_their_own_connections(world: World, mode: str) -> None:
    # R: F1, F2, F3
    async with client(world, "alice-key", "/mcp", mode) as alice:
        alice_names = {t.name for t in (await alice.list_tools()).tools}
    async with client(world, "bob-key", "/mcp", mode) as bob:
        bob_names = {t.name for t in (await bob.list_tools()).tools}
    assert "gh__echo" in alice_names and "shared__echo" in alice_names
    assert not any(n.startswith("jira__") for n in alice_names)
    assert {n.split("__")[0] for n in bob_names} == {"jira"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_federated_tool_call_reaches_the_owning_connection(world: World, mode: str) -> None:
    # R: F1, F3
    before = world.gh.count("echo")
    async with client(world, "alice-key", "/mcp", mode) as alice:
        result = await alice.call_tool("gh__echo", {"text": "hi", "prefix": ">"})
    assert not result.is_error
    assert result.content[0].text == ">hi"
    assert world.gh.count("echo") == before + 1


async def test_a_federated_tool_answer_over_one_mebibyte_is_relayed_whole(world: World) -> None:
    # R: F1 -- a large answer goes through the Bridge to its client unchanged (the Bridge reads
    # answers of up to bridge.limits.resultBytes, 4 MiB: this one's text and structuredContent
    # together are 3 MiB; the SDK's default event size is 1 MiB).
    text = "x" * (3 * 1024 * 1024 // 2)
    transport = streamable_http_client(f"{world.url}/mcp", http_client=mcp_http("alice-key"),
                                       max_sse_event_size=16 * 1024 * 1024)
    async with Client(transport, mode="legacy") as alice:
        result = await alice.call_tool("gh__echo", {"text": text})
    assert not result.is_error, result.content
    assert result.content[0].text == text


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_name_the_pattern_cannot_carry_is_mapped_and_callable(world: World, mode: str) -> None:
    # R: F3
    async with client(world, "alice-key", "/mcp/alice-b", mode) as alice:
        names = [t.name for t in (await alice.list_tools()).tools]
        mapped = [n for n in names if n.startswith("gh__weird_tool_v2_")]
        assert len(mapped) == 1
        result = await alice.call_tool(mapped[0], {})
    assert result.content[0].text == "weird ok"


async def test_another_accounts_bridge_is_not_found(world: World) -> None:
    # R: F2
    async with mcp_http("alice-key") as http:
        mine = await http.post(f"{world.url}/mcp/alice-b", json=_initialize(), headers=_accept())
        theirs = await http.post(f"{world.url}/mcp/bob-b", json=_initialize(), headers=_accept())
        missing = await http.post(f"{world.url}/mcp/nope", json=_initialize(), headers=_accept())
    assert mine.status_code == 200
    assert (theirs.status_code, missing.status_code) == (404, 404)
    assert theirs.json()["error"] == {**missing.json()["error"], "message": "bridge bob-b not found"}


async def test_a_request_without_credentials_is_refused_with_401(world: World) -> None:
    # R: F2
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{world.url}/mcp", json=_initialize(), headers=_accept())
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


async def test_a_session_opened_on_one_bridge_or_by_one_caller_is_refused_elsewhere(world: World) -> None:
    # R: F2
    async with mcp_http("alice-key") as alice_http:
        opened = await alice_http.post(f"{world.url}/mcp/alice-b", json=_initialize(), headers=_accept())
        session = opened.headers["mcp-session-id"]
        headers = {**_accept(), "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        same = await alice_http.post(f"{world.url}/mcp/alice-b", json=_list(), headers=headers)
        other_path = await alice_http.post(f"{world.url}/mcp", json=_list(), headers=headers)
    async with mcp_http("bob-key") as bob_http:
        other_caller = await bob_http.post(f"{world.url}/mcp", json=_list(), headers=headers)
    assert same.status_code == 200
    assert other_path.status_code == 404
    assert other_caller.status_code == 404


def _accept() -> dict[str, str]:
    return {"accept": "application/json, text/event-stream"}


def _initialize() -> dict[str, object]:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def _list() -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
