"""The REST routes the console's editor and lists use (C2–C4): editing connections and bridges, a
connection's tools with their input schemas, a saved pipeline tried from the editor, and the audit
log's scope filter and paging — each scoped to the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.bridge_servers import ServedBridge, edge, graph, node, pipeline, rest, served_bridge, tool_node


World = ServedBridge


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with served_bridge(tmp_path_factory.mktemp("editor"), lambda tools: {
        "database": "editor.db",
        "connections": [{"id": "declared", "owner": "alice", "endpoint": f"{tools}/mcp"}],
        "bridges": [{"id": "declared-b", "owner": "alice", "connections": ["declared"]}],
    }) as found:
        yield found


call = rest


def echo_graph() -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", "mine", inputs=["text", "prefix"], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.said")],
        [pipeline("say")],
    )


async def test_a_connection_made_through_the_api_can_be_edited_by_its_owner_only(world: World) -> None:
    # R: C2
    made = await call(world, "POST", "/connections", body={"id": "edit-me", "endpoint": "http://127.0.0.1:9/mcp"})
    assert made.status_code == 201
    changed = await call(world, "PATCH", "/connections/edit-me", body={"endpoint": f"{world.tools_url}/mcp", "prefix": "em"})
    assert changed.status_code == 200
    assert changed.json() == {"id": "edit-me", "owner": "alice", "endpoint": f"{world.tools_url}/mcp",
                              "authHeaderName": None, "prefix": "em", "source": "api"}
    assert (await call(world, "PATCH", "/connections/edit-me", key="bob-key", body={"prefix": "x"})).status_code == 404
    assert (await call(world, "PATCH", "/connections/declared", body={"prefix": "x"})).status_code == 409
    unknown = await call(world, "PATCH", "/connections/edit-me", body={"owner": "bob"})
    assert unknown.status_code == 400 and "unknown field(s): owner" in unknown.json()["error"]["message"]
    outside = await call(world, "PATCH", "/connections/edit-me", body={"endpoint": "http://169.254.169.254/mcp"})
    assert outside.status_code == 403


async def test_a_bridge_made_through_the_api_changes_its_connections_within_the_owner_rules(world: World) -> None:
    # R: C2
    await call(world, "POST", "/connections", body={"id": "b-one", "endpoint": f"{world.tools_url}/mcp"})
    await call(world, "POST", "/connections", body={"id": "b-two", "endpoint": f"{world.tools_url}/mcp"})
    assert (await call(world, "POST", "/bridges", body={"id": "grow", "connections": ["b-one"]})).status_code == 201
    grown = await call(world, "PATCH", "/bridges/grow", body={"connections": ["b-one", "b-two"]})
    assert grown.status_code == 200 and grown.json()["connections"] == ["b-one", "b-two"]
    assert (await call(world, "PATCH", "/bridges/grow", key="bob-key", body={"connections": []})).status_code == 404
    unknown = await call(world, "PATCH", "/bridges/grow", body={"connections": ["nope"]})
    assert unknown.status_code == 400 and "unknown connection(s): nope" in unknown.json()["error"]["message"]
    assert (await call(world, "PATCH", "/bridges/declared-b", body={"connections": []})).status_code == 409


async def test_a_connections_tools_come_with_their_input_schemas_for_the_callers_own_connections(world: World) -> None:
    # R: C3
    listed = await call(world, "GET", "/connections/declared/tools")
    assert listed.status_code == 200
    echo = next(t for t in listed.json()["data"] if t["name"] == "echo")
    assert set(echo["inputSchema"]["properties"]) == {"text", "prefix"}
    assert (await call(world, "GET", "/connections/declared/tools", key="bob-key")).status_code == 404


async def test_a_saved_pipeline_runs_from_the_editor_with_its_result_or_the_failing_node_and_is_audited(world: World) -> None:
    # R: C3, C4
    await call(world, "POST", "/connections", body={"id": "mine", "endpoint": f"{world.tools_url}/mcp"})
    await call(world, "POST", "/bridges", body={"id": "runs", "connections": ["mine"]})
    assert (await call(world, "PUT", "/bridges/runs/graph", body=echo_graph())).status_code == 200
    ok = await call(world, "POST", "/bridges/runs/run", body={"name": "say", "arguments": {"text": "hello"}})
    failed = await call(world, "POST", "/bridges/runs/run", body={"name": "say", "arguments": {}})
    assert ok.status_code == 200
    assert {k: v for k, v in ok.json().items() if k != "nodes"} == {
        "isError": False, "text": '{"said": "hello"}', "structuredContent": {"said": "hello"}}
    assert [(n["id"], n["status"]) for n in ok.json()["nodes"]] == [("in1", "ok"), ("t1", "ok"), ("out1", "ok")]
    assert failed.status_code == 200 and failed.json()["isError"] and failed.json()["text"].startswith("node t1 (echo) failed")
    assert (await call(world, "POST", "/bridges/runs/run", body={"name": "nope"})).status_code == 404
    assert (await call(world, "POST", "/bridges/runs/run", key="bob-key", body={"name": "say"})).status_code == 404
    bad = await call(world, "POST", "/bridges/runs/run", body={"name": "say", "arguments": [1]})
    assert bad.status_code == 400

    await world.flushed()
    records = (await call(world, "GET", "/audit?action=mcp.pipeline_call&scope=bridge:runs")).json()["data"]
    assert [(r["resource"], r["status"]) for r in records] == [("say", "failure"), ("say", "success")]


async def test_audit_records_page_newest_first_with_a_before_cursor(world: World) -> None:
    # R: C4
    for i in range(5):
        await call(world, "POST", "/connections", body={"id": f"page{i}", "endpoint": f"{world.tools_url}/mcp"})
    await world.flushed()
    query = "/audit?action=connection.create&limit=2"
    pages, cursor = [], None
    while True:
        data = (await call(world, "GET", query + (f"&before={cursor}" if cursor else ""))).json()["data"]
        if not data:
            break
        pages.append([r["resource"] for r in data])
        cursor = data[-1]["seq"]
    seen = [name for page in pages for name in page if name.startswith("page")]
    assert seen == ["page4", "page3", "page2", "page1", "page0"]
    assert all(len(page) <= 2 for page in pages)
    assert (await call(world, "GET", "/audit?before=-1")).status_code == 400
    assert (await call(world, "GET", "/audit?scope=connection:page0", key="bob-key")).json()["data"] == []
