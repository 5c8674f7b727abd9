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
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from gateway.bridge.graph import Edge, Graph, Node, Pipeline
from gateway.bridge.limits import BridgeLimits, OverLimit, Size, measure, object_size
from gateway.tracing import span

log = logging.getLogger("toolgate.bridge.runner")

MAX_NODES_PER_RUN = 50

ToolCaller = Callable[[str, str, dict[str, Any]], Awaitable[types.CallToolResult]]
"""`(connection_id, tool, arguments) -> result`; raises on a failure to call: an `OverLimit` when a
bound of the Bridge stopped it (a result cut at `resultBytes`), whose words the caller may read."""


class PipelineRefused(Exception):
    """The pipeline cannot run at all (too many nodes, a transform node); nothing was called."""


class PipelineFailed(Exception):
    """The run stopped. At a node (`node_failed`): `node <id> (<tool>) failed` (F11), followed by the
    reason when the reason is the Bridge's own (a value over a bound), never a connection's words.
    Before a wave was dispatched (`node_id` None): its tool calls together were over `waveBytes`."""

    def __init__(self, message: str, node_id: str | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id


def node_failed(node: Node, reason: str | None = None) -> PipelineFailed:
    """`node <id> (<tool>) failed[: reason]`."""
    text = f"node {node.id} ({node.tool or node.kind}) failed"
    return PipelineFailed(f"{text}: {reason}" if reason else text, node.id)


def _listed(nodes: list[Node], most: int = 5) -> str:
    ids = [n.id for n in nodes]
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")


@dataclass(frozen=True)
class RunPlan:
    """The dependency waves of one pipeline (each wave's nodes run together) and, per node, the
    edges arriving at it, in graph order."""

    pipeline: Pipeline
    waves: list[list[str]]
    incoming: dict[str, list[Edge]] = field(default_factory=dict)

    @property
    def node_ids(self) -> list[str]:
        """Every node the run touches."""
        return [n for wave in self.waves for n in wave]


def plan_run(graph: Graph, pipeline: Pipeline, max_nodes: int = MAX_NODES_PER_RUN) -> RunPlan:
    """The nodes `pipeline.outputNode` depends on, grouped in topological waves (F9, F10)."""
    edges_in: dict[str, list[Edge]] = {n.id: [] for n in graph.nodes}
    for edge in graph.edges:
        edges_in.setdefault(edge.target.node, []).append(edge)
    needed: set[str] = set()
    stack = [pipeline.outputNode]
    while stack:
        node_id = stack.pop()
        if node_id not in needed:
            needed.add(node_id)
            stack.extend(e.source.node for e in edges_in.get(node_id, ()))
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
        sorter.add(node_id, *(e.source.node for e in edges_in.get(node_id, ()) if e.source.node in needed))
    sorter.prepare()
    waves: list[list[str]] = []
    while sorter.is_active():
        wave = sorted(sorter.get_ready())
        waves.append(wave)
        sorter.done(*wave)
    incoming = {n: [e for e in edges_in.get(n, []) if e.source.node in needed] for n in needed}
    return RunPlan(pipeline, waves, incoming)


async def run_pipeline(
    graph: Graph, plan: RunPlan, arguments: dict[str, Any], call: ToolCaller, limits: BridgeLimits | None = None
) -> dict[str, Any]:
    """Run the plan; return the object of the output node's ports. Raises `PipelineFailed`, also
    when a value passes `limits` (bytes or nesting): the run stops at the node that made it."""
    values = _Values(graph.node_map(), plan, limits or BridgeLimits())
    for wave in plan.waves:
        tool_nodes = [values.nodes[n] for n in wave if values.nodes[n].kind == "tool"]
        for node_id in wave:
            node = values.nodes[node_id]
            if node.kind == "input" and node_id == plan.pipeline.inputNode:
                ports = node.outputs or list(arguments)
                values.put_measured(node, {p: arguments[p] for p in ports if p in arguments})
            elif node.kind == "input":
                values.put_measured(node, {})  # another pipeline's entry: the caller's arguments are not its to read
            elif node.kind in ("merge", "output"):
                values.put_object(node)
        if tool_nodes:
            await _run_wave(tool_nodes, values, call)
    return values.values[plan.pipeline.outputNode]


async def _run_wave(wave: list[Node], values: "_Values", call: ToolCaller) -> None:
    """Call the wave's tool nodes together. What the wave holds at once is bounded by `waveBytes`:
    its arguments before anything is dispatched (each node's are within `valueBytes` already, but
    50 of them need not be), then its results as they arrive."""
    limit = values.limits.waveBytes
    prepared = {node.id: values.arguments(node) for node in wave}
    sending = sum(size.bytes for _, size in prepared.values())
    if sending > limit:
        raise PipelineFailed(
            f"{len(wave)} tool nodes that run together ({_listed(wave)}) would send {sending} bytes of arguments, "
            f"over the limit of {limit} bytes; none of them was called"
        )
    held = 0

    async def one(node: Node) -> None:
        nonlocal held
        try:
            attributes = {"toolgate.bridge.node": node.id, "toolgate.bridge.connection": node.connectionId or "", "gen_ai.tool.name": node.tool or ""}
            with span(f"pipeline node {node.id}", attributes):  # O3
                result = await call(node.connectionId or "", node.tool or "", prepared[node.id][0])
        except OverLimit as exc:  # the Bridge's own bound (a result cut at resultBytes): its words are shown
            raise node_failed(node, str(exc)) from None
        except Exception as exc:
            log.info("pipeline node %s (%s) failed: %s", node.id, node.tool, exc)
            raise node_failed(node) from None
        if result.is_error:
            log.info("pipeline node %s (%s) returned an error result", node.id, node.tool)
            raise node_failed(node)
        held += values.put_measured(node, result_value(result)).bytes
        if held > limit:
            together = f"the results of the {len(wave)} tool nodes that run together"
            raise node_failed(node, f"{together} are over the limit of {limit} bytes")

    try:
        async with asyncio.TaskGroup() as group:
            for node in wave:
                group.create_task(one(node))
    except* PipelineFailed as failed:
        raise failed.exceptions[0] from None


class _Values:
    """The values the nodes of one run produced, with their sizes. Merge and output nodes hold
    references to their inputs (nothing is copied) and are sized from their inputs' sizes."""

    def __init__(self, nodes: dict[str, Node], plan: RunPlan, limits: BridgeLimits) -> None:
        self.nodes = nodes
        self._plan = plan
        self.limits = limits
        self.values: dict[str, Any] = {}
        self._sizes: dict[str, Size] = {}
        self._port_sizes: dict[tuple[str, str], Size] = {}

    def put_measured(self, node: Node, value: Any) -> Size:
        """Keep a concrete value (arguments, a tool's result) after sizing it; its size."""
        try:
            size = self._sizes[node.id] = measure(value, self.limits)
        except OverLimit as exc:
            raise node_failed(node, str(exc)) from None
        self.values[node.id] = value
        return size

    def put_object(self, node: Node) -> None:
        """A merge or output node: the object of its inputs."""
        inputs, sizes = self._inputs(node)
        try:
            self._sizes[node.id] = object_size(sizes, self.limits)
        except OverLimit as exc:
            raise node_failed(node, str(exc)) from None
        self.values[node.id] = inputs

    def arguments(self, node: Node) -> tuple[dict[str, Any], Size]:
        """A tool node's call arguments, `{...config, ...inputs}` (F10), within the bounds, and their size."""
        inputs, sizes = self._inputs(node)
        try:
            config_sizes = {k: measure(v, self.limits) for k, v in node.config.items() if k not in inputs}
            size = object_size({**config_sizes, **sizes}, self.limits)
        except OverLimit as exc:
            raise node_failed(node, f"its arguments: {exc}") from None
        return {**node.config, **inputs}, size

    def _inputs(self, node: Node) -> tuple[dict[str, Any], dict[str, Size]]:
        """The values arriving at a node's input ports; inputs that produce no value are left out."""
        inputs: dict[str, Any] = {}
        sizes: dict[str, Size] = {}
        for edge in self._plan.incoming.get(node.id, ()):
            source_id, port = edge.source.node, edge.source.port
            if source_id not in self.values:
                continue
            source = self.nodes[source_id]
            produced = self.values[source_id]
            whole = source.kind == "merge" or (
                source.kind == "tool" and not (isinstance(produced, dict) and port in produced)
            )
            if whole:
                inputs[edge.target.port], sizes[edge.target.port] = produced, self._sizes[source_id]
            elif isinstance(produced, dict) and port in produced:
                inputs[edge.target.port] = produced[port]
                sizes[edge.target.port] = self._port_size(source, port, produced[port])
        return inputs, sizes

    def _port_size(self, source: Node, port: str, value: Any) -> Size:
        key = (source.id, port)
        size = self._port_sizes.get(key)
        if size is None:
            # a part of a value already measured whole: within the bounds too
            size = self._port_sizes[key] = measure(value, self.limits)
        return size


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
