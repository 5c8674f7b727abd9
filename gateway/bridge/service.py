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
from gateway.bridge.endpoint import McpEndpoint, build_manager, build_server
from gateway.bridge.federation import Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.offerings import Offerings
from gateway.bridge.records import BridgeRecord, ConnectionRecord
from gateway.bridge.store import BridgeStore, SqliteStore
from gateway.bridge.upstream import Upstreams
from gateway.egress import EgressPolicy
from gateway.identity import Identity
from gateway.secrets import SecretSet

log = logging.getLogger("toolgate.bridge")

Authenticate = Callable[[starlette.requests.Request], Awaitable[Identity]]


def database_path(config: BridgeConfig, base_dir: pathlib.Path) -> str:
    """The SQLite file of the config (relative paths are read from the config's folder)."""
    if config.database == ":memory:":
        return config.database
    path = pathlib.Path(config.database).expanduser()
    return str(path if path.is_absolute() else base_dir / path)


class BridgeService:
    """The Bridge: MCP endpoint, REST API and audit log over one store."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        authenticate: Authenticate,
        http: httpx2.AsyncClient,
        metrics: prometheus_client.CollectorRegistry,
        base_dir: pathlib.Path,
        secrets: SecretSet,
        store: BridgeStore | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        """`http` is the app's client for REST-side fetches; MCP sessions use the layer's own clients
        (gateway/mcp: session watch, no connection cap, one per credential)."""
        self.config = config
        self.store: BridgeStore = store if store is not None else SqliteStore(database_path(config, base_dir))
        egress = egress if egress is not None else EgressPolicy(config.apiEndpointAllowPrivate)
        self.upstreams = Upstreams(
            base_dir=base_dir, secrets=secrets, list_ttl=config.toolListTtlSeconds,
            idle_seconds=config.sessionIdleSeconds, registry=metrics, egress=egress,
        )
        self.audit = AuditWriter(self.store, queue_size=config.auditQueueSize, registry=metrics)
        federation = Federation(self.store, self.upstreams, config.api_endpoint_allowed)
        gate = CallerGate(config.limits.outboundPerCaller)  # one caller's outbound slots, tools and offerings alike
        self.handlers = BridgeHandlers(
            self.store, federation, self.upstreams, self.audit, secrets, metrics, config.limits, gate
        )
        self.offerings = Offerings(federation, self.upstreams, ttl=config.toolListTtlSeconds, secrets=secrets, gate=gate)
        self._endpoint = McpEndpoint(self.store, authenticate, self.offerings, scrub=secrets.scrub, limits=config.limits)
        self.upstreams.downstream_alive = self._endpoint.session_alive  # subscriptions end with their Bridge session
        self._api = BridgeApi(
            self.store, self.upstreams, authenticate, config.api_endpoint_allowed, scrub=secrets.scrub,
            limits=config.limits, audit=self.audit, egress=egress,
        )
        self._audit_api = AuditApi(self.store, authenticate, scrub=secrets.scrub)
        self._stack: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        """Open the store, load the YAML's connections and bridges, start the audit writer and the MCP manager."""
        stack = contextlib.AsyncExitStack()
        await self.store.open()
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
        """`/mcp`, `/mcp/{bridge_id}`, `/bridges...`, `/connections...`, `/audit`."""
        return [
            starlette.routing.Route("/mcp", self._endpoint),
            starlette.routing.Route("/mcp/{bridge_id}", self._endpoint),
            *self._api.routes(),
            *self._audit_api.routes(),
        ]

    async def _upsert_declared(self) -> None:
        for conn in self.config.connections:
            record = ConnectionRecord(
                conn.id, conn.owner, conn.endpoint, conn.authHeaderName, conn.authSecret, "config", conn.prefix
            )
            await self.store.upsert_connection(record)
            self.upstreams.forget(conn.id)
        for bridge in self.config.bridges:
            await self.store.upsert_bridge(BridgeRecord(bridge.id, bridge.owner, tuple(bridge.connections), "config"))
        log.info("bridge: %d connection(s), %d bridge(s) from the config", len(self.config.connections), len(self.config.bridges))
