"""The pipeline runner (F9–F11): only what the output depends on, in parallel waves, fail-fast.

Decision logic only: the tool calls go through the `ToolCaller` it is given, so tests can feed it
scripted tools and the service feeds it real connections (a fresh MCP session per call).
"""

from __future__ import annotations

import asyncio
import graphlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from gateway.bridge.graph import Graph, Node, Pipeline

log = logging.getLogger("toolgate.bridge.runner")

MAX_NODES_PER_RUN = 50

ToolCaller = Callable[[str, str, dict[str, Any]], Awaitable[types.CallToolResult]]
"""`(connection_id, tool, arguments) -> result`; raises on a failure to call."""


class PipelineRefused(Exception):
    """The pipeline cannot run at all (too many nodes, a transform node); nothing was called."""


class PipelineFailed(Exception):
    """A node failed; the message is exactly `node <id> (<tool>) failed` (F11)."""

    def __init__(self, node: Node) -> None:
        super().__init__(f"node {node.id} ({node.tool or node.kind}) failed")
        self.node_id = node.id


@dataclass(frozen=True)
class RunPlan:
    """The dependency waves of one pipeline: each wave's nodes run together."""

    pipeline: Pipeline
    waves: list[list[str]]

    @property
    def node_ids(self) -> list[str]:
        """Every node the run touches."""
        return [n for wave in self.waves for n in wave]


def plan_run(graph: Graph, pipeline: Pipeline, max_nodes: int = MAX_NODES_PER_RUN) -> RunPlan:
    """The nodes `pipeline.outputNode` depends on, grouped in topological waves (F9, F10)."""
    incoming: dict[str, set[str]] = {n.id: set() for n in graph.nodes}
    for edge in graph.edges:
        incoming.setdefault(edge.target.node, set()).add(edge.source.node)
    needed: set[str] = set()
    stack = [pipeline.outputNode]
    while stack:
        node_id = stack.pop()
        if node_id not in needed:
            needed.add(node_id)
            stack.extend(incoming.get(node_id, ()))
    if len(needed) > max_nodes:
        raise PipelineRefused(f"pipeline {pipeline.name} needs {len(needed)} nodes; at most {max_nodes} run at once")
    nodes = graph.node_map()
    transforms = sorted(n for n in needed if nodes[n].kind == "transform")
    if transforms:
        raise PipelineRefused(
            f"pipeline {pipeline.name} uses transform node(s) {', '.join(transforms)}: "
            "transform nodes can be saved but not run yet"
        )
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for node_id in needed:
        sorter.add(node_id, *(src for src in incoming.get(node_id, ()) if src in needed))
    sorter.prepare()
    waves: list[list[str]] = []
    while sorter.is_active():
        wave = sorted(sorter.get_ready())
        waves.append(wave)
        sorter.done(*wave)
    return RunPlan(pipeline, waves)


async def run_pipeline(graph: Graph, plan: RunPlan, arguments: dict[str, Any], call: ToolCaller) -> dict[str, Any]:
    """Run the plan; return the object of the output node's ports. Raises `PipelineFailed`."""
    nodes = graph.node_map()
    values: dict[str, Any] = {}
    for wave in plan.waves:
        tool_nodes = [nodes[n] for n in wave if nodes[n].kind == "tool"]
        for node_id in wave:
            node = nodes[node_id]
            if node.kind == "input" and node_id == plan.pipeline.inputNode:
                ports = node.outputs or list(arguments)
                values[node_id] = {p: arguments[p] for p in ports if p in arguments}
            elif node.kind == "input":
                values[node_id] = {}  # another pipeline's entry: the caller's arguments are not its to read
            elif node.kind in ("merge", "output"):
                values[node_id] = _inputs_of(graph, node_id, nodes, values)
        if tool_nodes:
            results = await _run_wave(graph, tool_nodes, nodes, values, call)
            values.update(results)
    return values[plan.pipeline.outputNode]


async def _run_wave(
    graph: Graph, wave: list[Node], nodes: dict[str, Node], values: dict[str, Any], call: ToolCaller
) -> dict[str, Any]:
    async def one(node: Node) -> Any:
        arguments = {**node.config, **_inputs_of(graph, node.id, nodes, values)}
        try:
            result = await call(node.connectionId or "", node.tool or "", arguments)
        except Exception as exc:
            log.info("pipeline node %s (%s) failed: %s", node.id, node.tool, exc)
            raise PipelineFailed(node) from None
        if result.is_error:
            log.info("pipeline node %s (%s) returned an error result", node.id, node.tool)
            raise PipelineFailed(node)
        return result_value(result)

    try:
        async with asyncio.TaskGroup() as group:
            tasks = {node.id: group.create_task(one(node)) for node in wave}
    except* PipelineFailed as failed:
        raise failed.exceptions[0] from None
    return {node_id: task.result() for node_id, task in tasks.items()}


def _inputs_of(graph: Graph, node_id: str, nodes: dict[str, Node], values: dict[str, Any]) -> dict[str, Any]:
    """The values arriving at a node's input ports; inputs that produce no value are left out."""
    inputs: dict[str, Any] = {}
    for edge in graph.edges:
        if edge.target.node != node_id or edge.source.node not in values:
            continue
        source = nodes[edge.source.node]
        produced = values[edge.source.node]
        if source.kind == "tool" and not (isinstance(produced, dict) and edge.source.port in produced):
            inputs[edge.target.port] = produced
        elif source.kind == "merge":
            inputs[edge.target.port] = produced
        elif isinstance(produced, dict) and edge.source.port in produced:
            inputs[edge.target.port] = produced[edge.source.port]
    return inputs


def result_value(result: types.CallToolResult) -> Any:
    """A tool result as a value: its structured content, else its text (parsed when it is JSON)."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    text = "\n".join(texts)
    try:
        return json.loads(text)
    except ValueError:
        return text
