"""Graph versions kept server-side (C6): every save keeps its graph (the last 50), listed newest
first, read back and restored as a new version (with If-Match as on PUT) — the store on SQLite and
PostgreSQL alike (S1), the REST routes against the real Bridge over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.bridge.records import BridgeRecord
from gateway.bridge.store import KEPT_VERSIONS, BridgeStore
from tests.support.bridge_servers import ServedBridge, edge, graph, node, pipeline, rest, served_bridge, tool_node
from tests.support.stores import KINDS, opened_store


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BridgeStore]:
    async with opened_store(request.param, tmp_path) as db:
        yield db


def tagged(tag: int, nodes: int = 0) -> dict[str, Any]:
    return {"version": 1, "nodes": [{"id": f"n{i}", "kind": "merge"} for i in range(nodes)], "edges": [], "pipelines": [],
            "tag": tag}


async def test_every_save_is_kept_the_last_fifty_newest_first(store: BridgeStore) -> None:
    # R: C6, S1
    key = ("alice", "b1")
    await store.upsert_bridge(BridgeRecord("b1", "alice"))
    assert await store.graph_versions(key) == []
    for i in range(1, KEPT_VERSIONS + 3):
        assert await store.save_graph(key, tagged(i, nodes=i % 3), float(i), "alice" if i % 2 else "bob") == i
    versions = await store.graph_versions(key)
    assert [v.version for v in versions] == list(range(KEPT_VERSIONS + 2, 2, -1))
    newest = versions[0]
    assert (newest.saved_at, newest.saved_by, newest.nodes, newest.edges) == (52.0, "bob", 1, 0)
    kept = await store.graph_version(key, 3)
    assert kept is not None and kept.graph["tag"] == 3 and kept.version == 3
    assert await store.graph_version(key, 2) is None
    assert await store.graph_versions(("bob", "b1")) == []  # ids are per owner
    await store.delete_bridge(key)
    assert await store.graph_versions(key) == []


async def test_a_refused_save_keeps_no_version(store: BridgeStore) -> None:
    # R: C6, S2
    key = ("alice", "b2")
    await store.upsert_bridge(BridgeRecord("b2", "alice"))
    await store.save_graph(key, tagged(1), 1.0, "alice", expected_version=0)
    with pytest.raises(Exception, match="graph version 1 is stored"):
        await store.save_graph(key, tagged(2), 2.0, "alice", expected_version=0)
    assert [v.version for v in await store.graph_versions(key)] == [1]


World = ServedBridge


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with served_bridge(tmp_path_factory.mktemp("versions"), lambda tools: {
        "database": "versions.db",
        "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools}/mcp"}],
        "bridges": [{"id": "vb", "owner": "alice", "connections": ["tools"]}],
    }) as found:
        yield found


call = rest


def echo(name: str) -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", "tools", inputs=["text"], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.said")],
        [pipeline(name)],
    )


async def test_versions_are_listed_read_and_restored_as_a_new_version(world: World) -> None:
    # R: C6
    assert (await call(world, "PUT", "/bridges/vb/graph", body=echo("first"))).status_code == 200
    assert (await call(world, "PUT", "/bridges/vb/graph", body=echo("second"))).status_code == 200
    listed = await call(world, "GET", "/bridges/vb/graph/versions")
    assert listed.status_code == 200
    versions = listed.json()["data"]
    assert [(v["version"], v["savedBy"], v["nodes"], v["edges"]) for v in versions] == [(2, "alice", 3, 2), (1, "alice", 3, 2)]
    assert all(v["savedAt"].endswith("Z") for v in versions)
    first = await call(world, "GET", "/bridges/vb/graph/versions/1")
    assert first.status_code == 200 and first.json()["pipelines"][0]["name"] == "first"

    stale = await call(world, "POST", "/bridges/vb/graph/versions/1/restore", headers={"if-match": '"1"'})
    assert stale.status_code == 409
    restored = await call(world, "POST", "/bridges/vb/graph/versions/1/restore", headers={"if-match": '"2"'})
    assert restored.status_code == 200 and restored.headers["etag"] == '"3"'
    assert restored.json()["pipelines"][0]["name"] == "first" and restored.json()["warnings"] == []
    current = await call(world, "GET", "/bridges/vb/graph")
    assert current.json()["pipelines"][0]["name"] == "first" and current.headers["etag"] == '"3"'
    assert [v["version"] for v in (await call(world, "GET", "/bridges/vb/graph/versions")).json()["data"]] == [3, 2, 1]
    await world.flushed()
    saves = (await call(world, "GET", "/audit?action=bridge.graph_save&scope=bridge:vb")).json()["data"]
    assert saves[0]["args"]["restoredFrom"] == 1 and "restoredFrom" not in saves[1]["args"]  # R: F4 — who restored what


async def test_versions_of_another_account_or_not_kept_are_not_found(world: World) -> None:
    # R: C6, F2
    assert (await call(world, "GET", "/bridges/vb/graph/versions", key="bob-key")).status_code == 404
    assert (await call(world, "GET", "/bridges/vb/graph/versions/1", key="bob-key")).status_code == 404
    assert (await call(world, "POST", "/bridges/vb/graph/versions/1/restore", key="bob-key")).status_code == 404
    assert (await call(world, "GET", "/bridges/vb/graph/versions/999")).status_code == 404
    assert (await call(world, "POST", "/bridges/vb/graph/versions/999/restore")).status_code == 404
