"""Helpers for mcp_bridge tests: a started plugin, a request context that records inspections."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from prometheus_client import CollectorRegistry, generate_latest

from gateway.errors import GuardBlocked
from gateway.identity import Identity
from gateway.plugins import InspectItem, PluginContext, PluginEnv
from plugins.mcp_bridge.config import McpBridgeConfig
from plugins.mcp_bridge.plugin import McpBridgePlugin


class Inspections:
    """An inspector that records every item and refuses those containing `block_word`."""

    def __init__(self, block_word: str | None = None) -> None:
        self.items: list[InspectItem] = []
        self.block_word = block_word

    async def __call__(self, item: InspectItem) -> None:
        self.items.append(item)
        if self.block_word and self.block_word in item.text:
            raise GuardBlocked(inspector="test", server=item.server, source=item.source, rules=["t.word"], score=1.0)


def context(
    key: str | None = "conv-1",
    request_id: str = "req-1",
    inspect: Inspections | None = None,
    identity: Identity | None = None,
) -> PluginContext:
    """A request context as the gateway builds it."""
    return PluginContext(
        identity=identity or Identity(user_id="alice", org_id="acme", display_name="Alice"),
        conversation_key=key,
        request_id=request_id,
        route="assistant",
        deadline=time.monotonic() + 60,
        inspect=inspect or Inspections(),
    )


def bridge_config(**fields: Any) -> McpBridgeConfig:
    """A validated mcp_bridge config (short timeouts for tests unless given)."""
    return McpBridgeConfig.model_validate({"type": "mcp_bridge", "id": "docs", "timeoutSeconds": 5, **fields})


@asynccontextmanager
async def running_bridge(**fields: Any) -> AsyncIterator[tuple[McpBridgePlugin, CollectorRegistry]]:
    """A started plugin and its metrics registry; stopped on exit."""
    plugin = McpBridgePlugin(bridge_config(**fields))
    registry = CollectorRegistry()
    async with httpx2.AsyncClient() as http:
        await plugin.start(PluginEnv(http=http, metrics=registry, route="assistant"))
        try:
            yield plugin, registry
        finally:
            await plugin.stop()


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    value = registry.get_sample_value(name, labels)
    return value if value is not None else 0.0


def metrics_text(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text format."""
    return generate_latest(registry).decode()
