"""What `tools/list` and `tools/call` do on the Bridge, transport aside (F1, F4, F9–F12).

`tools/list` on `/mcp` is the caller's federation; on `/mcp/<bridge>` the bridge's federated tools
plus its pipelines. Every `tools/call` that reaches `call_tool` leaves one audit record, whatever
its outcome; listing leaves none.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from prometheus_client import CollectorRegistry, Counter

from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_args import is_mutating, reduce_args
from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.graph import Graph, Pipeline, is_tool_name, pipeline_input_schema
from gateway.bridge.inputs import inferred_inputs
from gateway.bridge.limits import BridgeLimits, OverLimit
from gateway.bridge.records import AuditAction, AuditRecord
from gateway.bridge.relay import Downstream
from gateway.bridge.run_report import audit_run
from gateway.bridge.runner import PipelineFailed, PipelineRefused, RunTrace, ToolCallFailed, plan_run, run_pipeline
from gateway.bridge.sessions import caller_key
from gateway.bridge.store import BridgeStore
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.metrics import metric
from gateway.secrets import SecretSet
from gateway.tracing import record_tool_result, span

log = logging.getLogger("toolgate.bridge.handlers")


def error_result(message: str) -> types.CallToolResult:
    """A tool result the agent reads as a failure."""
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


class BridgeHandlers:
    """Lists and calls tools and pipelines for one caller scope at a time."""

    def __init__(
        self,
        store: BridgeStore,
        federation: Federation,
        upstreams: Upstreams,
        audit: AuditWriter,
        secrets: SecretSet,
        registry: CollectorRegistry,
        limits: BridgeLimits | None = None,
        gate: CallerGate | None = None,
    ) -> None:
        """`gate` bounds each caller's outbound operations (shared with the offerings, F13)."""
        self._calls = metric(registry, Counter, "toolgate_bridge_calls", "Bridge tools/call by action and status", ["action", "status"])
        self._store = store
        self._federation = federation
        self._upstreams = upstreams
        self._audit = audit
        self._secrets = secrets
        self._limits = limits or BridgeLimits()
        self._gate = gate if gate is not None else CallerGate(self._limits.outboundPerCaller)

    async def graph(self, scope: CallerScope) -> Graph | None:
        """The saved graph of the scope's bridge (None on `/mcp` or before a graph is saved)."""
        return (await self._saved(scope))[0]

    async def _saved(self, scope: CallerScope) -> tuple[Graph | None, str | None]:
        """The saved graph of the scope's bridge and who saved it, in one read of the store."""
        saved = await self._store.saved_graph(scope.bridge.key) if scope.bridge is not None else None
        return (Graph.model_validate(saved.graph), saved.saved_by) if saved is not None else (None, None)

    async def list_tools(self, scope: CallerScope) -> list[types.Tool]:
        """Federated tools, then the bridge's pipelines (listed under their `name`)."""
        with self._gate.caller(caller_key(scope.identity)):  # bounds this caller's outbound sessions
            return await self._list_tools(scope)

    async def call_tool(
        self, scope: CallerScope, name: str, arguments: dict[str, Any] | None, downstream: Downstream | None = None
    ) -> types.CallToolResult:
        """Call a pipeline or a federated tool; always returns a result and always audits. What the
        connection of a federated tool sends meanwhile is relayed to `downstream` (F14)."""
        return (await self.call_traced(scope, name, arguments, downstream))[0]

    async def call_traced(
        self, scope: CallerScope, name: str, arguments: dict[str, Any] | None, downstream: Downstream | None = None
    ) -> tuple[types.CallToolResult, RunTrace | None]:
        """`call_tool`, and for a pipeline what each of its nodes did (C5; raw values: the caller
        bounds and scrubs them with run_report.public_nodes); None for a federated tool."""
        with self._gate.caller(caller_key(scope.identity)), span("bridge tools/call", {"gen_ai.tool.name": name}) as current:
            traces: list[RunTrace] = []
            result = await self._call_tool(scope, name, arguments, downstream, traces)
            record_tool_result(current, result.is_error)
            return result, (traces[0] if traces else None)

    async def _list_tools(self, scope: CallerScope) -> list[types.Tool]:
        tools = await self._federation.tools(scope)  # scrubbed of secrets where listed (Upstreams.catalog)
        graph = await self.graph(scope)
        if graph is None:
            return tools
        names = {p.name for p in graph.pipelines}
        tools = [t for t in tools if t.name not in names]  # a pipeline wins over a tool of its name
        # the listings the federation just made (no second try of a connection that did not answer)
        tools_of = await self._tools_of(scope, listing=False)
        for pipeline in graph.pipelines:
            description = pipeline.description or f"Pipeline {pipeline.name} ({scope.name})"
            inferred = await inferred_inputs(graph, pipeline, tools_of)
            tools.append(types.Tool(
                name=pipeline.name, description=description, input_schema=pipeline_input_schema(graph, pipeline, inferred)
            ))
        return tools

    async def _tools_of(
        self, scope: CallerScope, *, listing: bool = True
    ) -> Callable[[str], Awaitable[list[types.Tool] | None]]:
        """The tools of the scope's connections by id (None for one that is not there or cannot be
        listed); `listing` False: only what was listed already (no I/O)."""
        connections = {c.id: c for c in await self._federation.connections(scope)}

        async def tools_of(connection_id: str) -> list[types.Tool] | None:
            conn = connections.get(connection_id)
            if conn is None:
                return None
            if not listing:
                return self._upstreams.known_tools(conn)
            try:
                return await self._upstreams.list_tools(conn)
            except UpstreamCallFailed:
                return None

        return tools_of

    async def inferred_inputs(self, scope: CallerScope, graph: Graph, pipeline: Pipeline) -> dict[str, dict[str, Any]]:
        """The types of the pipeline's inputs as its wiring implies them (inputs.py), within the
        caller's outbound slots."""
        with self._gate.caller(caller_key(scope.identity)):
            return await inferred_inputs(graph, pipeline, await self._tools_of(scope))

    async def _call_tool(
        self, scope: CallerScope, name: str, arguments: dict[str, Any] | None, downstream: Downstream | None,
        traces: list[RunTrace],
    ) -> types.CallToolResult:
        started = time.perf_counter()
        action: AuditAction = "mcp.tool_call"
        mutating = is_mutating(name.partition("__")[2] or name)
        result: types.CallToolResult | None = None  # None: the call raised (a failure in the audit)
        # which bridge, by its owner too: ids are per owner, `scope` names the id as the caller typed it
        extra: dict[str, Any] = {"$bridge": {"owner": scope.bridge.owner}} if scope.bridge is not None else {}
        try:
            graph, saved_by = await self._saved(scope)
            pipeline = graph.pipeline_named(name) if graph is not None else None
            if graph is not None and pipeline is not None:
                action = "mcp.pipeline_call"
                mutating = _pipeline_mutates(graph, pipeline)
                if scope.bridge is not None:  # whose graph ran with the caller's connections
                    extra["$graph"] = {"savedBy": saved_by}
                result = await self._call_pipeline(scope, graph, pipeline, arguments or {}, traces)
                # per node: status, reason, duration (no values); the run's duration and failure (C5)
                extra["$run"] = audit_run(traces[0] if traces else None, self._secrets.scrub, result)
            else:
                result = await self._call_federated(scope, name, arguments or {}, downstream)
            # what a connection sends back may hold a secret (a server echoing its credential): B4
            result = self._secrets.scrub_model(result)
            return result
        finally:
            status = "failure" if result is None or result.is_error else "success"
            self._calls.labels(action=action, status=status).inc()
            self._audit.submit(
                AuditRecord(
                    ts=time.time(),
                    action=action,
                    actor_id=scope.actor_id,
                    actor_email=scope.identity.email,
                    resource=audit_resource(name),
                    scope=scope.name,
                    mutating=mutating,
                    args={**reduce_args(arguments, self._secrets.scrub), **extra},
                    status=status,
                    duration_ms=(time.perf_counter() - started) * 1000,
                )
            )

    async def _call_federated(
        self, scope: CallerScope, name: str, arguments: dict[str, Any], downstream: Downstream | None
    ) -> types.CallToolResult:
        try:
            resolved = await self._federation.resolve(scope, name)
        except UpstreamCallFailed as exc:
            return error_result(f"tool {name} failed: {exc.reason}")
        if resolved is None:
            return error_result(f"unknown tool: {name}")
        try:
            result = await self._upstreams.call_tool_as(
                scope.session_key, resolved.connection, resolved.upstream_name, arguments, downstream
            )
        except UpstreamCallFailed as exc:
            return error_result(f"tool {name} failed: {exc.reason}")
        # The upstream's `_meta` (its server info, its own hints) is not the Bridge's to pass on.
        return result.model_copy(update={"meta": None})

    async def _call_pipeline(
        self, scope: CallerScope, graph: Graph, pipeline: Pipeline, arguments: dict[str, Any], traces: list[RunTrace]
    ) -> types.CallToolResult:
        try:
            plan = plan_run(graph, pipeline)
        except PipelineRefused as exc:
            return error_result(str(exc))
        trace = RunTrace.of(graph, plan)
        traces.append(trace)
        # the bridge's connections by the ids its graph uses, resolved in its owner's view (tenancy.py)
        connections = {c.id: c for c in await self._federation.connections(scope)}

        async def call(connection_id: str, tool: str, args: dict[str, Any]) -> types.CallToolResult:
            conn = connections.get(connection_id)
            if conn is None:
                raise ToolCallFailed(await self._missing(scope, connection_id))
            try:
                return await self._upstreams.call_tool(conn, tool, args)
            except UpstreamCallFailed as exc:
                if isinstance(exc, OverLimit):
                    raise
                raise ToolCallFailed(failure_reason(exc)) from None

        try:
            output = await run_pipeline(graph, plan, arguments, call, self._limits, trace)
        except PipelineFailed as exc:
            return error_result(str(exc))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(output, default=str))], structured_content=output
        )


    async def _missing(self, scope: CallerScope, connection_id: str) -> str:
        """Why a tool node's connection is not there: deleted (none of that id among the caller's
        owners), or not usable by the bridge (another owner's, or not admitted by the allow-list)."""
        if not await self._store.find_connections(scope.owners, connection_id):
            return "connection deleted"
        return f"connection {connection_id} is not usable by this bridge"


