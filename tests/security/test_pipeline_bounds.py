"""Bounds on pipelines (issue 15, finding 1): merge chains, value size and nesting, graph size.

A merge holds references to its inputs; two edges from one merge into the next used to double the
output per level (20 levels: a 43 MB answer, the gateway frozen). The run now sizes every value
from its inputs' sizes and stops at the node that passes `bridge.limits` with a clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.graph import Graph
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.runner import PipelineFailed, plan_run, run_pipeline
from gateway.bridge.validation import GraphInvalid, parse_graph
from tests.support.bridge_servers import CallLog, bridge_over, edge, graph, mcp_http, node, pipeline, tool_node, tool_server
from tests.support.http_server import ServerThread


def doubling_chain(levels: int) -> dict[str, Any]:
    """in1 → m0 ⇉ m1 ⇉ … ⇉ m<levels-1> → out1, every merge fed twice by the one before it."""
    nodes = [node("in1", "input", outputs=["q"])] + [node(f"m{i}", "merge", inputs=["a", "b"]) for i in range(levels)]
    nodes.append(node("out1", "output", inputs=["r"]))
    edges = [edge("e_a0", "in1.q", "m0.a"), edge("e_b0", "in1.q", "m0.b")]
    for i in range(1, levels):
        edges += [edge(f"e_a{i}", f"m{i - 1}.o", f"m{i}.a"), edge(f"e_b{i}", f"m{i - 1}.o", f"m{i}.b")]
    edges.append(edge("e_out", f"m{levels - 1}.o", "out1.r"))
    return graph(nodes, edges, [pipeline("chain")])


async def no_tools(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("this pipeline has no tool nodes")


async def test_a_48_level_merge_chain_stops_at_the_merge_that_passes_the_byte_bound() -> None:
    # R: F11 (issue 15: the 50-node limit allows 48 doubling levels)
    g = Graph.model_validate(doubling_chain(48))
    limits = BridgeLimits(valueBytes=1024 * 1024)
    with pytest.raises(PipelineFailed) as failed:
        await run_pipeline(g, plan_run(g, g.pipelines[0]), {"q": "x" * 100}, no_tools, limits)
    # 100 bytes doubled per level: m13 is the first merge over 1 MiB
    assert str(failed.value) == "node m13 (merge) failed: its value is over the limit of 1048576 bytes"


async def test_a_merge_chain_within_the_bounds_still_runs_and_shares_what_it_merges() -> None:
    # R: F6, F10
    g = Graph.model_validate(doubling_chain(3))
    output = await run_pipeline(g, plan_run(g, g.pipelines[0]), {"q": "v"}, no_tools)
    level0 = {"a": "v", "b": "v"}
    assert output == {"r": {"a": {"a": level0, "b": level0}, "b": {"a": level0, "b": level0}}}
    assert output["r"]["a"] is output["r"]["b"], "a merge refers to its inputs; it copies nothing"


async def test_a_value_nested_past_the_depth_bound_stops_the_run() -> None:
    # R: F11
    g = Graph.model_validate(doubling_chain(10))
    with pytest.raises(PipelineFailed, match=r"^node m8 \(merge\) failed: its value is nested deeper than the limit of 8 levels$"):
        await run_pipeline(g, plan_run(g, g.pipelines[0]), {"q": 1}, no_tools, BridgeLimits(valueDepth=8))


async def test_a_tool_result_over_the_bound_stops_the_run_at_that_node() -> None:
    # R: F11
    data = graph(
        [node("in1", "input", outputs=["q"]), tool_node("t1", "big", inputs=["q"]), node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.q", "t1.q"), edge("e2", "t1.result", "out1.r")],
        [pipeline("big")],
    )
    g = Graph.model_validate(data)

    async def big(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="y" * 5000)])

    with pytest.raises(PipelineFailed, match=r"^node t1 \(big\) failed: its value is over the limit of 4096 bytes$"):
        await run_pipeline(g, plan_run(g, g.pipelines[0]), {"q": "x"}, big, BridgeLimits(valueBytes=4096))


async def test_arguments_over_the_bound_are_never_sent_to_a_tool() -> None:
    # R: F10, F11
    data = graph(
        [node("in1", "input", outputs=["q"]), tool_node("t1", "echo", inputs=["text"], config={"prefix": "p" * 1000}),
         node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.q", "t1.text"), edge("e2", "t1.result", "out1.r")],
        [pipeline("p")],
    )
    g = Graph.model_validate(data)
    with pytest.raises(PipelineFailed, match=r"^node t1 \(echo\) failed: its arguments: its value is over the limit of 2048 bytes$"):
        await run_pipeline(g, plan_run(g, g.pipelines[0]), {"q": "x" * 1500}, no_tools, BridgeLimits(valueBytes=2048))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["edges"].extend(edge(f"x{i}", "in1.q", "out1.r") for i in range(2001)), "too large: 2002 edges; at most 2000"),
        (lambda g: g["nodes"].extend(node(f"n{i}", "merge") for i in range(500)), "too large: 502 nodes; at most 500"),
        (lambda g: g["nodes"][0].update(outputs=[f"p{i}" for i in range(65)]), "too large: node(s) in1 have more than 64 input or output ports"),
        (lambda g: g["nodes"][0].update(label="z" * (1024 * 1024)), "too large: the graph is over 1048576 bytes"),
    ],
)
def test_a_graph_past_the_size_bounds_is_refused_naming_the_bound(change: Any, message: str) -> None:
    # R: F8 (issue 15: a 40k-edge graph cost 1.6 s of stall per call)
    data = graph([node("in1", "input", outputs=["q"]), node("out1", "output", inputs=["r"])], [edge("e1", "in1.q", "out1.r")],
                 [pipeline("p")])
    change(data)
    with pytest.raises(GraphInvalid) as refused:
        parse_graph(data)
    assert [(p.rule, p.message) for p in refused.value.problems] == [("too large", message)]


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base_dir = tmp_path_factory.mktemp("bounds")
    with bridge_over(tool_server(CallLog(), delay=0), base_dir, connection="tools", owner="alice", bridge="pipes") as server:
        yield server


async def test_the_48_level_merge_chain_called_through_the_bridge_answers_an_error_result(bridge: ServerThread) -> None:
    # R: F11
    async with mcp_http("alice-key") as http:
        saved = await http.put(f"{bridge.url}/bridges/pipes/graph", json=doubling_chain(48))
        assert saved.status_code == 200, saved.text
    async with Client(streamable_http_client(f"{bridge.url}/mcp/pipes", http_client=mcp_http("alice-key"))) as client:
        result = await client.call_tool("chain", {"q": "hello"})
    assert result.is_error
    assert result.content == [types.TextContent(text="node m17 (merge) failed: its value is over the limit of 4194304 bytes")]


async def test_a_graph_with_too_many_edges_is_refused_by_the_api_with_400(bridge: ServerThread) -> None:
    # R: F8
    data = doubling_chain(3)
    data["edges"] += [edge(f"x{i}", "in1.q", "m0.a") for i in range(2000)]
    async with mcp_http("alice-key") as http:
        response = await http.put(f"{bridge.url}/bridges/pipes/graph", json=data)
    assert response.status_code == 400
    assert response.json()["error"]["problems"] == [
        {"rule": "too large", "ids": ["edges"], "message": "too large: 2007 edges; at most 2000"}
    ]
