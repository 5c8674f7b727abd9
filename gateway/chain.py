"""A route's plugin chain (G2): runs the hooks in YAML order and owns the gateway tool table.

Tool names that collide between plugins, or with the client's own tools, are shown to the model
as `<plugin id>__<name>` (B19); names the OpenAI pattern cannot carry are sanitised. The table
maps every exposed name back to its plugin and original name.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gateway.metrics import GatewayMetrics
from gateway.plugins import ChatRequest, ChatResponse, InspectItem, Plugin, PluginContext, PluginEnv, ToolSpec

log = logging.getLogger("toolgate.chain")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class GatewayTool:
    exposed: str
    plugin: Plugin
    spec: ToolSpec

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.exposed, "description": self.spec.description, "parameters": self.spec.parameters},
        }


def _fit(name: str) -> str:
    """A name the OpenAI function-name pattern accepts (`^[a-zA-Z0-9_-]{1,64}$`)."""
    safe = _UNSAFE.sub("_", name) or "tool"
    if len(safe) <= 64 and safe == name:
        return safe
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[:55]}_{digest}"


def tool_table(offers: list[tuple[Plugin, list[ToolSpec]]], client_names: set[str]) -> dict[str, GatewayTool]:
    """Exposed name → gateway tool, distinct from each other and from the client's tools."""
    counts = Counter(spec.name for _, specs in offers for spec in specs)
    table: dict[str, GatewayTool] = {}
    for plugin, specs in offers:
        for spec in specs:
            name = spec.name
            if counts[name] > 1 or name in client_names:
                name = f"{plugin.id}__{name}"
            name = _fit(name)
            while name in table or name in client_names:
                name = _fit(name + "_")
            table[name] = GatewayTool(name, plugin, spec)
    return table


class Chain:
    """The plugins of one route, in YAML order."""

    def __init__(self, route: str, plugins: list[Plugin], metrics: GatewayMetrics) -> None:
        self.route = route
        self.plugins = plugins
        self._metrics = metrics
        caps = [p.max_tool_calls for p in plugins if p.max_tool_calls is not None]
        self.max_tool_calls: int = min(caps) if caps else 10

    @property
    def offers_tools(self) -> bool:
        """True when a plugin of the chain provides tools (its class implements `tools`)."""
        return any(type(p).tools is not Plugin.tools for p in self.plugins)

    async def start(self, env: PluginEnv) -> None:
        for plugin in self.plugins:
            await plugin.start(env)

    async def stop(self) -> None:
        """Stop every plugin, last first; one that fails to stop does not keep the others open."""
        for plugin in reversed(self.plugins):
            try:
                await plugin.stop()
            except Exception:
                log.exception("plugin %s failed to stop", plugin.id)

    async def inspect(self, ctx: PluginContext, item: InspectItem) -> None:
        """Every plugin's inspector sees the item; the first refusal propagates (B11, P1)."""
        for plugin in self.plugins:
            await plugin.inspect(ctx, item)

    async def before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
        """Every plugin's `gather_context` at once (a slow server delays the request by the slowest
        call, across plugins too), then each `before_model` in YAML order."""
        if len(self.plugins) > 1:
            try:
                async with asyncio.TaskGroup() as group:
                    for plugin in self.plugins:
                        group.create_task(plugin.gather_context(ctx, request))
            except* Exception as eg:  # a refusal in one cancels the others
                raise eg.exceptions[0] from None
        elif self.plugins:
            await self.plugins[0].gather_context(ctx, request)
        for plugin in self.plugins:
            request = await plugin.before_model(ctx, request)
        return request

    async def after_model(self, ctx: PluginContext, request: ChatRequest, response: ChatResponse) -> ChatResponse:
        for plugin in self.plugins:
            response = await plugin.after_model(ctx, request, response)
        return response

    async def end_request(self, ctx: PluginContext) -> None:
        """Every plugin releases its per-request resources, even when another one fails to."""
        for plugin in self.plugins:
            try:
                await plugin.end_request(ctx)
            except Exception:
                log.exception("plugin %s failed to end the request", plugin.id)

    async def tools(self, ctx: PluginContext, client_names: set[str]) -> dict[str, GatewayTool]:
        if not self.plugins:
            return {}
        specs = await asyncio.gather(*(plugin.tools(ctx) for plugin in self.plugins))
        return tool_table(list(zip(self.plugins, specs)), client_names)

    async def call_tool(self, ctx: PluginContext, tool: GatewayTool, arguments: str) -> str:
        """Run one gateway tool call and inspect its result; returns the text the model reads."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            self._metrics.tool_calls.labels(tool.plugin.id, "invalid_arguments").inc()
            return f"error: the arguments for {tool.exposed} are not valid JSON"
        if not isinstance(args, dict):
            self._metrics.tool_calls.labels(tool.plugin.id, "invalid_arguments").inc()
            return f"error: the arguments for {tool.exposed} must be a JSON object"
        result = await tool.plugin.call_tool(ctx, tool.spec.name, args)
        self._metrics.tool_calls.labels(tool.plugin.id, "error" if result.is_error else "ok").inc()
        await self.inspect(ctx, InspectItem("tool_result", tool.plugin.id, tool.spec.name, result.text))
        return result.text
