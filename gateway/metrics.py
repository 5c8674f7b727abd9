"""Prometheus metrics of the gateway (G9), on a registry owned by one app (never global)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    """Requests, latency, upstream calls and tool calls. Plugins add theirs to `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "toolgate_requests", "Client requests (all three APIs) by route and status; refused before a route: route=none", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "toolgate_request_seconds", "Time to the full response (or stream end)", ["route"], buckets=_BUCKETS, registry=self.registry
        )
        self.tokens = Counter(
            "toolgate_tokens", "Tokens of every upstream call by route, user and kind (prompt, completion)",
            ["route", "user", "kind"], registry=self.registry,
        )
        self.upstream_calls = Counter(
            "toolgate_upstream_calls", "Upstream model calls by upstream and outcome", ["upstream", "outcome"], registry=self.registry
        )
        self.tool_calls = Counter(
            "toolgate_tool_calls", "Gateway tool calls by plugin node and status", ["server", "status"], registry=self.registry
        )
