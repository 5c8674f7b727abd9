"""The explicit plugin registry: `{type: PluginSpec}`, from the specs the plugins declare.

Each plugin package declares a `PluginSpec` (its config model and a lazy factory); the `plugins`
package lists the ones shipped (`plugins.shipped()`). Nothing here names a plugin type: the YAML
union of plugin configs is built from the specs, told apart by `type`. Factories import their
plugin lazily, so `toolgate check` and routes without a plugin never pay for its dependencies.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, Field

from gateway.plugins import Plugin, PluginSpec
from plugins import shipped

REGISTRY: dict[str, PluginSpec] = {spec.type: spec for spec in shipped()}

PLUGIN_TYPES = frozenset(REGISTRY)
"""Every `type` a chain node may have."""

PluginConfig: Any = Annotated[Union[tuple(spec.config for spec in REGISTRY.values())], Field(discriminator="type")]  # type: ignore[valid-type]
"""A plugin node in a route's chain, told apart by `type`."""


def build_plugin(config: BaseModel) -> Plugin:
    """Instantiate the plugin a validated config describes."""
    return REGISTRY[config.type].factory(config)  # type: ignore[attr-defined]


def plugin_id(node: dict[str, Any]) -> Any:
    """The id a raw YAML chain node will have: its `id`, or its type's default id."""
    if "id" in node:
        return node["id"]
    spec = REGISTRY.get(node.get("type"))  # type: ignore[arg-type]
    field = spec.config.model_fields.get("id") if spec else None
    return field.default if field is not None else None
