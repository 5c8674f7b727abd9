"""Plugins shipped with toolgate; each declares a `PluginSpec` in its `spec` module."""

from __future__ import annotations

from gateway.plugins import PluginSpec


def shipped() -> list[PluginSpec]:
    """The specs of the plugins in this package (the gateway's registry is built from them)."""
    from plugins.mcp_bridge.spec import SPEC as MCP_BRIDGE
    from plugins.prompt_guard.spec import SPEC as PROMPT_GUARD

    return [MCP_BRIDGE, PROMPT_GUARD]