def failure_reason(exc: UpstreamCallFailed) -> str:
    """What a run reports of a call that gave no result (C5): the connection's own JSON-RPC error
    text (e.g. invalid arguments), "timed out after Ns", or "server unreachable" with the cause —
    for a connection made through the REST API only "server unreachable" (SSRF: no port or
    service oracle, `UpstreamCallFailed.guarded`)."""
    if exc.code is not None and exc.upstream_message:
        return exc.upstream_message
    if exc.guarded:  # not even "timed out": that would tell a filtered port from a closed one
        return "server unreachable"
    if exc.timeout is not None:
        return f"timed out after {exc.timeout:g}s"
    return f"server unreachable ({exc})"


def audit_resource(name: str) -> str:
    """The audit `resource` of a call: the tool or pipeline name. Every name the Bridge lists matches
    the tool-name pattern; a name that does not is caller-made text and is kept as its length only."""
    return name if is_tool_name(name) else f"(not a tool name: {len(name)} characters)"


def _pipeline_mutates(graph: Graph, pipeline: Pipeline) -> bool:
    """A pipeline writes when any tool node its output depends on writes."""
    try:
        node_ids = set(plan_run(graph, pipeline).node_ids)
    except PipelineRefused:
        node_ids = {n.id for n in graph.nodes}
    return any(is_mutating(n.tool or "") for n in graph.nodes if n.kind == "tool" and n.id in node_ids)
