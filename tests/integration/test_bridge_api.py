"""The Bridge's REST API: bridges and connections scoped to the caller, graphs validated on save (F2, F8, F12)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.store_sqlite import SqliteStore
from tests.support import canary
from tests.support.bridge_servers import (
    CallLog, bridge_app, edge, fan_in_graph, graph, mcp_http, node, pipeline, tool_node, tool_server,
)
from tests.support.http_server import ServerThread, serve


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    config = BridgeConfig.model_validate(
        {
            "database": "api.db",
            "apiEndpointAllowPrivate": ["127.0.0.0/8"],  # connections made below point at loopback
            "connections": [
                {"id": "tools", "owner": "alice", "endpoint": "http://127.0.0.1:9/mcp", **canary.connection_auth()},
                {"id": "bobs", "owner": "bob", "endpoint": "http://127.0.0.1:9/mcp", **canary.connection_auth()},
            ],
            "bridges": [
                {"id": "pipes", "owner": "alice", "connections": ["tools"]},
                {"id": "bob-b", "owner": "bob", "connections": ["bobs"]},
            ],
        }
    )
    with serve(bridge_app(config, tmp_path_factory.mktemp("api")).app) as server:
        yield server


async def request(bridge: ServerThread, method: str, path: str, key: str = "alice-key", body: Any = None) -> Any:
    async with mcp_http(key) as http:
        return await http.request(method, f"{bridge.url}{path}", json=body)


async def rejected(bridge: ServerThread, data: dict[str, Any]) -> list[tuple[str, str]]:
    response = await request(bridge, "PUT", "/bridges/pipes/graph", body=data)
    assert response.status_code == 400
    return [(p["rule"], p["message"]) for p in response.json()["error"]["problems"]]


async def test_each_user_lists_only_their_own_bridges(bridge: ServerThread) -> None:
    # R: F2
    alice = (await request(bridge, "GET", "/bridges")).json()["data"]
    bob = (await request(bridge, "GET", "/bridges", key="bob-key")).json()["data"]
    assert [b["id"] for b in alice] == ["pipes"]
    assert [b["id"] for b in bob] == ["bob-b"]
    assert (await request(bridge, "GET", "/bridges/bob-b/graph")).status_code == 404
    assert (await request(bridge, "PUT", "/bridges/bob-b/graph", body=fan_in_graph())).status_code == 404


async def test_a_saved_graph_reads_back_as_saved(bridge: ServerThread) -> None:
    # R: F12
    assert (await request(bridge, "PUT", "/bridges/pipes/graph", body=fan_in_graph())).status_code == 200
    saved = (await request(bridge, "GET", "/bridges/pipes/graph")).json()
    assert saved == fan_in_graph()
    assert (await request(bridge, "GET", "/bridges/pipes")).json()["pipelines"] == ["fan_in"]


async def test_a_cycle_is_rejected_naming_its_nodes(bridge: ServerThread) -> None:
    # R: F8
    data = fan_in_graph()
    data["edges"] = [e for e in data["edges"] if e["id"] != "e1"]  # ta.query takes one edge (C7): the loop's
    data["edges"].append(edge("back", "m1.out", "ta.query"))
    assert await rejected(bridge, data) == [("cycle", "cycle: ta -> m1 -> ta")]


async def test_duplicate_node_and_edge_ids_are_rejected(bridge: ServerThread) -> None:
    # R: F8
    data = fan_in_graph()
    data["nodes"].append(node("ta", "merge"))
    data["edges"].append(edge("e1", "in1.query", "tb.query"))
    assert await rejected(bridge, data) == [
        ("duplicate node id", "duplicate node ids: ta"),
        ("duplicate edge id", "duplicate edge ids: e1"),
    ]


async def test_a_dangling_edge_is_rejected(bridge: ServerThread) -> None:
    # R: F8
    data = fan_in_graph()
    data["edges"].append(edge("e9", "ghost.x", "out1.ctx"))
    assert await rejected(bridge, data) == [("missing node", "reference to a missing node: edge e9 -> ghost")]


async def test_a_bad_tool_name_is_rejected(bridge: ServerThread) -> None:
    # R: F8
    data = fan_in_graph()
    data["nodes"][1]["tool"] = "9 lives!"
    assert await rejected(bridge, data) == [
        ("bad tool name", "tool name must match ^[a-zA-Z][a-zA-Z0-9_-]{0,63}$: ta ('9 lives!')")
    ]


async def test_a_pipeline_whose_ends_are_not_input_and_output_nodes_is_rejected(bridge: ServerThread) -> None:
    # R: F8
    data = fan_in_graph()
    data["pipelines"] = [pipeline("fan_in", input_node="ta", output_node="m1")]
    assert await rejected(bridge, data) == [
        (
            "bad pipeline boundary",
            "bad pipeline boundary: pipeline p_fan_in: inputNode ta is a tool node, not an input node; "
            "pipeline p_fan_in: outputNode m1 is a merge node, not an output node",
        )
    ]


async def test_a_graph_of_the_wrong_shape_is_rejected_with_the_path_of_the_problem(bridge: ServerThread) -> None:
    # R: F8
    problems = await rejected(bridge, {"version": 1, "nodes": [{"id": "a", "kind": "gizmo"}], "edges": []})
    assert [rule for rule, _ in problems] == ["shape"]
    assert problems[0][1].startswith("wrong shape: node \"a\": kind must be one of 'input', 'tool'")  # R: C7


async def test_a_tool_node_on_a_connection_outside_the_bridge_is_rejected(bridge: ServerThread) -> None:
    # R: F8, F2
    data = graph([tool_node("t1", "echo", connection="bobs")], [], [])
    assert await rejected(bridge, data) == [
        ("unknown connection", "tool node(s) name a connection that is not part of bridge pipes: t1 (bobs)")
    ]


async def test_connections_and_bridges_are_created_and_deleted_by_their_owner_only(bridge: ServerThread) -> None:
    # R: F2, F3
    created = await request(bridge, "POST", "/connections", body={"id": "mine", "endpoint": "http://127.0.0.1:9/mcp"})
    assert created.status_code == 201 and created.json()["owner"] == "alice"
    made = await request(bridge, "POST", "/bridges", body={"id": "new-b", "connections": ["mine"]})
    assert made.status_code == 201
    foreign = await request(bridge, "POST", "/bridges", body={"id": "x-b", "connections": ["bobs"]})
    assert foreign.status_code == 400
    assert (await request(bridge, "DELETE", "/bridges/new-b", key="bob-key")).status_code == 404
    assert (await request(bridge, "DELETE", "/bridges/new-b")).status_code == 204
    assert (await request(bridge, "DELETE", "/connections/mine", key="bob-key")).status_code == 404
    assert (await request(bridge, "DELETE", "/connections/mine")).status_code == 204
    declared = await request(bridge, "DELETE", "/bridges/pipes")
    assert declared.status_code == 409


async def test_a_connection_with_a_secret_reference_cannot_be_created_through_the_api(bridge: ServerThread) -> None:
    # R: F3
    body = {"id": "leaky", "endpoint": "http://127.0.0.1:9/mcp", "authHeaderName": "X", "authSecret": "file:/etc/passwd"}
    response = await request(bridge, "POST", "/connections", body=body)
    assert response.status_code == 400  # no bridge.secretKey here: the API takes no credential at all
    assert "bridge.secretKey" in response.json()["error"]["message"]
    assert (await request(bridge, "GET", "/connections/leaky/tools")).status_code == 404


async def test_a_body_that_is_not_json_is_refused_with_400_and_an_oversized_one_with_413(bridge: ServerThread) -> None:
    # R: F12
    async with mcp_http("alice-key") as http:
        broken = await http.put(f"{bridge.url}/bridges/pipes/graph", content=b"{not json")
        huge = await http.put(f"{bridge.url}/bridges/pipes/graph", content=b" " * (4 * 1024 * 1024 + 1))
        listed = await http.post(f"{bridge.url}/connections", json=["not", "an", "object"])
    assert broken.status_code == 400
    assert broken.json()["error"]["message"].startswith("request body is not valid JSON: ")  # the gateway's one body reader
    assert (huge.status_code, huge.json()["error"]["message"]) == (413, "request body is 4194305 bytes; the limit is 4194304")
    assert (listed.status_code, listed.json()["error"]["message"]) == (400, "body must be a JSON object")


async def test_connections_made_through_the_api_stay_within_the_endpoint_allow_list(tmp_path: Path) -> None:
    # R: F2, F3
    log = CallLog()
    with serve(tool_server(log, delay=0, required_header=(canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN))) as tools:
        early = SqliteStore(tmp_path / "allow.db")
        await early.open()
        await early.upsert_connection(ConnectionRecord("old", "alice", f"{tools.url}/mcp", source="api"))
        await early.close()
        config = BridgeConfig.model_validate(
            {
                "database": "allow.db",
                "apiEndpointAllowList": ["http://mcp.allowed.test/mcp"],
                "connections": [{"id": "declared", "owner": "alice", "endpoint": f"{tools.url}/mcp", **canary.connection_auth()}],
            }
        )
        with serve(bridge_app(config, tmp_path).app) as server:
            outside = await request(server, "POST", "/connections", body={"id": "meta", "endpoint": "http://169.254.169.254/"})
            inside = await request(server, "POST", "/connections", body={"id": "ok", "endpoint": "http://mcp.allowed.test/mcp/x"})
            http = mcp_http("alice-key")
            async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as alice:
                names = {t.name.split("__")[0] for t in (await alice.list_tools()).tools}
                old = await alice.call_tool("old__echo", {"text": "x"})
    assert (outside.status_code, outside.json()["error"]["message"]) == (
        403, "endpoint http://169.254.169.254/ is not in the Bridge's apiEndpointAllowList"
    )
    assert inside.status_code == 201
    assert names == {"declared"}, "a config connection is the operator's; an API one outside the list is left out"
    assert old.is_error and log.count("echo") == 0


async def test_a_save_based_on_an_old_version_of_the_graph_is_refused_with_a_conflict(bridge: ServerThread) -> None:
    # R: S2, F12 -- two editors start from the same version; the second save names it (If-Match) and loses whole
    def passthrough(name: str) -> dict[str, Any]:
        return graph([node("in1", "input", outputs=["q"]), node("out1", "output", inputs=["ctx"])],
                     [edge("e1", "in1.q", "out1.ctx")], [pipeline(name)])

    async with mcp_http("bob-key") as http:
        url = f"{bridge.url}/bridges/bob-b/graph"
        start = await http.get(url)
        assert start.headers["etag"] == '"0"'  # nothing saved yet
        first = await http.put(url, json=passthrough("first"), headers={"if-match": start.headers["etag"]})
        assert first.status_code == 200 and first.headers["etag"] == '"1"'
        late = await http.put(url, json=passthrough("late"), headers={"if-match": start.headers["etag"]})
        assert late.status_code == 409
        assert late.json()["error"]["message"] == (
            "bridge bob-b: the graph was saved by someone else meanwhile (version 1; this edit started from "
            'version 0); GET it again, redo the edit, and save with If-Match: "1"'
        )
        now = await http.get(url)
        assert now.json() == passthrough("first") and now.headers["etag"] == '"1"'
        blind = await http.put(url, json=passthrough("blind"))  # a client that sends no If-Match saves as before
        assert blind.status_code == 200 and blind.headers["etag"] == '"2"'
        bad = await http.put(url, json=passthrough("bad"), headers={"if-match": "yesterday"})
        assert bad.status_code == 400 and "If-Match" in bad.json()["error"]["message"]
        assert (await http.get(url)).json() == passthrough("blind")
