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

from gateway.confirmations import PendingCalls, confirmation_codes
from gateway.content import message_text
from gateway.injection import ContextBlock, inject
from gateway.metrics import GatewayMetrics
from gateway.tracing import span
from gateway.plugins import (
    AnswerFilter, ChatRequest, ChatResponse, HeldCall, Hold, InspectItem, Plugin, PluginContext, PluginEnv, ToolCall,
    ToolSpec,
)

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


def _caller(ctx: PluginContext) -> str:
    """Who may confirm a held call: the identity that made the request (G3)."""
    return f"{ctx.identity.user_id or ''}\x1f{ctx.identity.org_id or ''}"


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
        self._by_id = {p.id: p for p in plugins}
        self.pending = PendingCalls()
        """Held calls awaiting a person's confirmation (T4), per conversation and caller."""

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

    async def inspect(self, ctx: PluginContext, item: InspectItem) -> str:
        """Every plugin's inspector sees the item; the first refusal propagates (B11, P1). What
        a tool, prefetch or resource brought is labelled untrusted first, unless the node that
        fetched it trusts its source (T1). Returns the text the model reads (`present`)."""
        if item.kind != "client_message":
            owner = self._by_id.get(item.server)
            trusted = owner is not None and owner.trusts(item.source)
            ctx.provenance.add(item.kind, item.server, item.source, item.text, trusted=trusted)
        with span("chain inspect", {"toolgate.route": self.route, "toolgate.item.kind": item.kind, "toolgate.mcp.server": item.server}):
            for plugin in self.plugins:
                await plugin.inspect(ctx, item)
        text = item.text
        for plugin in self.plugins:
            text = plugin.present(ctx, item, text)
        return text

    async def check_tool_call(self, ctx: PluginContext, call: ToolCall) -> Hold | None:
        """The first plugin that holds the call decides (T3); None lets it run."""
        for plugin in self.plugins:
            hold = await plugin.check_tool_call(ctx, call)
            if hold is not None:
                return hold
        return None

    def held(self, ctx: PluginContext, call: ToolCall, hold: Hold) -> str:
        """Record a held call (kept for confirmation where the conversation can come back to it,
        T4) and return the tool error the model reads instead of a result."""
        confirm = None
        if hold.confirm_seconds is not None and ctx.conversation_key is not None and not call.client:
            pending = self.pending.hold(ctx.conversation_key, _caller(ctx), call, hold.confirm_seconds)
            confirm = f"confirm {pending.code}"
        ctx.held.append(HeldCall(call, hold, confirm))
        self._metrics.tool_calls.labels(call.server, "held").inc()
        then = " The user can confirm it; the gateway shows them how." if confirm else ""
        return f"error: the gateway did not run this call: {hold.reason}. Do not retry it.{then}"

    async def check_client_calls(self, ctx: PluginContext, calls: list[dict[str, Any]]) -> dict[str, str]:
        """Of the model's calls to the client's own tools (G7), the ones held: call id → the tool
        error the model reads (T3). The client's tools carry no annotations: side-effecting."""
        held: dict[str, str] = {}
        for raw in calls:
            name = raw["function"]["name"]
            text = raw["function"]["arguments"] or "{}"
            try:
                args = json.loads(text)
            except ValueError:
                args = None
            if not isinstance(args, dict):  # a lenient client may still parse it: judge the text itself
                args = {"arguments": text}
            call = ToolCall(name, "client", name, args, "side_effect", client=True)
            hold = await self.check_tool_call(ctx, call)
            if hold is not None:
                held[raw["id"]] = self.held(ctx, call, hold)
        return held

    async def confirmed(self, ctx: PluginContext, request: ChatRequest, said: ChatRequest) -> ChatRequest:
        """A user turn made only of `confirm <code>` phrases runs those held calls of this
        conversation and caller, and the model reads what they returned (T4). Unknown, expired
        or foreign codes run nothing and say so. The codes are read from what the client `said`
        (before prefetch and resources were appended); the results go into `request`."""
        messages = said.get("messages") or []
        last = messages[-1] if messages else None
        if ctx.conversation_key is None or not isinstance(last, dict) or last.get("role") != "user":
            return request
        codes = confirmation_codes(message_text(last.get("content")))
        blocks = []
        for code in dict.fromkeys(codes):
            pending = self.pending.take(ctx.conversation_key, _caller(ctx), code)
            if pending is None:
                blocks.append(ContextBlock(f"Confirmation {code}", "No held call has this code in this conversation "
                                           "(it was used, it expired, or it is not yours): nothing was run."))
                continue
            call = pending.call
            plugin = self._by_id.get(call.server)
            text = await self._run_confirmed(ctx, plugin, call) if plugin is not None else "the tool failed: its server is gone"
            shown = json.dumps(call.arguments, ensure_ascii=False)
            blocks.append(ContextBlock(f"Confirmed by the user: {call.exposed}", f"Arguments: {shown}\nResult:\n{text}"))
        return inject(request, blocks)

    async def _run_confirmed(self, ctx: PluginContext, plugin: Plugin, call: ToolCall) -> str:
        log.info("confirmed tool call runs", extra={"server": call.server, "tool": call.name, "request_id": ctx.request_id})
        result = await plugin.call_tool(ctx, call.name, call.arguments)
        self._metrics.tool_calls.labels(plugin.id, "confirmed").inc()
        return await self.inspect(ctx, InspectItem("tool_result", plugin.id, call.name, result.text))

    def answer_filters(self, ctx: PluginContext) -> list[AnswerFilter]:
        """The plugins' rewriters of a streamed answer (T5), in YAML order."""
        return [f for f in (plugin.answer_filter(ctx) for plugin in self.plugins) if f is not None]

    async def before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
        """Every plugin's `gather_context` at once (a slow server delays the request by the slowest
        call, across plugins too), then each `before_model` in YAML order."""
        with span("chain before_model", {"toolgate.route": self.route, "toolgate.plugins": len(self.plugins)}):
            return await self._before_model(ctx, request)

    async def _before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
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
            with span("plugin before_model", {"toolgate.plugin": plugin.id}):
                request = await plugin.before_model(ctx, request)
        return request

    async def after_model(self, ctx: PluginContext, request: ChatRequest, response: ChatResponse) -> ChatResponse:
        with span("chain after_model", {"toolgate.route": self.route, "toolgate.plugins": len(self.plugins)}):
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
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool.exposed, "toolgate.plugin": tool.plugin.id}
        with span(f"execute_tool {tool.exposed}", attributes):
            return await self._call_tool(ctx, tool, arguments)

    async def _call_tool(self, ctx: PluginContext, tool: GatewayTool, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            self._metrics.tool_calls.labels(tool.plugin.id, "invalid_arguments").inc()
            return f"error: the arguments for {tool.exposed} are not valid JSON"
        if not isinstance(args, dict):
            self._metrics.tool_calls.labels(tool.plugin.id, "invalid_arguments").inc()
            return f"error: the arguments for {tool.exposed} must be a JSON object"
        call = ToolCall(tool.exposed, tool.plugin.id, tool.spec.name, args, tool.spec.effect)
        hold = await self.check_tool_call(ctx, call)
        if hold is not None:
            return self.held(ctx, call, hold)
        result = await tool.plugin.call_tool(ctx, tool.spec.name, args)
        self._metrics.tool_calls.labels(tool.plugin.id, "error" if result.is_error else "ok").inc()
        return await self.inspect(ctx, InspectItem("tool_result", tool.plugin.id, tool.spec.name, result.text))
