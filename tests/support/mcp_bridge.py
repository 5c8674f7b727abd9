"""Helpers for mcp_bridge tests: a started plugin, a request context that records inspections.

A plugin built here sends the canary credential to HTTP servers (`canary.mcp_auth()`) unless the
test names its own `authHeaderName`; what it hands back (tool results, the completed request) and
its metrics are searched for the canary (B4).
"""

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
from tests.support import canary


class Inspections:
    """An inspector that records every item and refuses those containing `block_word`."""

    def __init__(self, block_word: str | None = None) -> None:
        self.items: list[InspectItem] = []
        self.block_word = block_word

    async def __call__(self, item: InspectItem) -> None:
        self.items.append(item)
        canary.RECORDER.scan("model request", f"an item inspected from {item.server}/{item.source}", item.text)
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
    """A validated mcp_bridge config (short timeouts for tests unless given; the canary credential
    for an `endpoint` unless `authHeaderName` is given, None for none)."""
    auth = canary.mcp_auth() if "endpoint" in fields and "authHeaderName" not in fields else {}
    return McpBridgeConfig.model_validate({"type": "mcp_bridge", "id": "docs", "timeoutSeconds": 5, **auth, **fields})


def _searched(plugin: McpBridgePlugin) -> None:
    """Search what the plugin hands to the model: tool results and completed requests."""
    call_tool, before_model = plugin.call_tool, plugin.before_model

    async def searched_call_tool(ctx: PluginContext, name: str, arguments: dict[str, Any]) -> Any:
        result = await call_tool(ctx, name, arguments)
        canary.RECORDER.scan("model request", f"mcp_bridge tool result of {name}", result.text)
        return result

    async def searched_before_model(ctx: PluginContext, request: dict[str, Any]) -> dict[str, Any]:
        out = await before_model(ctx, request)
        canary.RECORDER.scan("model request", "mcp_bridge before_model output", repr(out))
        return out

    plugin.call_tool = searched_call_tool  # type: ignore[method-assign]
    plugin.before_model = searched_before_model  # type: ignore[method-assign]


@asynccontextmanager
async def running_bridge(**fields: Any) -> AsyncIterator[tuple[McpBridgePlugin, CollectorRegistry]]:
    """A started plugin and its metrics registry; stopped on exit."""
    plugin = McpBridgePlugin(bridge_config(**fields))
    _searched(plugin)
    registry = CollectorRegistry()
    async with httpx2.AsyncClient() as http:
        await plugin.start(PluginEnv(http=http, metrics=registry, route="assistant"))
        try:
            yield plugin, registry
        finally:
            await plugin.stop()
            canary.scan_registry(registry, "mcp_bridge plugin registry after stop")


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    value = registry.get_sample_value(name, labels)
    return value if value is not None else 0.0


def metrics_text(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text format."""
    return generate_latest(registry).decode()
