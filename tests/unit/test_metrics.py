"""One way to register metrics (G9): `gateway.metrics.metric`, shared by name on the app's registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.metrics import metric
from plugins.mcp_bridge.metrics import BridgeMetrics
from plugins.prompt_guard.metrics import guard_metrics


def test_the_same_name_gives_the_same_collector_and_another_kind_is_refused() -> None:
    # R: G9
    registry = CollectorRegistry()
    first = metric(registry, Counter, "toolgate_things", "Things", ["server"])
    assert metric(registry, Counter, "toolgate_things", "Things", ["server"]) is first
    assert metric(CollectorRegistry(), Counter, "toolgate_things", "Things", ["server"]) is not first
    with pytest.raises(TypeError, match="toolgate_things is a Counter, not a Gauge"):
        metric(registry, Gauge, "toolgate_things", "Things")


def test_several_plugin_nodes_share_their_collectors_on_one_registry() -> None:
    # R: G9
    registry = CollectorRegistry()
    docs, tickets = BridgeMetrics(registry, "docs"), BridgeMetrics(registry, "tickets")
    docs.tool_call("ok")
    tickets.tool_call("ok")
    assert guard_metrics(registry).verdicts is guard_metrics(registry).verdicts
    assert registry.get_sample_value("toolgate_mcp_tool_calls_total", {"server": "docs", "status": "ok"}) == 1.0
    assert registry.get_sample_value("toolgate_mcp_tool_calls_total", {"server": "tickets", "status": "ok"}) == 1.0
