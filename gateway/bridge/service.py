"""`BridgeService`: the Bridge as the gateway app sees it — start, stop, routes.

    service = BridgeService(config.bridge, authenticate=..., http=..., metrics=..., base_dir=..., secrets=...)
    await service.start()          # in the app's lifespan
    app.router.routes.extend(service.routes())
    ...
    await service.stop()
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
from collections.abc import Awaitable, Callable

import httpx2
import prometheus_client
import starlette.requests
import starlette.routing

from gateway.bridge.api import BridgeApi
from gateway.bridge.audit import AuditWriter
from gateway.bridge.audit_api import AuditApi
from gateway.bridge.config import BridgeConfig
from gateway.bridge.editor_api import EditorApi
from gateway.bridge.endpoint import McpEndpoint, build_manager, build_server
from gateway.bridge.federation import Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.offerings import Offerings
from gateway.bridge.records import BridgeRecord, ConnectionRecord
from gateway.bridge.store import BridgeStore, StoreUnavailable, open_store
from gateway.bridge.upstream import Upstreams
from gateway.bridge.sealing import Sealer
from gateway.egress import EgressPolicy
from gateway.identity import Identity
from gateway.secrets import SecretSet, resolve_secret

log = logging.getLogger("toolgate.bridge")

Authenticate = Callable[[starlette.requests.Request], Awaitable[Identity]]


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
        self.audit = AuditWriter(self.store, queue_size=config.auditQueueSize, registry=metrics)
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
        self._audit_api = AuditApi(self.store, api_authenticate, scrub=secrets.scrub)
        self._editor_api = EditorApi(
            self.store, federation, self.upstreams, self.handlers, api_authenticate, scrub=secrets.scrub, gate=gate
        )
        self._stack: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        """Open the store, load the YAML's connections and bridges, start the audit writer and the MCP manager."""
        stack = contextlib.AsyncExitStack()
        try:
            await self.store.open()
        except StoreUnavailable as exc:  # `toolgate serve` then exits non-zero; say why in one line first
            log.error("the Bridge cannot start: %s", exc)
            raise
        stack.push_async_callback(self.store.close)
        await self._upsert_declared()
        self.audit.start()
        stack.push_async_callback(self.audit.stop)
        stack.push_async_callback(self.upstreams.close)
        manager = build_manager(
            build_server(self.handlers, self.offerings), self.config.allowedHosts, self.config.limits.sessions
        )
        await stack.enter_async_context(manager.run())
        self._endpoint.manager = manager
        self._stack = stack

    async def stop(self) -> None:
        """Stop serving MCP, flush the audit queue, close the store."""
        self._endpoint.manager = None
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def routes(self) -> list[starlette.routing.BaseRoute]:
        """`/mcp`, `/mcp/{bridge_id}`, `/bridges...`, `/connections...`, `/audit`, the editor's routes."""
        return [
            starlette.routing.Route("/mcp", self._endpoint),
            starlette.routing.Route("/mcp/{bridge_id}", self._endpoint),
            *self._api.routes(),
            *self._audit_api.routes(),
            *self._editor_api.routes(),
        ]

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
