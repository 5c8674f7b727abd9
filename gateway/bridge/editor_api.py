"""What the graph editor (C3) needs beyond the CRUD routes of `api`:

    GET  /connections/{id}/tools   the connection's tools with their input schemas (a tool node's ports)
    POST /connections/{id}/test    list its tools now: {ok, latencyMs, tools, error} (C8)
    POST /connections/{id}/call    {name, arguments}: call one of its tools, as a run answers
                                   ({isError, text, structuredContent}), audited `connection.tool_call`
    POST /bridges/{id}/run         {name, arguments}: run one of the bridge's saved pipelines, with
                                   what each node did (C5)
    GET  /bridges/{id}/runs        ?pipeline=<name>&limit=<n ≤ 100>: the bridge's runs, newest first,
                                   read from the audit log (every caller's runs of this bridge)
    GET  /bridges/{id}/graph/inferred-inputs?pipeline=<name>
                                   {"inputs": {port: JSON Schema}}: the types a saved pipeline's wiring
                                   implies for its arguments (inputs.py), to prefill its `inputs`

A listing waits for one of the caller's outbound slots (gate.py, `outboundPerCaller`), as an MCP
operation does. A run goes through the same handler as a `tools/call` on `/mcp/<bridgeId>`: the same
scope, limits (the outbound slots too), secret scrubbing and audit record (`mcp.pipeline_call`, scope `bridge:<id>`). Another account's
bridge or connection answers 404, like one that does not exist; `?owner=` names one owner's
item of an id, as on the CRUD routes (api_support.addressed).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import mcp_types as types
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.api_support import Authenticate, addressed, caller_of, json_body, object_body, rendered, visible_bridge
from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_args import Scrub, is_mutating, reduce_args
from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.handlers import BridgeHandlers, audit_resource, error_result
from gateway.bridge.records import AuditQuery, AuditRecord, ConnectionRecord
from gateway.bridge.run_report import bounded_value, cut_text, public_nodes, run_entry
from gateway.bridge.sessions import caller_key
from gateway.bridge.store import BridgeStore
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.errors import BadRequest, NotFound, UpstreamError


class EditorApi:
    """The editor's routes over the federation (tool listing) and the handlers (pipeline runs)."""

    def __init__(
        self, store: BridgeStore, federation: Federation, upstreams: Upstreams, handlers: BridgeHandlers,
        authenticate: Authenticate, *, scrub: Scrub, gate: CallerGate, audit: AuditWriter | None = None,
    ) -> None:
        """`gate`: the callers' outbound slots the handlers use too (one caller's listings here and
        its MCP operations share them). `audit`: where a tried connection call is recorded."""
        self._audit = audit
        self._gate = gate
        self._store = store
        self._federation = federation
        self._upstreams = upstreams
        self._handlers = handlers
        self._auth = authenticate
        self._scrub = scrub

    def routes(self) -> list[BaseRoute]:
        """The editor's routes."""
        return [
            Route("/connections/{connection_id}/tools", rendered(self.list_tools, self._scrub), methods=["GET"]),
            Route("/connections/{connection_id}/test", rendered(self.test_connection, self._scrub), methods=["POST"]),
            Route("/connections/{connection_id}/call", rendered(self.call_connection, self._scrub), methods=["POST"]),
            Route("/bridges/{bridge_id}/run", rendered(self.run, self._scrub), methods=["POST"]),
            Route("/bridges/{bridge_id}/runs", rendered(self.runs, self._scrub), methods=["GET"]),
            Route("/bridges/{bridge_id}/graph/inferred-inputs", rendered(self.inferred_inputs, self._scrub), methods=["GET"]),
        ]

    async def _connection(self, request: Request) -> tuple[CallerScope, ConnectionRecord]:
        """The caller's connection of the path (404 for another's, like a missing one)."""
        caller = await caller_of(request, self._auth)
        connection_id = request.path_params["connection_id"]
        scope = dataclasses.replace(caller, owners=addressed(request, caller.owners))
        conn = await self._federation.connection(scope, connection_id)
        if conn is None:
            raise NotFound(f"connection {connection_id} not found")
        return caller, conn

    async def test_connection(self, request: Request) -> Response:
        """POST /connections/{id}/test: list the connection's tools now (not from the cache), within
        the caller's outbound slots; 200 either way, `ok` saying whether its server answered."""
        caller, conn = await self._connection(request)
        started = time.perf_counter()
        tools: list[types.Tool] = []
        error = None
        try:
            with self._gate.caller(caller_key(caller.identity)):
                tools = await self._upstreams.list_tools(conn, fresh=True)
        except UpstreamCallFailed as exc:
            error = self._scrub(exc.reason)
        latency = round((time.perf_counter() - started) * 1000, 3)
        return JSONResponse({"ok": error is None, "latencyMs": latency, "error": error, "tools": [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools
        ]})

    async def call_connection(self, request: Request) -> Response:
        """POST /connections/{id}/call: call one tool of the connection as it lists it (a fresh session,
        like a pipeline node), within the caller's outbound slots; the answer scrubbed and bounded
        (`CALL_CHARS`), the call audited (`connection.tool_call`, scope `connection:<id>`)."""
        caller, conn = await self._connection(request)
        data = object_body(await json_body(request), {"name", "arguments"})
        name, arguments = data.get("name"), data.get("arguments", {})
        if not isinstance(name, str) or not 0 < len(name) <= 256 or not isinstance(arguments, dict):
            raise BadRequest("send {\"name\": <tool name as the connection lists it>, \"arguments\": {...}}")
        started = time.perf_counter()
        try:
            with self._gate.caller(caller_key(caller.identity)):
                result = await self._upstreams.call_tool(conn, name, arguments)
        except UpstreamCallFailed as exc:
            result = error_result(f"tool {name} failed: {exc.reason}")
        if self._audit is not None:
            self._audit.submit(AuditRecord(
                ts=time.time(), action="connection.tool_call", actor_id=caller.actor_id, actor_email=caller.identity.email,
                resource=audit_resource(name), scope=f"connection:{conn.id}", mutating=is_mutating(name),
                args={**reduce_args(arguments, self._scrub), "$connection": {"owner": conn.owner}},
                status="failure" if result.is_error else "success", duration_ms=(time.perf_counter() - started) * 1000,
            ))
        answer = result_json(result)
        return JSONResponse({
            "isError": answer["isError"], "text": cut_text(self._scrub(answer["text"]), CALL_CHARS),
            "structuredContent": bounded_value(answer["structuredContent"], self._scrub, CALL_CHARS),
        })

    async def list_tools(self, request: Request) -> Response:
        """GET /connections/{id}/tools: names, descriptions and input schemas, as the connection lists them."""
        caller, conn = await self._connection(request)
        try:
            with self._gate.caller(caller_key(caller.identity)):  # within the caller's outbound slots, like MCP
                tools = await self._upstreams.list_tools(conn)
        except UpstreamCallFailed as exc:
            raise UpstreamError(f"connection {conn.id}: {exc.reason}") from None
        return JSONResponse({"data": [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools
        ]})

    async def run(self, request: Request) -> Response:
        """POST /bridges/{id}/run: the pipeline's result, or the failure it ended with (`node <id>
        (<tool>) failed: <reason>`) — either way `200` with `isError`, as an MCP client would read
        it — and `nodes`: what each node of the run plan did, its values bounded and scrubbed (C5,
        run_report.py)."""
        caller = await caller_of(request, self._auth)
        bridge_id = request.path_params["bridge_id"]
        bridge = await visible_bridge(self._store, addressed(request, caller.owners), bridge_id)
        data = object_body(await json_body(request), {"name", "arguments"})
        name, arguments = data.get("name"), data.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise BadRequest("send {\"name\": <pipeline name>, \"arguments\": {...}}")
        scope = CallerScope(caller.identity, caller.owners, bridge)
        graph = await self._handlers.graph(scope)
        if graph is None or graph.pipeline_named(name) is None:
            raise NotFound(f"bridge {bridge_id} has no saved pipeline named {name[:64]!r}")
        result, trace = await self._handlers.call_traced(scope, name, arguments)
        return JSONResponse({**result_json(result), "nodes": public_nodes(trace, self._scrub)})

    async def inferred_inputs(self, request: Request) -> Response:
        """GET /bridges/{id}/graph/inferred-inputs?pipeline=<name>: per input port of the saved
        pipeline, the schema of the tool argument it is wired to (`{}` when none)."""
        caller = await caller_of(request, self._auth)
        bridge_id = request.path_params["bridge_id"]
        bridge = await visible_bridge(self._store, addressed(request, caller.owners), bridge_id)
        name = request.query_params.get("pipeline", "")
        scope = CallerScope(caller.identity, caller.owners, bridge)
        graph = await self._handlers.graph(scope)
        pipeline = graph.pipeline_named(name) if graph is not None else None
        if graph is None or pipeline is None:
            raise NotFound(f"bridge {bridge_id} has no saved pipeline named {name[:64]!r}")
        return JSONResponse({"inputs": await self._handlers.inferred_inputs(scope, graph, pipeline)})

    async def runs(self, request: Request) -> Response:
        """GET /bridges/{id}/runs: the bridge's pipeline runs, newest first (C5), from their audit
        records (`mcp.pipeline_call` of scope `bridge:<id>` whose `$bridge` owner is this bridge's:
        ids are per owner). Every member who sees the bridge sees every caller's runs of it."""
        caller = await caller_of(request, self._auth)
        bridge = await visible_bridge(self._store, addressed(request, caller.owners), request.path_params["bridge_id"])
        pipeline = request.query_params.get("pipeline")
        limit = _limit(request.query_params.get("limit"))
        found: list[dict[str, Any]] = []
        before: int | None = None
        for _ in range(RUN_PAGES):  # other owners' bridges of the same id share the scope: filtered here
            query = AuditQuery(actor_id=None, action="mcp.pipeline_call", scope=f"bridge:{bridge.id}",
                               resource=pipeline, before=before, limit=RUN_PAGE)
            page = await self._store.query_audit(query)
            found += [run_entry(r) for r in page if _bridge_owner(r) == bridge.owner]
            if len(found) >= limit or len(page) < RUN_PAGE:
                break
            before = page[-1].seq
        return JSONResponse({"data": found[:limit]})


CALL_CHARS = 64 * 1024
"""The most text (and JSON text of structured content) a tried call is shown with; more is cut."""

RUN_PAGE = 200
"""Audit records read per query of a run history."""

RUN_PAGES = 10
"""At most this many pages are read for one history (records of other owners' same-named bridges
in between are skipped, so a history can come back shorter than `limit`, never unbounded work)."""


def _limit(value: str | None) -> int:
    """`?limit=`: 1 to 100, default 20."""
    if value is None:
        return 20
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 100:
        raise BadRequest("limit: a whole number from 1 to 100")
    return int(value)


def _bridge_owner(record: AuditRecord) -> str | None:
    marker = record.args.get("$bridge")
    return marker.get("owner") if isinstance(marker, dict) else None


def result_json(result: types.CallToolResult) -> dict[str, Any]:
    """A tool result for the console: its text parts joined, its structured content, `isError`."""
    text = "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))
    return {"isError": bool(result.is_error), "text": text, "structuredContent": result.structured_content}
