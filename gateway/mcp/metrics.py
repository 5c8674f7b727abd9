"""Session metrics (G9) of an MCP client pool, on the app's own registry; labels never carry secrets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.metrics import metric


class PoolMetrics:
    """Sessions of one pool, labelled by `server` (an mcp_bridge node id, or `bridge` for the Bridge)."""

    def __init__(self, registry: CollectorRegistry, server: str) -> None:
        self.server = server
        self.open = metric(registry, Gauge, "toolgate_mcp_sessions_open", "MCP sessions open now", ["server"]).labels(server)
        self.opened = metric(registry, Counter, "toolgate_mcp_sessions_opened", "MCP sessions opened", ["server"]).labels(server)
        self.closed = metric(
            registry, Counter, "toolgate_mcp_sessions_closed", "MCP sessions closed (idle, request end, stop)", ["server"]
        ).labels(server)
        self.replaced = metric(
            registry, Counter, "toolgate_mcp_sessions_replaced", "MCP sessions the server ended, replaced", ["server"]
        ).labels(server)
