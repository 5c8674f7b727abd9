"""The Bridge's REST API, scoped to the caller (owner = its user id or `org:<org id>`).

    GET    /bridges                     the caller's bridges
    POST   /bridges                     {id, owner?, connections}
    GET    /bridges/{id}                one bridge, with its pipeline names
    PATCH  /bridges/{id}                {connections}: the connections it federates
    DELETE /bridges/{id}
    …/graph, …/graph/versions       a bridge's graph and its kept versions: see graph_api
    GET    /connections                 the caller's connections (no secret references), each with its
                                        `health`: the last listing/call/test outcome in this process (C8)
    POST   /connections                 {id, owner?, endpoint, prefix?, authHeaderName?, authSecret?}
                                        (endpoint within `apiEndpointAllowList`; the credential is
                                        written once, sealed, never returned: see sealing.py)
    PATCH  /connections/{id}            {endpoint?, prefix?, authHeaderName?, authSecret?} (the same checks;
                                        a new credential replaces the old, `authHeaderName: null` removes it,
                                        a new endpoint without a new credential drops it: `"credential": "dropped"`)
    DELETE /connections/{id}
    GET    /audit                       the caller's audit records, and others' changes to the caller's
                                        connections (see audit_api)

Another account's bridge or connection answers 404, exactly like one that does not exist. Ids
are per owner (tenancy.py): a path's id names the item the caller sees under it (their own before
their org's; `?owner=<owner>` names one owner's), and a create is refused (409) only for an id
among what the caller sees.
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlencode
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.api_support import (
    Authenticate, Conflict, addressed, caller_of, change_record, check_endpoint_url, json_body, object_body, owner_for,
    rendered, visible_bridge,
)
from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_args import Scrub
from gateway.bridge.config import BridgeDecl, ConnectionConfig
from gateway.bridge.federation import CallerScope
from gateway.bridge.graph import Graph
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.messages import located
from gateway.bridge.naming import prefix_problems
from gateway.bridge.records import AuditRecord, BridgeRecord, ConnectionRecord, Health
from gateway.bridge.sealing import Sealer
from gateway.bridge.store import BridgeStore
from gateway.bridge.tenancy import may_hold, named, visible_by_id
from gateway.bridge.upstream import Upstreams
from gateway.egress import EgressPolicy
from gateway.errors import BadRequest, Forbidden, NotFound


class BridgeApi:
    """Route handlers over the store; `routes()` lists them for the app."""

    def __init__(
        self,
        store: BridgeStore,
        upstreams: Upstreams,
        authenticate: Authenticate,
        endpoint_allowed: Callable[[str], bool] = lambda url: True,
        *,
        scrub: Scrub,
        limits: BridgeLimits | None = None,
        audit: AuditWriter | None = None,
        egress: EgressPolicy | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        """`sealer` seals credentials written through the API; None: the API takes none."""
        self._sealer = sealer
        self._scrub = scrub
        self._store = store
        self._upstreams = upstreams
        self._auth = authenticate
        self._endpoint_allowed = endpoint_allowed
        self._limits = limits or BridgeLimits()
        self._audit = audit
        self._egress = egress or EgressPolicy()

    def routes(self) -> list[BaseRoute]:
        """Starlette routes of the REST API."""
        return [
            Route("/bridges", rendered(self.list_bridges, self._scrub), methods=["GET"]),
            Route("/bridges", rendered(self.create_bridge, self._scrub), methods=["POST"]),
            Route("/bridges/{bridge_id}", rendered(self.get_bridge, self._scrub), methods=["GET"]),
            Route("/bridges/{bridge_id}", rendered(self.update_bridge, self._scrub), methods=["PATCH"]),
            Route("/bridges/{bridge_id}", rendered(self.delete_bridge, self._scrub), methods=["DELETE"]),
            Route("/connections", rendered(self.list_connections, self._scrub), methods=["GET"]),
            Route("/connections", rendered(self.create_connection, self._scrub), methods=["POST"]),
            Route("/connections/{connection_id}", rendered(self.update_connection, self._scrub), methods=["PATCH"]),
            Route("/connections/{connection_id}", rendered(self.delete_connection, self._scrub), methods=["DELETE"]),
        ]

    async def _bridge(self, request: Request) -> tuple[CallerScope, BridgeRecord]:
        caller = await caller_of(request, self._auth)
        bridge = await visible_bridge(self._store, addressed(request, caller.owners), request.path_params["bridge_id"])
        return caller, bridge

    async def list_bridges(self, request: Request) -> Response:
        """GET /bridges: the caller's bridges."""
        caller = await caller_of(request, self._auth)
        listed = await self._store.list_bridges(caller.owners)
        named_by_id = visible_by_id(listed, caller.owners)  # what each bare id names (tenancy.py)
        return JSONResponse({"data": [{**b.public(), "mcpPath": mcp_path(b, named_by_id.get(b.id))} for b in listed]})

    async def create_bridge(self, request: Request) -> Response:
        """POST /bridges: a new bridge over the caller's connections."""
        started = time.perf_counter()
        caller = await caller_of(request, self._auth)
        data = object_body(await json_body(request), {"id", "owner", "connections"})
        try:
            decl = BridgeDecl.model_validate({**data, "owner": owner_for(caller, data.get("owner"))})
        except ValidationError as exc:
            raise BadRequest(_first_error(exc)) from None
        if await self._store.find_bridges(caller.owners, decl.id):  # only what the caller sees (tenancy.py)
            raise Conflict(f"bridge id {decl.id} is taken")
        await self._check_members(caller, decl)
        record = BridgeRecord(decl.id, decl.owner, tuple(decl.connections), "api")
        await self._store.upsert_bridge(record)
        args = {"owner": record.owner, "connections": list(record.connections)}
        self._record(change_record(caller, "bridge.create", record.id, args, started))
        return JSONResponse(record.public(), status_code=201)

    async def _check_members(self, caller: CallerScope, decl: BridgeDecl) -> None:
        """The connections of a new or changed bridge: at least one (C7), the caller's, the owner's to
        hold, no name clash."""
        if not decl.connections:
            raise BadRequest("connections: a bridge needs at least one connection (its tools and pipelines come from them)")
        seen = await self._store.list_connections(caller.owners)
        mine = visible_by_id(seen, caller.owners)
        unknown = [c for c in decl.connections if c not in mine]
        if unknown:
            raise BadRequest(f"unknown connection(s): {', '.join(unknown)}")
        held = visible_by_id((c for c in seen if may_hold(decl.owner, c.owner)), caller.owners)  # the owner's view
        foreign = [c for c in decl.connections if c not in held]
        if foreign:
            raise BadRequest(
                f"bridge {decl.id} belongs to {decl.owner}: it may hold only that org's connections, "
                f"not {', '.join(foreign)} (every member of the org can call it and edit its graph)"
            )
        members = [(c.id, c.owner, c.name_prefix) for c in (held[i] for i in decl.connections)]
        clashes = prefix_problems(members, same_caller=True)
        if clashes:
            raise BadRequest(f"tool names could collide: {'; '.join(clashes)}")

    async def update_bridge(self, request: Request) -> Response:
        """PATCH /bridges/{id}: change the connections an API-made bridge federates."""
        started = time.perf_counter()
        caller, bridge = await self._bridge(request)
        if bridge.source == "config":
            raise Conflict(f"bridge {bridge.id} is declared in the config file; change it there")
        data = object_body(await json_body(request), {"connections"})
        try:
            decl = BridgeDecl.model_validate({"id": bridge.id, "owner": bridge.owner, **data})
        except ValidationError as exc:
            raise BadRequest(_first_error(exc)) from None
        await self._check_members(caller, decl)
        record = BridgeRecord(bridge.id, bridge.owner, tuple(decl.connections), "api")
        await self._store.upsert_bridge(record)
        args = {"owner": record.owner, "connections": list(record.connections)}
        self._record(change_record(caller, "bridge.update", record.id, args, started))
        return JSONResponse(record.public())

    async def get_bridge(self, request: Request) -> Response:
        """GET /bridges/{id}: one bridge with its pipeline names and the path that reaches it on
        MCP (with `?owner=` when an item of the caller's own shadows it: tenancy.py)."""
        caller, bridge = await self._bridge(request)
        data = await self._store.load_graph(bridge.key)
        names = [p.name for p in Graph.model_validate(data).pipelines] if data else []
        default = bridge  # without ?owner= the path's id named it, as /mcp/<id> will (no second read)
        if "owner" in request.query_params:
            default = named(await self._store.find_bridges(caller.owners, bridge.id), caller.owners, bridge.id)
        return JSONResponse({**bridge.public(), "pipelines": names, "mcpPath": mcp_path(bridge, default)})

    async def delete_bridge(self, request: Request) -> Response:
        """DELETE /bridges/{id}: remove an API-made bridge and its graph."""
        started = time.perf_counter()
        caller, bridge = await self._bridge(request)
        if bridge.source == "config":
            raise Conflict(f"bridge {bridge.id} is declared in the config file; remove it there")
        await self._store.delete_bridge(bridge.key)
        self._record(change_record(caller, "bridge.delete", bridge.id, {"owner": bridge.owner}, started))
        return Response(status_code=204)

    async def list_connections(self, request: Request) -> Response:
        """GET /connections: the caller's connections, without secret references."""
        caller = await caller_of(request, self._auth)
        listed = await self._store.list_connections(caller.owners)
        return JSONResponse({"data": [{**c.public(), "health": _health(self._upstreams.health(c.key))} for c in listed]})

    async def create_connection(self, request: Request) -> Response:
        """POST /connections: a connection without credentials (those are declared in YAML)."""
        started = time.perf_counter()
        caller = await caller_of(request, self._auth)
        data = object_body(await json_body(request), {"id", "owner", "endpoint", "prefix", *CREDENTIAL_FIELDS})
        header, sealed = self._credential(data)
        check_endpoint_url(data.get("endpoint"))
        try:
            decl = ConnectionConfig.model_validate({**data, "owner": owner_for(caller, data.get("owner"))})
        except ValidationError as exc:
            raise BadRequest(_first_error(exc)) from None
        self._check_endpoint(decl.endpoint)
        if await self._store.find_connections(caller.owners, decl.id):  # only what the caller sees (tenancy.py)
            raise Conflict(f"connection id {decl.id} is taken")
        made = [c for c in await self._store.list_connections((decl.owner,)) if c.source == "api" and c.owner == decl.owner]
        if len(made) >= self._limits.connectionsPerOwner:
            raise Forbidden(
                f"{decl.owner} has {len(made)} connections made through the API; "
                f"the limit is {self._limits.connectionsPerOwner} (bridge.limits.connectionsPerOwner)"
            )
        seen = [(c.id, c.owner, c.name_prefix) for c in await self._store.list_connections(caller.owners)]
        clashes = [p for p in prefix_problems([*seen, (decl.id, decl.owner, decl.name_prefix)]) if decl.id in p]
        if clashes:
            raise Conflict(f"tool names could collide: {'; '.join(clashes)}")
        record = ConnectionRecord(decl.id, decl.owner, decl.endpoint, header, sealed, source="api", prefix=decl.prefix)
        await self._store.upsert_connection(record)
        self._upstreams.forget(record.key)  # callers' cached connection lists now lack it (federation.py)
        args = {"owner": record.owner, **({"credential": "written"} if header is not None else {})}
        self._record(change_record(caller, "connection.create", record.id, args, started))
        return JSONResponse(record.public(), status_code=201)

    def _credential(self, data: dict[str, Any]) -> tuple[str | None, str | None]:
        """Take `authHeaderName` + `authSecret` out of `data`: the header and the sealed value, or
        (None, None) without them. The value is never echoed, in an answer or in an error."""
        header, value = data.pop("authHeaderName", None), data.pop("authSecret", None)
        if header is None and value is None:
            return None, None
        if not isinstance(header, str) or not _HEADER_NAME.fullmatch(header) or header.lower() in RESERVED_HEADERS:
            raise BadRequest("authHeaderName must be a header name (letters, digits, '-'; at most 64) the MCP "
                             f"transport does not set itself ({', '.join(sorted(RESERVED_HEADERS))})")
        if not isinstance(value, str) or not value or len(value) > MAX_CREDENTIAL_CHARS or not value.isprintable():
            raise BadRequest(f"authSecret must be the credential's value: 1 to {MAX_CREDENTIAL_CHARS} printable characters")
        if self._sealer is None:
            raise BadRequest("this gateway takes no credentials through the API: the operator has not set "
                             "bridge.secretKey (a connection's credential can also be declared in the YAML, by reference)")
        return header, self._sealer.seal(value)

    def _check_endpoint(self, endpoint: str) -> None:
        """A REST-made connection's endpoint: within the allow-list, not an internal address (403)."""
        if not self._endpoint_allowed(endpoint):
            raise Forbidden(f"endpoint {endpoint} is not in the Bridge's apiEndpointAllowList")
        if self._egress.refuses_literal(endpoint):
            raise Forbidden(
                f"endpoint {endpoint} is refused: connections made through the API may not reach loopback, "
                "private, link-local or the gateway's own addresses (see the Bridge's apiEndpointAllowPrivate)"
            )

    async def _made_connection(self, request: Request, verb: str) -> tuple[CallerScope, ConnectionRecord]:
        """The caller's connection of the path, made through the API (404 for another's, 409 for the YAML's)."""
        caller = await caller_of(request, self._auth)
        connection_id, owners = request.path_params["connection_id"], addressed(request, caller.owners)
        conn = named(await self._store.find_connections(owners, connection_id), owners, connection_id)
        if conn is None:
            raise NotFound(f"connection {connection_id} not found")
        if conn.source == "config":
            raise Conflict(f"connection {conn.id} is declared in the config file; {verb} it there")
        return caller, conn

    async def update_connection(self, request: Request) -> Response:
        """PATCH /connections/{id}: change an API-made connection's endpoint, prefix or credential.

        A credential is bound to the endpoint and header it was written for: a change of endpoint
        that does not write a credential in the same request drops the stored one (the answer says
        `"credential": "dropped"`), so a member who points an org's connection at their own server
        never receives the credential another member wrote. Every member of the owner sees the
        change in their audit listing."""
        started = time.perf_counter()
        caller, conn = await self._made_connection(request, "change")
        data = object_body(await json_body(request), {"endpoint", "prefix", *CREDENTIAL_FIELDS})
        header, sealed, credential = conn.auth_header_name, conn.auth_secret, None
        if "authSecret" in data or data.get("authHeaderName") is not None:
            (header, sealed), credential = self._credential(data), "written"
        elif "authHeaderName" in data:  # null: remove the credential
            header, sealed, credential = data.pop("authHeaderName"), None, "removed"
        endpoint = data.get("endpoint", conn.endpoint)
        check_endpoint_url(endpoint)
        current = {"id": conn.id, "owner": conn.owner, "endpoint": conn.endpoint}
        if conn.prefix is not None:
            current["prefix"] = conn.prefix
        try:
            decl = ConnectionConfig.model_validate({**current, **data})
        except ValidationError as exc:
            raise BadRequest(_first_error(exc)) from None
        self._check_endpoint(decl.endpoint)
        if credential is None and sealed is not None and decl.endpoint != conn.endpoint:
            header, sealed, credential = None, None, "dropped"  # never sent to an endpoint it was not written for
        seen = [(c.id, c.owner, c.name_prefix) for c in await self._store.list_connections(caller.owners) if c.key != conn.key]
        clashes = [p for p in prefix_problems([*seen, (decl.id, decl.owner, decl.name_prefix)]) if decl.id in p]
        if clashes:
            raise Conflict(f"tool names could collide: {'; '.join(clashes)}")
        record = ConnectionRecord(conn.id, conn.owner, decl.endpoint, header, sealed, source="api", prefix=decl.prefix)
        await self._store.upsert_connection(record)
        self._upstreams.forget(conn.key)
        changed = sorted({*data, *(CREDENTIAL_FIELDS if credential is not None else ())})
        args = {"owner": conn.owner, "fields": changed, **({"credential": credential} if credential else {})}
        self._record(change_record(caller, "connection.update", conn.id, args, started))
        return JSONResponse({**record.public(), **({"credential": credential} if credential else {})})

    async def delete_connection(self, request: Request) -> Response:
        """DELETE /connections/{id}: remove an API-made connection."""
        started = time.perf_counter()
        caller, conn = await self._made_connection(request, "remove")
        await self._store.delete_connection(conn.key)
        self._upstreams.forget(conn.key)
        self._record(change_record(caller, "connection.delete", conn.id, {"owner": conn.owner}, started))
        return Response(status_code=204)

    def _record(self, record: AuditRecord) -> None:
        """Audit a change (fire-and-forget, like every audit record)."""
        if self._audit is not None:
            self._audit.submit(record)


CREDENTIAL_FIELDS = ("authHeaderName", "authSecret")
MAX_CREDENTIAL_CHARS = 4096
_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
RESERVED_HEADERS = frozenset({
    "host", "content-length", "content-type", "transfer-encoding", "connection", "accept", "mcp-session-id",
    "mcp-protocol-version", "last-event-id",
})
"""Headers the MCP transport sets itself: a credential may not replace them."""


def _health(health: Health | None) -> dict[str, Any] | None:
    return health.public() if health is not None else None


def mcp_path(bridge: BridgeRecord, default: BridgeRecord | None) -> str:
    """Where MCP clients reach `bridge`: `/mcp/<id>`, with `?owner=` when its id alone names
    `default`, another of the caller's items (tenancy.py: their own shadows their org's)."""
    path = f"/mcp/{bridge.id}"
    return path if default == bridge else f"{path}?{urlencode({'owner': bridge.owner})}"


def _first_error(exc: ValidationError) -> str:
    return located(exc.errors()[0])
