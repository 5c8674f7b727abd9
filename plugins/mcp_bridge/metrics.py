"""Pool and tool-call metrics (G9) on the app's own registry; labels never carry secrets."""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

M = TypeVar("M", Counter, Gauge)


def _shared(registry: CollectorRegistry, kind: type[M], name: str, doc: str, labels: list[str]) -> M:
    """The collector called `name` in `registry`, created once: several bridges share it by label."""
    names: dict[str, Any] = getattr(registry, "_names_to_collectors", {})
    existing = names.get(name) or names.get(f"{name}_total")
    if isinstance(existing, kind):
        return existing
    return kind(name, doc, labels, registry=registry)


class BridgeMetrics:
    """The metrics of one mcp_bridge node, labelled by its id (`server`)."""

    def __init__(self, registry: CollectorRegistry, server: str) -> None:
        self.server = server
        self.open = _shared(registry, Gauge, "toolgate_mcp_sessions_open", "MCP sessions open now", ["server"]).labels(server)
        self.opened = _shared(
            registry, Counter, "toolgate_mcp_sessions_opened", "MCP sessions opened", ["server"]
        ).labels(server)
        self.closed = _shared(
            registry, Counter, "toolgate_mcp_sessions_closed", "MCP sessions closed (idle, request end, stop)", ["server"]
        ).labels(server)
        self.replaced = _shared(
            registry, Counter, "toolgate_mcp_sessions_replaced", "MCP sessions the server ended, replaced", ["server"]
        ).labels(server)
        self._calls = _shared(
            registry, Counter, "toolgate_mcp_tool_calls", "MCP tool calls by outcome", ["server", "status"]
        )

    def tool_call(self, status: str) -> None:
        """Count one tool call: `ok`, `error` (the tool said so), `failed` (no result), `refused` (filter)."""
        self._calls.labels(self.server, status).inc()
