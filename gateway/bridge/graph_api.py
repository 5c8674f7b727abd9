"""The graph routes of the Bridge's REST API (F8, F12, S2, C6, C7), scoped to the caller like the rest:

    GET    /bridges/{id}/graph          the saved graph (an empty one before the first save); ETag: its version
    PUT    /bridges/{id}/graph          validate (F8, C7: validation.py, graph_checks.py) and save (F12); with
                                        If-Match: only over that version (S2); the answer carries the save's
                                        `warnings` (a connection that could not be listed: saved unchecked)
    GET    /bridges/{id}/graph/versions the kept graph versions (the last 50 saves), newest first (C6)
    GET    /bridges/{id}/graph/versions/{v}          one version's graph
    POST   /bridges/{id}/graph/versions/{v}/restore  save that graph again as a new version (If-Match as PUT)

Another account's bridge answers 404, like one that does not exist; `?owner=` names one owner's
bridge of an id (api_support.addressed).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.api_support import (
    Authenticate, Conflict, addressed, caller_of, change_record, json_body, rendered, visible_bridge,
)
from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_args import Scrub
from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.graph import Graph, empty_graph
from gateway.bridge.graph_checks import check_tools
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.records import AuditRecord, BridgeRecord
from gateway.bridge.sessions import caller_key
from gateway.bridge.store import BridgeStore, GraphConflict
from gateway.bridge.upstream import Upstreams
from gateway.bridge.validation import GraphInvalid, GraphProblem, parse_graph
from gateway.errors import BadRequest, NotFound


class GraphApi:
    """Route handlers of a bridge's graph; `routes()` lists them for the app."""

    def __init__(
        self, store: BridgeStore, upstreams: Upstreams, federation: Federation, authenticate: Authenticate, *,
        scrub: Scrub, gate: CallerGate, limits: BridgeLimits | None = None, audit: AuditWriter | None = None,
    ) -> None:
        """`federation`: how a save finds the bridge's connections and checks its tool nodes against
        their listings (C7); `gate`: the callers' outbound slots, shared with the handlers (gate.py)."""
        self._store = store
        self._upstreams = upstreams
        self._federation = federation
        self._auth = authenticate
        self._scrub = scrub
        self._gate = gate
        self._limits = limits or BridgeLimits()
        self._audit = audit

    def routes(self) -> list[BaseRoute]:
        """Starlette routes of the graph."""
        return [
            Route("/bridges/{bridge_id}/graph", rendered(self.get_graph, self._scrub), methods=["GET"]),
            Route("/bridges/{bridge_id}/graph", rendered(self.put_graph, self._scrub), methods=["PUT"]),
            Route("/bridges/{bridge_id}/graph/versions", rendered(self.list_versions, self._scrub), methods=["GET"]),
            Route("/bridges/{bridge_id}/graph/versions/{version:int}", rendered(self.get_version, self._scrub),
                  methods=["GET"]),
            Route("/bridges/{bridge_id}/graph/versions/{version:int}/restore", rendered(self.restore_version, self._scrub),
                  methods=["POST"]),
        ]

    async def _bridge(self, request: Request) -> tuple[CallerScope, BridgeRecord]:
        caller = await caller_of(request, self._auth)
        bridge = await visible_bridge(self._store, addressed(request, caller.owners), request.path_params["bridge_id"])
        return caller, bridge

    async def get_graph(self, request: Request) -> Response:
        """GET /bridges/{id}/graph: the graph as saved."""
        _, bridge = await self._bridge(request)
        saved = await self._store.saved_graph(bridge.key)
        data = saved.graph if saved is not None else empty_graph().dump()
        return JSONResponse(data, headers={"etag": _etag(saved.version if saved is not None else 0)})

    async def put_graph(self, request: Request) -> Response:
        """PUT /bridges/{id}/graph: validate (F8) and save (F12); the save is audited with its editor.
        `If-Match: "<version>"` (the ETag of the graph the editor started from) saves only over that
        version: an edit saved meanwhile, through any replica, makes it 409. Without it, the save
        replaces whatever is there, as before."""
        started = time.perf_counter()
        caller, bridge = await self._bridge(request)
        expected = _if_match(request.headers.get("if-match"))
        data = await json_body(request)
        if isinstance(data, dict):
            data.pop("warnings", None)  # an answer of this route sent back as it is
        graph, warnings = await self._checked(caller, bridge, data)
        return await self._save(caller, bridge, graph, warnings, expected, started)

    async def list_versions(self, request: Request) -> Response:
        """GET /bridges/{id}/graph/versions: every kept save, newest first, with its size."""
        _, bridge = await self._bridge(request)
        return JSONResponse({"data": [v.public() for v in await self._store.graph_versions(bridge.key)]})

    async def _version(self, bridge: BridgeRecord, version: int) -> dict[str, Any]:
        kept = await self._store.graph_version(bridge.key, version)
        if kept is None:
            raise NotFound(f"bridge {bridge.id} keeps no graph version {version}")
        return kept.graph

    async def get_version(self, request: Request) -> Response:
        """GET /bridges/{id}/graph/versions/{v}: that version's graph, as it was saved."""
        _, bridge = await self._bridge(request)
        return JSONResponse(await self._version(bridge, request.path_params["version"]))

    async def restore_version(self, request: Request) -> Response:
        """POST /bridges/{id}/graph/versions/{v}/restore: save version v's graph again, as a new
        version, after the rules a PUT checks (the connections may have changed since); If-Match
        as on PUT. Answers like PUT: the graph, its warnings, its ETag."""
        started = time.perf_counter()
        caller, bridge = await self._bridge(request)
        expected = _if_match(request.headers.get("if-match"))
        version = request.path_params["version"]
        graph, warnings = await self._checked(caller, bridge, await self._version(bridge, version))
        return await self._save(caller, bridge, graph, warnings, expected, started, {"restoredFrom": version})

    async def _checked(self, caller: CallerScope, bridge: BridgeRecord, data: Any) -> tuple[Graph, list[GraphProblem]]:
        """The graph of `data` after every rule (F8, C7), with the warnings of its save (a connection
        that could not be listed); raises `GraphRejected` listing every problem."""
        try:
            graph = parse_graph(data, self._limits)
        except GraphInvalid as exc:
            raise GraphRejected(exc) from None
        scope = CallerScope(caller.identity, caller.owners, bridge)
        usable = {c.id: c for c in await self._federation.connections(scope, fresh=True)}
        with self._gate.caller(caller_key(caller.identity)):  # the listings count against the caller's slots
            checked = await check_tools(graph, bridge, usable, self._upstreams.list_tools)
        if checked.problems:
            raise GraphRejected(GraphInvalid(checked.problems))
        return graph, checked.warnings

    async def _save(
        self, caller: CallerScope, bridge: BridgeRecord, graph: Graph, warnings: list[GraphProblem], expected: int | None,
        started: float, audited: dict[str, Any] | None = None,
    ) -> Response:
        """Save a checked graph (over version `expected` when given), audit it, answer with it, its
        warnings and its ETag."""
        try:
            version = await self._store.save_graph(bridge.key, graph.dump(), time.time(), caller.actor_id, expected)
        except GraphConflict as exc:
            raise Conflict(
                f"bridge {bridge.id}: the graph was saved by someone else meanwhile (version {exc.current}; this edit "
                f"started from version {exc.expected}); GET it again, redo the edit, and save with If-Match: "
                f"{_etag(exc.current)}"
            ) from None
        shape = {"owner": bridge.owner, "nodes": len(graph.nodes), "edges": len(graph.edges),
                 "pipelines": [p.name for p in graph.pipelines], **(audited or {})}
        self._record(change_record(caller, "bridge.graph_save", bridge.id, shape, started))
        entries = [entry for w in warnings for entry in w.entries()]
        return JSONResponse({**graph.dump(), "warnings": entries}, headers={"etag": _etag(version)})

    def _record(self, record: AuditRecord) -> None:
        """Audit a save (fire-and-forget, like every audit record)."""
        if self._audit is not None:
            self._audit.submit(record)


class GraphRejected(BadRequest):
    """A graph that breaks the rules: the envelope also lists every problem (rule, ids, message)."""

    code = "invalid_graph"

    def __init__(self, exc: GraphInvalid) -> None:
        super().__init__(str(exc))
        self.problems = [{"rule": p.rule, "ids": list(p.ids), "message": p.message} for p in exc.problems]
        self.errors = exc.entries()

    def body(self) -> dict[str, Any]:
        body = super().body()
        body["error"]["problems"] = self.problems
        body["error"]["errors"] = self.errors  # per node and edge (C7)
        return body


def _etag(version: int) -> str:
    """A graph version as an ETag (0: none saved yet)."""
    return f'"{version}"'


def _if_match(value: str | None) -> int | None:
    """The version an If-Match header names (None: no header, or `*` — any graph)."""
    if value is None or value.strip() == "*":
        return None
    tag = value.strip().removeprefix("W/")
    if len(tag) < 3 or tag[0] != '"' or tag[-1] != '"' or not (tag[1:-1].isascii() and tag[1:-1].isdigit()):
        raise BadRequest(f'If-Match: expected the graph\'s ETag, e.g. "3" (from GET …/graph), not {value[:40]!r}')
    return int(tag[1:-1])


