"""Pipelines on `/mcp/<bridgeId>` run by the official SDK client against real tool servers (F6–F12)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from tests.support import canary
from tests.support.bridge_servers import (
    CallLog, bridge_app, edge, fan_in_graph, graph, mcp_http, node, pipeline, tool_node, tool_server,
)
from tests.support.http_server import serve


@dataclass
class World:
    url: str
    tools: CallLog


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    log = CallLog()
    with serve(tool_server(log, delay=0.2, required_header=(canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN))) as tools:
        config = BridgeConfig.model_validate(
            {
                "database": "bridge.db",
                "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp", **canary.connection_auth()}],
                "bridges": [{"id": "pipes", "owner": "alice", "connections": ["tools"]}],
            }
        )
        app = bridge_app(config, tmp_path_factory.mktemp("pipes"))
        with serve(app.app) as bridge:
            yield World(bridge.url, log)


async def save(world: World, data: dict[str, Any]) -> httpx2.Response:
    async with mcp_http("alice-key") as http:
        return await http.put(f"{world.url}/bridges/pipes/graph", json=data)


async def call(world: World, name: str, arguments: dict[str, Any], mode: str = "auto") -> Any:
    http = mcp_http("alice-key")
    async with Client(streamable_http_client(f"{world.url}/mcp/pipes", http_client=http), mode=mode) as client:
        return await client.call_tool(name, arguments)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_two_independent_slow_tools_run_in_one_wave_and_merge(world: World, mode: str) -> None:
    # R: F6, F9, F10, F12
    assert (await save(world, fan_in_graph())).status_code == 200
    before_a, before_b = len(world.tools.of("slow_a")), len(world.tools.of("slow_b"))
    result = await call(world, "fan_in", {"query": "q"}, mode)
    assert not result.is_error, result
    assert result.structured_content == {"ctx": {"a": "a:q", "b": "b:q"}}
    a, b = world.tools.of("slow_a")[before_a], world.tools.of("slow_b")[before_b]
    assert a.started < b.ended and b.started < a.ended, "the two calls of one wave overlapped on the server"


async def test_nodes_the_output_does_not_depend_on_are_never_called(world: World) -> None:
    # R: F9
    await save(world, fan_in_graph())
    await call(world, "fan_in", {"query": "q"})
    assert world.tools.count("never") == 0


async def test_a_saved_pipeline_is_listed_under_its_name_with_its_input_ports(world: World) -> None:
    # R: F1, F9, F12
    await save(world, fan_in_graph())
    http = mcp_http("alice-key")
    async with Client(streamable_http_client(f"{world.url}/mcp/pipes", http_client=http)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    async with Client(streamable_http_client(f"{world.url}/mcp", http_client=mcp_http("alice-key"))) as client:
        federation = {t.name for t in (await client.list_tools()).tools}
    # R: C7 — the port's type inferred from the tool arguments it is wired to (slow_a's `query`)
    assert tools["fan_in"].input_schema == {"type": "object", "properties": {"query": {"title": "Query", "type": "string"}}}
    assert "tools__echo" in tools
    assert "fan_in" not in federation


async def test_node_arguments_are_config_overlaid_by_inputs_and_undefined_inputs_are_dropped(world: World) -> None:
    # R: F10
    data = graph(
        [
            node("in1", "input", outputs=["text"]),
            tool_node("t1", "echo", inputs=["text", "prefix"], outputs=["result"], config={"prefix": "cfg:", "text": "default"}),
            node("out1", "output", inputs=["said"]),
        ],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.said")],
        [pipeline("say")],
    )
    assert (await save(world, data)).status_code == 200
    given = await call(world, "say", {"text": "hello"})
    left_out = await call(world, "say", {})
    assert given.structured_content == {"said": "cfg:hello"}
    assert left_out.structured_content == {"said": "cfg:default"}


async def test_a_failing_node_stops_the_run_with_its_id_and_tool(world: World) -> None:
    # R: F11
    data = graph(
        [
            node("in1", "input", outputs=["query"]),
            tool_node("bad", "boom", inputs=["query"], outputs=["result"]),
            tool_node("after", "echo", inputs=["text"], outputs=["result"]),
            node("out1", "output", inputs=["r"]),
        ],
        [edge("e1", "in1.query", "bad.query"), edge("e2", "bad.result", "after.text"), edge("e3", "after.result", "out1.r")],
        [pipeline("fails")],
    )
    await save(world, data)
    echoes = world.tools.count("echo")
    result = await call(world, "fails", {"query": "x"})
    assert result.is_error
    assert [c.text for c in result.content] == ["node bad (boom) failed: Error executing tool boom: kaboom"]  # R: C5
    assert world.tools.count("echo") == echoes


async def test_a_pipeline_of_51_nodes_is_refused_and_nothing_is_called(world: World) -> None:
    # R: F11
    merges = [node(f"m{i}", "merge", inputs=["x"], outputs=["out"]) for i in range(48)]
    chain = [node("in1", "input", outputs=["query"]), tool_node("t1", "echo", inputs=["text"], outputs=["result"]), *merges]
    edges = [edge("e_in", "in1.query", "t1.text"), edge("e_t", "t1.result", "m0.x")]
    edges += [edge(f"e{i}", f"m{i}.out", f"m{i + 1}.x") for i in range(47)]
    edges.append(edge("e_out", "m47.out", "out1.r"))
    data = graph([*chain, node("out1", "output", inputs=["r"])], edges, [pipeline("big")])
    assert len(data["nodes"]) == 51
    await save(world, data)
    echoes = world.tools.count("echo")
    result = await call(world, "big", {"query": "x"})
    assert [c.text for c in result.content] == ["pipeline big needs 51 nodes; at most 50 run at once"]
    assert world.tools.count("echo") == echoes


async def test_a_transform_node_is_saved_but_refused_at_run_time(world: World) -> None:
    # R: F6
    data = graph(
        [node("in1", "input", outputs=["q"]), node("x1", "transform"), node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.q", "x1.q"), edge("e2", "x1.v", "out1.r")],
        [pipeline("shaped")],
    )
    assert (await save(world, data)).status_code == 200
    result = await call(world, "shaped", {"q": 1})
    assert result.is_error
    assert result.content[0].text == (
        "pipeline shaped uses transform node(s) x1: transform nodes can be saved but not run yet"
    )
