"""Context given to the model before its first call (B5–B13, B18): the prefetch tool's result and
the configured resources, fetched concurrently, inspected, and rendered as titled blocks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.plugins import ChatRequest, InspectItem, PluginContext
from plugins.mcp_bridge.config import McpBridgeConfig
from plugins.mcp_bridge.content import tool_result_text
from gateway.mcp.errors import describe
from gateway.injection import ContextBlock
from plugins.mcp_bridge.operations import ResourceText, call_tool, read_resource
from plugins.mcp_bridge.templating import client_last_user_message, prefetch_values, render_result, substitute_json

log = logging.getLogger("toolgate.mcp_bridge")

Runner = Callable[[PluginContext, Any], Awaitable[Any]]
"""Runs an operation on the request's session (the pool, with its retry)."""

TOOL_FAILED = "the tool failed"
RESOURCE_FAILED = "the resource could not be read"


class ContextGatherer:
    """Builds the blocks one mcp_bridge node injects into a request."""

    def __init__(self, config: McpBridgeConfig, run: Runner, scrub: Callable[[str], str], count: Callable[[str], None]):
        self._config = config
        self._run = run
        self._scrub = scrub
        self._count = count

    def prefetch_arguments(self, ctx: PluginContext, request: ChatRequest) -> dict[str, Any]:
        """`prefetchArguments` with the B6 tokens substituted inside string values."""
        return substitute_json(self._config.prefetchArguments, prefetch_values(ctx, request))

    async def gather(self, ctx: PluginContext, request: ChatRequest) -> list[ContextBlock]:
        """Prefetch (unless the last user message is empty, B7) and every resource, concurrently (B18).

        A `GuardBlocked` from an inspector propagates and refuses the request (B13); the other
        fetches are then cancelled.
        """
        asked = client_last_user_message(ctx, request)  # recorded before any block is appended
        jobs: list[Awaitable[ContextBlock]] = []
        if self._config.prefetchTool and asked.strip():
            jobs.append(self._prefetch(ctx, request))
        jobs.extend(self._resource(ctx, reference) for reference in self._config.resource_list)
        if not jobs:
            return []
        tasks = [asyncio.ensure_future(job) for job in jobs]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()

    async def _prefetch(self, ctx: PluginContext, request: ChatRequest) -> ContextBlock:
        tool = self._config.prefetchTool or ""
        title = self._config.prefetchLabel or tool
        arguments = self.prefetch_arguments(ctx, request)
        try:
            result = await self._run(ctx, call_tool(tool, arguments, self._config.timeoutSeconds))
        except Exception as exc:
            reason = self._scrub(describe(exc, detail=False))
            log.warning("mcp prefetch %s/%s failed: %s", self._config.id, tool, reason)
            self._count("failed")
            return ContextBlock(title, f"{TOOL_FAILED}: {reason}")
        text = self._scrub(tool_result_text(result))
        text = await ctx.inspect(InspectItem(kind="prefetch", server=self._config.id, source=tool, text=text)) or text
        if result.is_error:
            self._count("error")
            return ContextBlock(title, f"{TOOL_FAILED}: {text}")
        self._count("ok")
        return ContextBlock(title, render_result(self._config.prefetchResultTemplate, text))

    async def _resource(self, ctx: PluginContext, reference: str) -> ContextBlock:
        title = f"Resource {reference}"
        try:
            read: ResourceText = await self._run(ctx, read_resource(reference))
        except Exception as exc:
            reason = self._scrub(describe(exc, detail=False))
            log.info("mcp resource %s/%s not read: %s", self._config.id, reference, reason)
            return ContextBlock(title, f"{RESOURCE_FAILED}: {reason}")
        text = self._scrub(read.text)
        text = await ctx.inspect(InspectItem(kind="resource", server=self._config.id, source=reference, text=text)) or text
        return ContextBlock(title, text)

