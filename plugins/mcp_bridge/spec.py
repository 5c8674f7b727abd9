"""mcp_bridge's declaration to the gateway's registry: its config model and a lazy factory."""

from __future__ import annotations

from gateway.plugins import Plugin, PluginSpec
from plugins.mcp_bridge.config import McpBridgeConfig


def _build(config: McpBridgeConfig) -> Plugin:
    from plugins.mcp_bridge.plugin import McpBridgePlugin

    return McpBridgePlugin(config)


SPEC = PluginSpec(type="mcp_bridge", config=McpBridgeConfig, factory=_build)
