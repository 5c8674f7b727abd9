"""Small in-process plugins for testing the chain and the loop through the real app."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.errors import GuardBlocked
from gateway.plugins import InspectItem, Plugin, PluginContext, ToolResult, ToolSpec


class EchoTools(Plugin):
    """Offers `tools` (names); each call answers `<name>: <arguments>` and is recorded."""

    def __init__(self, plugin_id: str, names: list[str], cap: int | None = None) -> None:
        self.id = plugin_id
        self.names = names
        self.max_tool_calls = cap
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate: asyncio.Event | None = None

    async def tools(self, ctx: PluginContext) -> list[ToolSpec]:
        return [ToolSpec(n, f"echo tool {n}", {"type": "object", "properties": {"q": {"type": "string"}}}) for n in self.names]

    async def call_tool(self, ctx: PluginContext, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append((name, arguments))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None and self.in_flight < 2:
                await asyncio.wait_for(self.gate.wait(), 5)
            elif self.gate is not None:
                self.gate.set()
            return ToolResult(f"{self.id}.{name}: {arguments}")
        finally:
            self.in_flight -= 1


class Recorder(Plugin):
    """Appends its id to a shared list at each hook, to observe hook order (G2)."""

    def __init__(self, plugin_id: str, log: list[str], block_word: str | None = None) -> None:
        self.id = plugin_id
        self.log = log
        self.block_word = block_word

    async def before_model(self, ctx: PluginContext, request: dict[str, Any]) -> dict[str, Any]:
        self.log.append(f"before:{self.id}")
        request["messages"][-1]["content"] += f" [{self.id}]"
        return request

    async def inspect(self, ctx: PluginContext, item: InspectItem) -> None:
        self.log.append(f"inspect:{self.id}:{item.source}")
        if self.block_word and self.block_word in item.text:
            raise GuardBlocked(inspector=self.id, server=item.server, source=item.source, rules=["test.word"], score=1.0)

    async def after_model(self, ctx: PluginContext, request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        self.log.append(f"after:{self.id}")
        return response

    async def end_request(self, ctx: PluginContext) -> None:
        self.log.append(f"end:{self.id}")
