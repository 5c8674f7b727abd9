"""The explicit plugin registry: `{type: (ConfigModel, factory)}`.

Factories import their plugin lazily so `toolgate check` and routes without a plugin never pay
for its dependencies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Union

from pydantic import BaseModel, Field

from gateway.plugins import Plugin
from plugins.mcp_bridge.config import McpBridgeConfig
from plugins.prompt_guard.config import PromptGuardConfig


def _mcp_bridge(config: Any) -> Plugin:
    from plugins.mcp_bridge.plugin import McpBridgePlugin

    return McpBridgePlugin(config)


def _prompt_guard(config: Any) -> Plugin:
    from plugins.prompt_guard.plugin import PromptGuardPlugin

    return PromptGuardPlugin(config)


REGISTRY: dict[str, tuple[type[BaseModel], Callable[[Any], Plugin]]] = {
    "mcp_bridge": (McpBridgeConfig, _mcp_bridge),
    "prompt_guard": (PromptGuardConfig, _prompt_guard),
}

PluginConfig = Annotated[Union[McpBridgeConfig, PromptGuardConfig], Field(discriminator="type")]
"""A plugin node in a route's chain, told apart by `type`."""


def build_plugin(config: BaseModel) -> Plugin:
    """Instantiate the plugin a validated config describes."""
    _, factory = REGISTRY[config.type]  # type: ignore[attr-defined]
    return factory(config)
