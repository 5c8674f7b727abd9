"""Pool and tool-call metrics (G9) on the app's own registry; labels never carry secrets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.metrics import metric

class BridgeMetrics:
    """The metrics of one mcp_bridge node, labelled by its id (`server`)."""

    def __init__(self, registry: CollectorRegistry, server: str) -> None:
        self.server = server
        self.open = metric(registry, Gauge, "toolgate_mcp_sessions_open", "MCP sessions open now", ["server"]).labels(server)
        self.opened = metric(
            registry, Counter, "toolgate_mcp_sessions_opened", "MCP sessions opened", ["server"]
        ).labels(server)
        self.closed = metric(
            registry, Counter, "toolgate_mcp_sessions_closed", "MCP sessions closed (idle, request end, stop)", ["server"]
        ).labels(server)
        self.replaced = metric(
            registry, Counter, "toolgate_mcp_sessions_replaced", "MCP sessions the server ended, replaced", ["server"]
        ).labels(server)
        self._calls = metric(
            registry, Counter, "toolgate_mcp_tool_calls", "MCP tool calls by outcome", ["server", "status"]
        )

    def tool_call(self, status: str) -> None:
        """Count one tool call: `ok`, `error` (the tool said so), `failed` (no result), `refused` (filter)."""
        self._calls.labels(self.server, status).inc()
