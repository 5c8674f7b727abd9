"""The pipeline runner with scripted tools: waves, argument overlay, fail-fast, limits (F9–F11)."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest

from gateway.bridge.graph import Graph
from gateway.bridge.runner import PipelineFailed, PipelineRefused, RunTrace, plan_run, run_pipeline
from tests.support.bridge_servers import edge, fan_in_graph, graph, node, pipeline, tool_node


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=value)])


def parsed(data: dict[str, Any]) -> Graph:
    return Graph.model_validate(data)


def test_the_plan_keeps_only_what_the_output_depends_on_in_waves() -> None:
    # R: F9, F10
    g = parsed(fan_in_graph())
    assert plan_run(g, g.pipelines[0]).waves == [["in1"], ["ta", "tb"], ["m1"], ["out1"]]


async def test_a_wave_runs_its_tools_together_before_the_next_wave_starts() -> None:
    # R: F10
    g = parsed(fan_in_graph())
    both_started = asyncio.Event()
    started: list[str] = []

    async def call(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        started.append(tool)
        if len(started) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), timeout=5)  # only returns if the other call is running too
        return types.CallToolResult(content=[], structured_content={"result": f"{tool}:{args['query']}"})

    output = await run_pipeline(g, plan_run(g, g.pipelines[0]), {"query": "q"}, call)
    assert output == {"ctx": {"a": "slow_a:q", "b": "slow_b:q"}}
    assert sorted(started) == ["slow_a", "slow_b"]


async def test_arguments_are_config_overlaid_by_the_inputs_that_have_a_value() -> None:
    # R: F10
    data = graph(
        [
            node("in1", "input", outputs=["a", "b"]),
            tool_node("t1", "echo", inputs=["a", "b"], outputs=["result"], config={"a": "cfg-a", "b": "cfg-b", "c": 3}),
            node("out1", "output", inputs=["r"]),
        ],
        [edge("e1", "in1.a", "t1.a"), edge("e2", "in1.b", "t1.b"), edge("e3", "t1.result", "out1.r")],
        [pipeline("p")],
    )
    g = parsed(data)
    seen: list[dict[str, Any]] = []

    async def call(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        seen.append(args)
        return text('{"result": "ok"}')

    output = await run_pipeline(g, plan_run(g, g.pipelines[0]), {"a": "given"}, call)
    assert seen == [{"a": "given", "b": "cfg-b", "c": 3}]
    assert output == {"r": "ok"}


async def test_the_first_failure_stops_the_run_with_the_node_and_tool() -> None:
    # R: F11
    g = parsed(fan_in_graph())
    cancelled = asyncio.Event()

    async def call(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        if tool == "slow_b":
            return types.CallToolResult(content=[types.TextContent(text="nope")], is_error=True)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    plan = plan_run(g, g.pipelines[0])
    trace = RunTrace.of(g, plan)
    with pytest.raises(PipelineFailed) as caught:
        await run_pipeline(g, plan, {"query": "q"}, call, trace=trace)
    assert str(caught.value) == "node tb (slow_b) failed: nope"  # R: C5 — the tool's own words
    assert cancelled.is_set(), "the other node of the wave was cancelled"
    statuses = {n.id: (n.status, n.reason) for n in trace.nodes.values()}
    assert statuses == {
        "in1": ("ok", None), "ta": ("skipped", "cancelled: node tb failed"), "tb": ("failed", "nope"),
        "m1": ("skipped", "not run: node tb (slow_b) failed"), "out1": ("skipped", "not run: node tb (slow_b) failed"),
    }
    assert trace.nodes["tb"].input == {"query": "q"} and trace.nodes["tb"].duration_ms is not None


async def test_a_tool_that_raises_is_a_failed_node() -> None:
    # R: F11
    g = parsed(fan_in_graph())

    async def call(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        raise TimeoutError("30s")

    with pytest.raises(PipelineFailed, match=r"^node t[ab] \(slow_[ab]\) failed: the call failed$"):
        await run_pipeline(g, plan_run(g, g.pipelines[0]), {"query": "q"}, call)


def test_fifty_nodes_run_and_fifty_one_are_refused() -> None:
    # R: F11
    def chain(n: int) -> Graph:
        merges = [node(f"m{i}", "merge") for i in range(n - 2)]
        edges = [edge("e_in", "in1.q", "m0.x")] + [edge(f"e{i}", f"m{i}.o", f"m{i + 1}.x") for i in range(n - 3)]
        edges.append(edge("e_out", f"m{n - 3}.o", "out1.r"))
        return parsed(graph([node("in1", "input", outputs=["q"]), *merges, node("out1", "output")], edges, [pipeline("p")]))

    assert len(plan_run(chain(50), chain(50).pipelines[0]).node_ids) == 50
    with pytest.raises(PipelineRefused, match="^pipeline p needs 51 nodes; at most 50 run at once$"):
        plan_run(chain(51), chain(51).pipelines[0])


def test_a_transform_node_on_the_path_is_refused_but_one_off_the_path_is_not() -> None:
    # R: F6, F9
    data = fan_in_graph()
    data["nodes"].append(node("x1", "transform"))
    data["edges"].append(edge("e9", "in1.query", "x1.v"))
    g = parsed(data)
    assert plan_run(g, g.pipelines[0]).waves[0] == ["in1"]
    data["edges"].append(edge("e10", "x1.v", "out1.ctx"))
    g = parsed(data)
    with pytest.raises(PipelineRefused, match="transform nodes can be saved but not run yet"):
        plan_run(g, g.pipelines[0])


async def test_only_the_pipelines_own_input_node_receives_the_callers_arguments() -> None:
    # R: F9, F10
    data = graph(
        [
            node("in1", "input", outputs=["a"]),
            node("in2", "input", outputs=["a", "b"]),
            tool_node("t1", "echo", inputs=["a", "b"], outputs=["result"]),
            node("out1", "output", inputs=["r"]),
        ],
        [edge("e1", "in1.a", "t1.a"), edge("e2", "in2.b", "t1.b"), edge("e3", "t1.result", "out1.r")],
        [pipeline("p")],
    )
    g = parsed(data)
    seen: list[dict[str, Any]] = []

    async def call(connection: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        seen.append(args)
        return text("ok")

    await run_pipeline(g, plan_run(g, g.pipelines[0]), {"a": 1, "b": 2}, call)
    assert seen == [{"a": 1}]
