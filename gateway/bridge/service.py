"""`BridgeService`: the Bridge as the gateway app sees it — start, stop, routes.

    service = BridgeService(config.bridge, authenticate=..., http=..., metrics=..., base_dir=..., secrets=...)
    await service.start()          # in the app's lifespan
    app.router.routes.extend(service.routes())
    ...
    await service.stop()

With `bridge.storeDownAtStart: serve`, a store that cannot be reached at start does not fail
`start()`: the service connects in the background (a pause doubling from `CONNECT_RETRY_FIRST` to
`CONNECT_RETRY_MOST` seconds), and until then its routes answer 503 naming the store and
`unready` says why (the app's `/readyz/bridge`, O4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
from collections.abc import Awaitable, Callable

import httpx2
import prometheus_client
import starlette.requests
import starlette.routing
import starlette.types

from gateway.bridge.api import BridgeApi
from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_api import AuditApi
from gateway.bridge.config import BridgeConfig
from gateway.bridge.editor_api import EditorApi
from gateway.bridge.endpoint import McpEndpoint, build_manager, build_server
from gateway.bridge.federation import Federation
from gateway.bridge.graph_api import GraphApi
from gateway.bridge.gate import CallerGate
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.offerings import Offerings
from gateway.bridge.records import BridgeRecord, ConnectionRecord
from gateway.bridge.store import BridgeStore, StoreUnavailable, is_postgres
from gateway.bridge.store_factory import open_store
from gateway.bridge.upstream import Upstreams
from gateway.bridge.sealing import Sealer
from gateway.bridge.spool import AuditSpool
from gateway.egress import EgressPolicy
from gateway.errors import error_response
from gateway.identity import Identity
from gateway.secrets import SecretSet, resolve_secret

log = logging.getLogger("toolgate.bridge")

Authenticate = Callable[[starlette.requests.Request], Awaitable[Identity]]

CONNECT_RETRY_FIRST = 0.5
"""Seconds before the first retry of a store that was down at start; doubled after each failure."""

CONNECT_RETRY_MOST = 10.0
"""The longest pause between those retries."""


class BridgeService:
    """The Bridge: MCP endpoint, REST API and audit log over one store."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        authenticate: Authenticate,
        api_authenticate: Authenticate | None = None,
        http: httpx2.AsyncClient,
        metrics: prometheus_client.CollectorRegistry,
        base_dir: pathlib.Path,
        secrets: SecretSet,
        store: BridgeStore | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        """`http` is the app's client for REST-side fetches; MCP sessions use the layer's own clients
        (gateway/mcp: session watch, no connection cap, one per credential). `api_authenticate`
        authenticates the REST API (default `authenticate`): the gateway's also admits the web
        console's session cookie there, never on the MCP endpoint."""
        api_authenticate = api_authenticate or authenticate
        self.config = config
        self.store: BridgeStore = store if store is not None else open_store(
            config.database, base_dir, password=config.databasePassword, secrets=secrets, pool_size=config.databasePoolSize
        )
        egress = egress if egress is not None else EgressPolicy(config.apiEndpointAllowPrivate)
        sealer = Sealer(resolve_secret(config.secretKey, base_dir, secrets), secrets) if config.secretKey else None
        self.upstreams = Upstreams(
            base_dir=base_dir, secrets=secrets, list_ttl=config.toolListTtlSeconds,
            idle_seconds=config.sessionIdleSeconds, registry=metrics, egress=egress, sealer=sealer,
            result_bytes=config.limits.resultBytes,
        )
        spool = None
        unspooled = unspooled_warning(config)
        if unspooled is not None:
            log.warning(unspooled)
        if config.auditSpool is not None:
            folder = pathlib.Path(config.auditSpool.path).expanduser()
            spool = AuditSpool(folder if folder.is_absolute() else base_dir / folder, config.auditSpool.maxBytes)
        self.audit = AuditWriter(self.store, queue_size=config.auditQueueSize, registry=metrics, spool=spool)
        self._scrub = secrets.scrub
        federation = Federation(self.store, self.upstreams, config.api_endpoint_allowed)
        gate = CallerGate(config.limits.outboundPerCaller)  # one caller's outbound slots: tools, offerings, REST listings
        self.handlers = BridgeHandlers(
            self.store, federation, self.upstreams, self.audit, secrets, metrics, config.limits, gate
        )
        self.offerings = Offerings(federation, self.upstreams, ttl=config.toolListTtlSeconds, secrets=secrets, gate=gate)
        self._endpoint = McpEndpoint(self.store, authenticate, self.offerings, scrub=secrets.scrub, limits=config.limits)
        self.upstreams.downstream_alive = self._endpoint.session_alive  # subscriptions end with their Bridge session
        self._api = BridgeApi(
            self.store, self.upstreams, api_authenticate, config.api_endpoint_allowed, scrub=secrets.scrub,
            limits=config.limits, audit=self.audit, egress=egress, sealer=sealer,
        )
        self._graph_api = GraphApi(
            self.store, self.upstreams, federation, api_authenticate, scrub=secrets.scrub, gate=gate,
            limits=config.limits, audit=self.audit,
        )
        self._audit_api = AuditApi(self.store, api_authenticate, scrub=secrets.scrub)
        self._editor_api = EditorApi(
            self.store, federation, self.upstreams, self.handlers, api_authenticate, scrub=secrets.scrub, gate=gate,
            audit=self.audit,
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._connecting: asyncio.Task[None] | None = None
        self.unready: StoreUnavailable | None = None
        """Why the Bridge does not serve yet (its store was down at start), or None once it does."""

    async def start(self) -> None:
        """Open the store, load the YAML's connections and bridges, start the audit writer and the MCP
        manager. A store down at start fails this, or with `storeDownAtStart: serve` is retried in
        the background while the routes answer 503."""
        try:
            await self.store.open()
        except StoreUnavailable as exc:
            if self.config.storeDownAtStart == "exit":  # `toolgate serve` then exits non-zero; say why in one line first
                log.error("the Bridge cannot start: %s", exc)
                raise
            log.error("the Bridge is not ready (chat routes are served; it retries): %s", exc)
            self.unready = _not_ready(exc)
            self._connecting = asyncio.create_task(self._connect_later(), name="toolgate-bridge-store-connect")
            return
        await self._serve()

    async def _connect_later(self) -> None:
        pause = CONNECT_RETRY_FIRST
        while True:
            await asyncio.sleep(pause)
            try:
                await self.store.open()
            except StoreUnavailable as exc:
                self.unready = _not_ready(exc)
                pause = min(pause * 2, CONNECT_RETRY_MOST)
                continue
            except Exception:  # not a lost server (a bug, a driver surprise): said, and tried again
                log.exception("the Bridge's store could not be opened; retrying")
                pause = min(pause * 2, CONNECT_RETRY_MOST)
                continue
            try:
                await self._serve()
            except Exception:  # e.g. the store lost again while loading the YAML's items: start over
                log.exception("the Bridge could not start on its store; retrying")
                continue
            log.info("the Bridge's store is reached; the Bridge serves")
            self.unready = None
            return

    async def _serve(self) -> None:
        """Everything after the store is open; on failure what was started is stopped, the store closed."""
        stack = contextlib.AsyncExitStack()
        stack.push_async_callback(self.store.close)
        try:
            await self._upsert_declared()
            self.audit.start()
            stack.push_async_callback(self.audit.stop)
            stack.push_async_callback(self.upstreams.close)
            manager = build_manager(
                build_server(self.handlers, self.offerings), self.config.allowedHosts, self.config.limits.sessions
            )
            await stack.enter_async_context(manager.run())
        except BaseException:
            await stack.aclose()
            raise
        self._endpoint.manager = manager
        self._stack = stack

    async def stop(self) -> None:
        """Stop serving MCP, flush the audit queue, close the store."""
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
        self._endpoint.manager = None
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def routes(self) -> list[starlette.routing.BaseRoute]:
        """`/mcp`, `/mcp/{bridge_id}`, `/bridges...`, `/connections...`, `/audit`, the editor's routes.
        Each answers 503 naming the store while `unready`."""
        routes = [
            starlette.routing.Route("/mcp", self._endpoint),
            starlette.routing.Route("/mcp/{bridge_id}", self._endpoint),
            *self._api.routes(),
            *self._graph_api.routes(),
            *self._audit_api.routes(),
            *self._editor_api.routes(),
        ]
        for route in routes:
            if isinstance(route, starlette.routing.Route):
                route.app = self._while_ready(route.app)
        return routes

    def _while_ready(self, app: starlette.types.ASGIApp) -> starlette.types.ASGIApp:
        async def guarded(scope: starlette.types.Scope, receive: starlette.types.Receive,
                          send: starlette.types.Send) -> None:
            unready = self.unready
            if unready is not None:
                await error_response(unready, self._scrub)(scope, receive, send)
                return
            await app(scope, receive, send)

        return guarded

    async def _upsert_declared(self) -> None:
        for conn in self.config.connections:
            record = ConnectionRecord(
                conn.id, conn.owner, conn.endpoint, conn.authHeaderName, conn.authSecret, "config", conn.prefix
            )
            await self.store.upsert_connection(record)
            self.upstreams.forget(record.key)
        for bridge in self.config.bridges:
            await self.store.upsert_bridge(BridgeRecord(bridge.id, bridge.owner, tuple(bridge.connections), "config"))
        log.info("bridge: %d connection(s), %d bridge(s) from the config", len(self.config.connections), len(self.config.bridges))


def _not_ready(exc: StoreUnavailable) -> StoreUnavailable:
    """What the Bridge's routes and `/readyz/bridge` answer while its store was not reached yet."""
    return StoreUnavailable(f"the Bridge is not ready: {exc.message}")


def unspooled_warning(config: BridgeConfig) -> str | None:
    """What start-up says when the audit log can lose records in an outage: a PostgreSQL store
    (a server that can be away while the gateway serves) without `bridge.auditSpool`."""
    if config.auditSpool is not None or not is_postgres(config.database):
        return None
    return (f"bridge.auditSpool is not set: while PostgreSQL is unreachable, audit records beyond "
            f"bridge.auditQueueSize ({config.auditQueueSize}) are dropped (toolgate_audit_dropped_total); set "
            "bridge.auditSpool to keep them on local disk until it is back (docs/operations.md, \"The audit spool\")")
