"""The pipeline runner (F9–F11): only what the output depends on, in parallel waves, fail-fast.

Decision logic only: the tool calls go through the `ToolCaller` it is given, so tests can feed it
scripted tools and the service feeds it real connections (a fresh MCP session per call).
"""

from __future__ import annotations

import asyncio
import graphlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types

from gateway.bridge.graph import Edge, Graph, Node, Pipeline
from gateway.bridge.limits import BridgeLimits, OverLimit, Size, measure, object_size
from gateway.tracing import span

log = logging.getLogger("toolgate.bridge.runner")

MAX_NODES_PER_RUN = 50

ToolCaller = Callable[[str, str, dict[str, Any]], Awaitable[types.CallToolResult]]
"""`(connection_id, tool, arguments) -> result`; raises on a failure to call: an `OverLimit` when a
bound of the Bridge stopped it (a result cut at `resultBytes`), whose words the caller may read, or
a `ToolCallFailed` carrying the reason the run reports (C5)."""

MAX_REASON_CHARS = 500
"""The longest reason a run reports for one node (C5); longer ones are cut with `…`."""


def bounded_reason(text: str) -> str:
    """A reason as a run reports it: stripped, at most `MAX_REASON_CHARS` characters."""
    text = text.strip() or "no reason given"
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class ToolCallFailed(Exception):
    """A tool call that gave no result; `reason` is what the run reports ("server unreachable",
    "timed out after 30s", the connection's JSON-RPC error text, "connection deleted")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NodeStatus = Literal["ok", "failed", "skipped"]


@dataclass
class NodeRun:
    """What one node of a run did (C5): its status, why it failed or was not run, how long its tool
    call took, and the values it took and gave (raw here; `public` bounds and scrubs them)."""

    id: str
    kind: str
    tool: str | None
    connection_id: str | None
    status: NodeStatus = "skipped"
    reason: str | None = None
    duration_ms: float | None = None
    input: Any = None
    output: Any = None

    def summary(self) -> dict[str, Any]:
        """The audit form: no values."""
        duration = round(self.duration_ms, 3) if self.duration_ms is not None else None
        return {"id": self.id, "status": self.status, "reason": self.reason, "durationMs": duration}


@dataclass
class RunTrace:
    """Every node of a run plan, in plan order, with what it did (filled in by `run_pipeline`)."""

    nodes: dict[str, NodeRun] = field(default_factory=dict)
    duration_ms: float | None = None

    @classmethod
    def of(cls, graph: Graph, plan: "RunPlan") -> "RunTrace":
        """A trace with every node of `plan` not run yet."""
        by_id = graph.node_map()
        nodes = {}
        for node_id in plan.node_ids:
            node = by_id[node_id]
            nodes[node_id] = NodeRun(node.id, node.kind, node.tool, node.connectionId)
        return cls(nodes)

    def done(self, node: Node, value: Any, given: Any = None) -> None:
        """The node gave `value` (having taken `given`)."""
        entry = self.nodes.get(node.id)
        if entry is not None:
            entry.status, entry.input, entry.output = "ok", given, value

    def failed(self, node_id: str, reason: str | None) -> None:
        """The node failed, for `reason` (bounded)."""
        entry = self.nodes.get(node_id)
        if entry is not None:
            entry.status, entry.reason = "failed", bounded_reason(reason or "failed")

    def stopped(self, reason: str, node_ids: list[str] | None = None) -> None:
        """Nodes not run (all, or `node_ids`) get `reason` unless they have one."""
        for node_id, entry in self.nodes.items():
            if entry.status == "skipped" and entry.reason is None and (node_ids is None or node_id in node_ids):
                entry.reason = reason


class PipelineRefused(Exception):
    """The pipeline cannot run at all (too many nodes, a transform node); nothing was called."""


class PipelineFailed(Exception):
    """The run stopped. At a node (`node_failed`): `node <id> (<tool>) failed: <reason>` (F11, C5):
    the Bridge's own words (a value over a bound) or the call's (`ToolCallFailed`, a tool's error
    text), bounded; the handler scrubs it. Before a wave was dispatched (`node_id` None): its tool
    calls together were over `waveBytes`."""

    def __init__(self, message: str, node_id: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.reason = reason


def node_failed(node: Node, reason: str | None = None) -> PipelineFailed:
    """`node <id> (<tool>) failed[: reason]`."""
    text = f"node {node.id} ({node.tool or node.kind}) failed"
    reason = bounded_reason(reason) if reason else None
    return PipelineFailed(f"{text}: {reason}" if reason else text, node.id, reason)


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
    graph: Graph, plan: RunPlan, arguments: dict[str, Any], call: ToolCaller, limits: BridgeLimits | None = None,
    trace: RunTrace | None = None,
) -> dict[str, Any]:
    """Run the plan; return the object of the output node's ports. Raises `PipelineFailed`, also
    when a value passes `limits` (bytes or nesting): the run stops at the node that made it.
    `trace` (from `RunTrace.of(graph, plan)`) is filled in with what each node did (C5)."""
    trace = trace if trace is not None else RunTrace.of(graph, plan)
    started = time.perf_counter()
    values = _Values(graph.node_map(), plan, limits or BridgeLimits(), trace)
    try:
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
    except PipelineFailed as exc:
        if exc.node_id is not None:
            trace.failed(exc.node_id, exc.reason)
            failed = trace.nodes.get(exc.node_id)
            trace.stopped(f"not run: node {exc.node_id} ({failed.tool or failed.kind if failed else '?'}) failed")
        else:
            trace.stopped(str(exc))
        raise
    finally:
        trace.duration_ms = (time.perf_counter() - started) * 1000
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
    trace = values.trace

    async def one(node: Node) -> None:
        nonlocal held
        entry = trace.nodes.get(node.id)
        if entry is not None:
            entry.input = prepared[node.id][0]
        started = time.perf_counter()
        try:
            attributes = {"toolgate.bridge.node": node.id, "toolgate.bridge.connection": node.connectionId or "", "gen_ai.tool.name": node.tool or ""}
            with span(f"pipeline node {node.id}", attributes):  # O3
                result = await call(node.connectionId or "", node.tool or "", prepared[node.id][0])
        except OverLimit as exc:  # the Bridge's own bound (a result cut at resultBytes): its words are shown
            raise node_failed(node, str(exc)) from None
        except ToolCallFailed as exc:
            log.info("pipeline node %s (%s) failed: %s", node.id, node.tool, exc.reason)
            raise node_failed(node, exc.reason) from None
        except Exception as exc:
            log.info("pipeline node %s (%s) failed: %s", node.id, node.tool, exc)
            raise node_failed(node, "the call failed") from None
        finally:
            if entry is not None:
                entry.duration_ms = (time.perf_counter() - started) * 1000
        if result.is_error:
            log.info("pipeline node %s (%s) returned an error result", node.id, node.tool)
            raise node_failed(node, error_text(result))
        held += values.put_measured(node, result_value(result)).bytes
        if held > limit:
            together = f"the results of the {len(wave)} tool nodes that run together"
            raise node_failed(node, f"{together} are over the limit of {limit} bytes")

    try:
        async with asyncio.TaskGroup() as group:
            for node in wave:
                group.create_task(one(node))
    except* PipelineFailed as failed:
        first = failed.exceptions[0]
        assert isinstance(first, PipelineFailed)
        stopped = [n.id for n in wave if n.id != first.node_id and trace.nodes.get(n.id) is not None
                   and trace.nodes[n.id].status == "skipped"]
        if first.node_id is not None:
            trace.failed(first.node_id, first.reason)
            trace.stopped(f"cancelled: node {first.node_id} failed", stopped)
        raise first from None


class _Values:
    """The values the nodes of one run produced, with their sizes. Merge and output nodes hold
    references to their inputs (nothing is copied) and are sized from their inputs' sizes."""

    def __init__(self, nodes: dict[str, Node], plan: RunPlan, limits: BridgeLimits, trace: RunTrace) -> None:
        self.nodes = nodes
        self._plan = plan
        self.limits = limits
        self.trace = trace
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
        if node.kind == "tool":
            self.trace.done(node, value, self.trace.nodes[node.id].input if node.id in self.trace.nodes else None)
        else:
            self.trace.done(node, value)
        return size

    def put_object(self, node: Node) -> None:
        """A merge or output node: the object of its inputs."""
        inputs, sizes = self._inputs(node)
        try:
            self._sizes[node.id] = object_size(sizes, self.limits)
        except OverLimit as exc:
            raise node_failed(node, str(exc)) from None
        self.values[node.id] = inputs
        self.trace.done(node, inputs, inputs)

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


def error_text(result: types.CallToolResult) -> str:
    """The text of an error result (the tool's own words: a validation message naming the argument,
    the server's error), or a sentence saying it gave none."""
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent)).strip()
    return text or "the tool returned an error result without text"


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
