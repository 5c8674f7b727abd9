"""Pool and tool-call metrics (G9) of one mcp_bridge node; labels never carry secrets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from gateway.mcp.metrics import PoolMetrics
from gateway.metrics import metric


class BridgeMetrics(PoolMetrics):
    """The metrics of one mcp_bridge node, labelled by its id (`server`)."""

    def __init__(self, registry: CollectorRegistry, server: str) -> None:
        super().__init__(registry, server)
        self._calls = metric(registry, Counter, "toolgate_mcp_tool_calls", "MCP tool calls by outcome", ["server", "status"])

    def tool_call(self, status: str) -> None:
        """Count one tool call: `ok`, `error` (the tool said so), `failed` (no result), `refused` (filter)."""
        self._calls.labels(self.server, status).inc()
