"""Prometheus metrics of the guard (G9), registered on the app's own `CollectorRegistry`.

Several routes may each have a prompt_guard node while sharing one registry: the collectors are
shared through `gateway.metrics.metric` (the `guard` label tells the nodes apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.metrics import metric


@dataclass(frozen=True)
class GuardMetrics:
    """The collectors every prompt_guard node of one app reports to."""

    verdicts: Counter
    latency: Histogram
    holds: Counter
    egress: Counter


def guard_metrics(registry: CollectorRegistry) -> GuardMetrics:
    """Collectors for `registry`, created on first call."""
    return GuardMetrics(
        verdicts=metric(registry, Counter, "toolgate_guard_verdicts_total",
                        "Guard verdicts per inspected item (allow, block, monitor_block)", ["guard", "verdict", "kind"]),
        latency=metric(registry, Histogram, "toolgate_guard_scan_seconds", "Time to scan one inspected item", ["guard"],
                       buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0)),
        holds=metric(registry, Counter, "toolgate_guard_tool_calls_held_total",
                     "Tool calls the firewall held (held) or would have held in monitor mode (monitor_held)",
                     ["guard", "server", "tool", "rule", "outcome"]),
        egress=metric(registry, Counter, "toolgate_guard_egress_neutralised_total",
                      "Links and images neutralised in answers", ["guard", "kind", "reason"]),
    )
