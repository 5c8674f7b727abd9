"""What the graph editor (C3) needs beyond the CRUD routes of `api`:

    GET  /connections/{id}/tools   the connection's tools with their input schemas (a tool node's ports)
    POST /bridges/{id}/run         {name, arguments}: run one of the bridge's saved pipelines

A listing waits for one of the caller's outbound slots (gate.py, `outboundPerCaller`), as an MCP
operation does. A run goes through the same handler as a `tools/call` on `/mcp/<bridgeId>`: the same
scope, limits (the outbound slots too), secret scrubbing and audit record (`mcp.pipeline_call`, scope `bridge:<id>`). Another account's
bridge or connection answers 404, like one that does not exist; `?owner=` names one owner's
item of an id, as on the CRUD routes (api_support.addressed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import mcp_types as types
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.api_support import Authenticate, addressed, caller_of, json_body, object_body, rendered, visible_bridge
from gateway.bridge.audit_args import Scrub
from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.sessions import caller_key
from gateway.bridge.store import BridgeStore
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.errors import BadRequest, NotFound, UpstreamError


class EditorApi:
    """The editor's routes over the federation (tool listing) and the handlers (pipeline runs)."""

    def __init__(
        self, store: BridgeStore, federation: Federation, upstreams: Upstreams, handlers: BridgeHandlers,
        authenticate: Authenticate, *, scrub: Scrub, gate: CallerGate,
    ) -> None:
        """`gate`: the callers' outbound slots the handlers use too (one caller's listings here and
        its MCP operations share them)."""
        self._gate = gate
        self._store = store
        self._federation = federation
        self._upstreams = upstreams
        self._handlers = handlers
        self._auth = authenticate
        self._scrub = scrub

    def routes(self) -> list[BaseRoute]:
        """The two routes."""
        return [
            Route("/connections/{connection_id}/tools", rendered(self.list_tools, self._scrub), methods=["GET"]),
            Route("/bridges/{bridge_id}/run", rendered(self.run, self._scrub), methods=["POST"]),
        ]

    async def list_tools(self, request: Request) -> Response:
        """GET /connections/{id}/tools: names, descriptions and input schemas, as the connection lists them."""
        caller = await caller_of(request, self._auth)
        connection_id = request.path_params["connection_id"]
        scope = dataclasses.replace(caller, owners=addressed(request, caller.owners))
        conn = await self._federation.connection(scope, connection_id)
        if conn is None:
            raise NotFound(f"connection {connection_id} not found")
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
        (<tool>) failed`) — either way `200` with `isError`, as an MCP client would read it."""
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
        result = await self._handlers.call_tool(scope, name, arguments)
        return JSONResponse(result_json(result))


def result_json(result: types.CallToolResult) -> dict[str, Any]:
    """A tool result for the console: its text parts joined, its structured content, `isError`."""
    text = "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))
    return {"isError": bool(result.is_error), "text": text, "structuredContent": result.structured_content}
