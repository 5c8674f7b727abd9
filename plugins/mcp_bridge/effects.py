"""What a server's tool does, for prompt_guard's firewall (T2).

The operator's word comes first (`readOnlyTools`, `sideEffectTools` on the node): a server's
annotations are hints the server chose, and the MCP specification says to treat them as untrusted
unless the server is. Then the server's annotations: `readOnlyHint: true` reads only, and with
`openWorldHint` not `false` (the specification's default is true) it still reaches the outside
world, so its arguments can carry data out (`open_world`). Anything else — no annotations,
`readOnlyHint` false or absent — acts: `destructive` unless `destructiveHint` is `false` (the
specification's default is true), the safe side.
"""

from __future__ import annotations

import mcp_types as types

from gateway.plugins import ToolEffect
from plugins.mcp_bridge.config import McpBridgeConfig


def tool_effect(tool: types.Tool, config: McpBridgeConfig) -> ToolEffect:
    """`tool`'s effect class on this node."""
    if tool.name in config.readOnlyTools:
        return "read_only"
    if tool.name in config.sideEffectTools:
        return "side_effect"
    hints = tool.annotations
    if hints is None:
        return "destructive"
    if hints.read_only_hint is not True:
        return "side_effect" if hints.destructive_hint is False else "destructive"
    return "read_only" if hints.open_world_hint is False else "open_world"
