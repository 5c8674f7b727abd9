"""A pipeline run says why (C5): the editor's run answer lists every node of the plan with its status,
reason, duration and bounded, scrubbed values; the audit record carries the per-node outcome; the
run history reads those records back, newest first — against the real Bridge over loopback, with a
real MCP tool server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.bridge.run_report import VALUE_CHARS
from tests.support import canary, postgres
from tests.support.bridge_servers import ServedBridge, edge, graph, node, pipeline, rest, served_bridge, tool_node


World = ServedBridge


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with served_bridge(tmp_path_factory.mktemp("runs"), lambda tools: {
        "database": "runs.db",
        "connections": [{"id": "declared", "owner": "alice", "endpoint": f"{tools}/mcp", **canary.connection_auth()}],
    }) as found:
        yield found


call = rest


def one_tool(tool: str, connection: str, port: str = "text", name: str = "say") -> dict[str, Any]:
    """in1.<port> → t1 (<tool>) → out1.said."""
    return graph(
        [node("in1", "input", outputs=[port]), tool_node("t1", tool, connection, inputs=[port], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [edge("e1", f"in1.{port}", f"t1.{port}"), edge("e2", "t1.result", "out1.said")],
        [pipeline(name)],
    )


async def bridge_with(world: World, bridge_id: str, connection: str, data: dict[str, Any]) -> None:
    assert (await call(world, "POST", "/bridges", body={"id": bridge_id, "connections": [connection]})).status_code == 201
    saved = await call(world, "PUT", f"/bridges/{bridge_id}/graph", body=data)
    assert saved.status_code == 200, saved.text


async def run(world: World, bridge_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = await call(world, "POST", f"/bridges/{bridge_id}/run", body={"name": name, "arguments": arguments})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in result["nodes"]}


async def test_a_successful_run_shows_each_nodes_input_output_and_duration(world: World) -> None:
    # R: C5
    await bridge_with(world, "ok-run", "declared", one_tool("echo", "declared"))
    result = await run(world, "ok-run", "say", {"text": "hello"})
    assert not result["isError"] and result["structuredContent"] == {"said": "hello"}
    nodes = by_id(result)
    assert list(nodes) == ["in1", "t1", "out1"]
    assert nodes["in1"] == {"id": "in1", "kind": "input", "tool": None, "connectionId": None, "status": "ok",
                            "reason": None, "durationMs": None, "input": None, "output": {"text": "hello"}}
    tool = nodes["t1"]
    assert (tool["kind"], tool["tool"], tool["connectionId"], tool["status"]) == ("tool", "echo", "declared", "ok")
    assert tool["input"] == {"text": "hello"} and tool["output"] == {"result": "hello"} and tool["reason"] is None
    assert isinstance(tool["durationMs"], (int, float)) and tool["durationMs"] >= 0
    assert nodes["out1"]["input"] == {"said": "hello"} and nodes["out1"]["status"] == "ok"


async def test_a_failing_tool_names_its_error_text_and_the_nodes_after_it_are_skipped(world: World) -> None:
    # R: C5, F11
    await bridge_with(world, "boom-run", "declared", one_tool("boom", "declared", port="query"))
    result = await run(world, "boom-run", "say", {"query": "x"})
    assert result["isError"] and result["text"] == "node t1 (boom) failed: Error executing tool boom: kaboom"
    nodes = by_id(result)
    assert (nodes["t1"]["status"], nodes["t1"]["reason"]) == ("failed", "Error executing tool boom: kaboom")
    assert nodes["t1"]["input"] == {"query": "x"} and nodes["t1"]["output"] is None
    assert (nodes["out1"]["status"], nodes["out1"]["reason"]) == ("skipped", "not run: node t1 (boom) failed")


async def test_a_missing_argument_fails_with_a_reason_naming_it(world: World) -> None:
    # R: C5
    await bridge_with(world, "arg-run", "declared", one_tool("echo", "declared"))
    result = await run(world, "arg-run", "say", {})
    reason = by_id(result)["t1"]["reason"]
    assert result["isError"] and "text" in reason and "required" in reason.lower()
    assert result["text"] == f"node t1 (echo) failed: {reason}"


async def test_an_unreachable_server_and_a_deleted_connection_are_named_as_such(world: World) -> None:
    # R: C5
    made = await call(world, "POST", "/connections", body={"id": "dead", "endpoint": "http://127.0.0.1:9/mcp"})
    assert made.status_code == 201
    await bridge_with(world, "dead-run", "dead", one_tool("echo", "dead"))
    dead = await run(world, "dead-run", "say", {"text": "x"})
    assert dead["isError"] and by_id(dead)["t1"]["reason"] == "server unreachable"
    assert dead["text"] == "node t1 (echo) failed: server unreachable"

    made = await call(world, "POST", "/connections", body={"id": "gone", "endpoint": f"{world.tools_url}/mcp"})
    assert made.status_code == 201
    await bridge_with(world, "gone-run", "gone", one_tool("echo", "gone"))
    assert (await call(world, "DELETE", "/connections/gone")).status_code == 204
    gone = await run(world, "gone-run", "say", {"text": "x"})
    assert gone["isError"] and by_id(gone)["t1"]["reason"] == "connection deleted"


async def test_node_values_are_cut_past_the_bound_and_scrubbed_of_secrets(world: World) -> None:
    # R: C5, B4
    await bridge_with(world, "big-run", "declared", one_tool("echo", "declared"))
    big = "x" * (VALUE_CHARS + 100)
    nodes = by_id(await run(world, "big-run", "say", {"text": big}))
    output = nodes["t1"]["output"]
    whole = len(f'{{"result": "{big}"}}')
    assert isinstance(output, str) and output.startswith('{"result": "xxx') and output.endswith(f"…[cut: {whole} bytes in all]")
    assert len(output) < VALUE_CHARS + 100
    secret = await run(world, "big-run", "say", {"text": f"token={canary.CONNECTION_TOKEN}"})
    assert canary.CONNECTION_TOKEN not in str(secret)
    assert by_id(secret)["t1"]["output"] == {"result": "token=[redacted]"}


async def test_the_audit_record_and_the_run_history_carry_each_nodes_outcome(world: World) -> None:
    # R: C5, F4
    await bridge_with(world, "hist", "declared", one_tool("echo", "declared"))
    await run(world, "hist", "say", {"text": "one"})
    await run(world, "hist", "say", {})
    await world.flushed()
    records = (await call(world, "GET", "/audit?action=mcp.pipeline_call&scope=bridge:hist")).json()["data"]
    run_record = records[0]["args"]["$run"]
    assert run_record["durationMs"] > 0 and run_record["reason"].startswith("node t1 (echo) failed: ")
    assert [(n["id"], n["status"]) for n in run_record["nodes"]] == [("in1", "ok"), ("t1", "failed"), ("out1", "skipped")]
    assert all(set(n) == {"id", "status", "reason", "durationMs"} for n in run_record["nodes"])  # no values

    history = await call(world, "GET", "/bridges/hist/runs?pipeline=say&limit=5")
    assert history.status_code == 200
    runs = history.json()["data"]
    assert [r["isError"] for r in runs] == [True, False]
    newest = runs[0]
    assert newest["pipeline"] == "say" and newest["caller"] == "alice" and newest["at"].endswith("Z")
    assert newest["reason"] == run_record["reason"] and newest["durationMs"] == run_record["durationMs"]
    assert newest["nodes"] == run_record["nodes"]
    assert runs[1]["reason"] is None and runs[1]["at"] <= newest["at"]
    assert len((await call(world, "GET", "/bridges/hist/runs?limit=1")).json()["data"]) == 1
    assert (await call(world, "GET", "/bridges/hist/runs?pipeline=other")).json()["data"] == []


async def test_the_run_history_is_the_bridges_only_and_its_limit_is_checked(world: World) -> None:
    # R: C5, F2
    assert (await call(world, "GET", "/bridges/hist/runs", key="bob-key")).status_code == 404
    for bad in ("0", "101", "x", "-1"):
        answer = await call(world, "GET", f"/bridges/hist/runs?limit={bad}")
        assert answer.status_code == 400 and "limit" in answer.json()["error"]["message"]


@pytest.fixture
async def on_postgres(tmp_path: Path) -> AsyncIterator[World]:
    async with postgres.fresh_database() as database:
        with served_bridge(tmp_path, lambda tools: {
            "database": database, "connections": [{"id": "declared", "owner": "alice", "endpoint": f"{tools}/mcp"}],
        }) as found:
            yield found


async def test_the_run_history_reads_the_postgresql_audit_log_too(on_postgres: World) -> None:
    # R: C5, S1
    world = on_postgres
    await bridge_with(world, "pg", "declared", one_tool("echo", "declared"))
    await run(world, "pg", "say", {"text": "one"})
    await run(world, "pg", "say", {})
    await world.flushed()
    runs = (await call(world, "GET", "/bridges/pg/runs?pipeline=say")).json()["data"]
    assert [(r["isError"], r["caller"]) for r in runs] == [(True, "alice"), (False, "alice")]
    assert runs[0]["reason"].startswith("node t1 (echo) failed: ") and runs[0]["at"].endswith("Z")
    assert [(n["id"], n["status"]) for n in runs[0]["nodes"]] == [("in1", "ok"), ("t1", "failed"), ("out1", "skipped")]
