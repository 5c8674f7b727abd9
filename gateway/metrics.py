"""Prometheus metrics (G9, A4), on a registry owned by one app (never the global one).

`metric(registry, kind, name, doc, labels)` is the one way every part of the gateway (core,
plugins, the Bridge) registers a collector: created on first use, the same collector afterwards,
so several nodes (two mcp_bridge nodes, a prompt_guard per route) share one name by label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

_CREATED: "WeakKeyDictionary[CollectorRegistry, dict[str, Any]]" = WeakKeyDictionary()
"""The collectors made through `metric`, per registry (a cache, not configuration)."""


def metric(registry: CollectorRegistry, kind: type[M], name: str, doc: str, labels: Sequence[str] = (), **kwargs: Any) -> M:
    """The collector called `name` on `registry`, created on first call (later calls return it;
    asking for it as another kind is a programming error and raises `TypeError`)."""
    made = _CREATED.setdefault(registry, {})
    found = made.get(name)
    if found is None:
        found = made[name] = kind(name, doc, list(labels), registry=registry, **kwargs)
    if not isinstance(found, kind):
        raise TypeError(f"metric {name} is a {type(found).__name__}, not a {kind.__name__}")
    return found


NO_USER_LABEL = "-"
"""The `user` label of token counts unless `server.metrics_user_labels` is on: whoever can read
/metrics (a scraper, a dashboard) learns no one's usage by name."""


class GatewayMetrics:
    """Requests, latency, tokens, upstream calls and tool calls. Plugins add theirs to `registry`.
    `user_labels`: token counts carry the user (`server.metrics_user_labels`), else `-`."""

    def __init__(self, *, user_labels: bool = False) -> None:
        self.user_labels = user_labels
        self._children: dict[tuple[str, ...], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = metric(
            self.registry, Counter, "toolgate_requests",
            "Client requests (all three APIs) by route and status; refused before a route: route=none", ["route", "status"],
        )
        self.latency = metric(
            self.registry, Histogram, "toolgate_request_seconds", "Time to the full response (or stream end)", ["route"],
            buckets=_BUCKETS,
        )
        self.tokens = metric(
            self.registry, Counter, "toolgate_tokens",
            "Tokens of every upstream call by route, user (- unless server.metrics_user_labels) and kind (prompt, completion)",
            ["route", "user", "kind"],
        )
        self.upstream_calls = metric(
            self.registry, Counter, "toolgate_upstream_calls",
            "Upstream model calls (each retry one more) by upstream, deployment (upstream/model) and outcome",
            ["upstream", "deployment", "outcome"],
        )
        self.tool_calls = metric(
            self.registry, Counter, "toolgate_tool_calls", "Gateway tool calls by plugin node and status", ["server", "status"],
        )

    def child(self, collector: M, *values: str) -> M:
        """`collector.labels(*values)`, remembered: `labels` checks and locks on every call (~1.5 %
        of a request for the four a request takes). As many entries as the collector has series."""
        key = (collector._name, *values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = collector.labels(*values)
        return found  # type: ignore[no-any-return]
