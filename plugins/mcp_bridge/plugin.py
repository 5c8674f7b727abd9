"""The mcp_bridge plugin: one MCP server's tools, prefetched context and resources (B1–B19)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from gateway.injection import inject
from gateway.mcp.errors import describe
from gateway.mcp.pool import SessionPool
from gateway.mcp.target import McpClients, McpTarget
from gateway.plugins import ChatRequest, Plugin, PluginContext, PluginEnv, ToolResult, ToolSpec
from gateway.secrets import SecretSet, resolve_secret
from plugins.mcp_bridge.config import McpBridgeConfig
from plugins.mcp_bridge.content import tool_result_text
from plugins.mcp_bridge.effects import tool_effect
from plugins.mcp_bridge.metrics import BridgeMetrics
from plugins.mcp_bridge.operations import call_tool, list_tools
from plugins.mcp_bridge.prefetch import TOOL_FAILED, ContextGatherer

log = logging.getLogger("toolgate.mcp_bridge")


def secret_forms(secret: str) -> tuple[str, ...]:
    """The texts to redact for a header value: the value, and its credential without the scheme
    (`Bearer <token>` → `<token>`), which a server may echo on its own (B4)."""
    scheme, _, credential = secret.partition(" ")
    credential = credential.strip()
    if scheme and len(credential) >= 8:
        return (secret, credential)
    return (secret,)


class McpBridgePlugin(Plugin):
    """Offers one MCP server's tools to the model and injects its context, over pooled sessions."""

    def __init__(self, config: McpBridgeConfig) -> None:
        self.config = config
        self.id = config.id
        self.max_tool_calls = config.maxConsecutiveToolCalls
        self._allowed = frozenset(config.toolFilter)
        self._trusted = frozenset(config.trustedSources)
        self._secret: str | None = None
        self._redact: tuple[str, ...] = ()
        self._secrets: SecretSet | None = None
        self._clients: McpClients | None = None
        self._pool: SessionPool | None = None
        self._metrics: BridgeMetrics | None = None
        self._gatherer: ContextGatherer | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, env: PluginEnv) -> None:
        """Resolve the secret, open the shared HTTP client, start the pool and its metrics."""
        base_dir = env.base_dir
        self._secrets = env.secrets
        if self.config.authSecret is not None:
            self._secret = resolve_secret(self.config.authSecret, base_dir, env.secrets)
            self._redact = secret_forms(self._secret)
            if env.secrets is not None:
                for form in self._redact:
                    env.secrets.add(form)
        auth = (self.config.authHeaderName, self._secret) if self.config.authHeaderName and self._secret else None
        target = McpTarget(
            label=self.id,
            endpoint=self.config.endpoint,
            command=tuple(self.config.command) if self.config.command else None,
            cwd=base_dir,
            auth_header=auth,
            protocol=self.config.protocol,
            timeout=self.config.timeoutSeconds,
        )
        self._clients = McpClients(self.config.resultBytes)
        self._metrics = BridgeMetrics(env.metrics, self.id)
        self._pool = SessionPool(
            self._clients.factory(target),
            server=self.id,
            timeout=self.config.timeoutSeconds,
            idle_seconds=self.config.sessionIdleSeconds,
            metrics=self._metrics,
        )
        self._pool.start()
        self._gatherer = ContextGatherer(self.config, self._run, self.scrub, self._metrics.tool_call)

    async def stop(self) -> None:
        """Close every session (DELETE for session-ful servers), then the HTTP client."""
        if self._pool is not None:
            await self._pool.close()
        if self._clients is not None:
            await self._clients.close()

    @property
    def pool(self) -> SessionPool:
        """The session pool (started)."""
        if self._pool is None:
            raise RuntimeError(f"mcp_bridge {self.id!r} is not started")
        return self._pool

    def _request_token(self, ctx: PluginContext) -> str:
        """A token of this request alone, naming its unpooled session (B15).

        Not `ctx.request_id`: a client may choose that one (`X-Request-Id`), and two callers
        sending the same value must never share a session (G4).
        """
        token: str = ctx.state.setdefault(f"mcp_bridge:{self.id}:request", uuid.uuid4().hex)
        return token

    async def _run(self, ctx: PluginContext, operation: Any) -> Any:
        return await self.pool.run(ctx.conversation_key, self._request_token(ctx), operation)

    def scrub(self, text: str) -> str:
        """`text` without the auth secret (B4): a last line of defence for failure reasons and for
        whatever the server sends back (a server may echo the credential it was given)."""
        for form in self._redact:
            if form in text:
                text = text.replace(form, "[redacted]")
        # every secret the gateway holds, in its encoded forms too (base64, hex, URL-encoded, ...)
        return self._secrets.scrub(text) if self._secrets is not None else text

    def allows(self, name: str) -> bool:
        """Whether `toolFilter` grants `name` (an empty filter grants every tool) (B3)."""
        return not self._allowed or name in self._allowed

    # -- hooks -----------------------------------------------------------------------------

    async def gather_context(self, ctx: PluginContext, request: ChatRequest) -> None:
        """Prefetch and resources, concurrently and inspected; kept for `before_model` (B18)."""
        assert self._gatherer is not None
        ctx.state[f"mcp_bridge:{self.id}:blocks"] = await self._gatherer.gather(ctx, request)

    async def before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
        """The gathered blocks appended to the last user message (B12); gathered here when the
        chain did not call `gather_context` first."""
        assert self._gatherer is not None
        blocks = ctx.state.pop(f"mcp_bridge:{self.id}:blocks", None)
        if blocks is None:
            blocks = await self._gatherer.gather(ctx, request)
        return inject(request, blocks)

    async def tools(self, ctx: PluginContext) -> list[ToolSpec]:
        """The server's tools allowed by `toolFilter`; none when the server cannot be reached."""
        try:
            tools = await self._run(ctx, list_tools)
        except Exception as exc:
            log.warning("mcp_bridge %s: tools not listed: %s", self.id, self.scrub(describe(exc)))
            return []
        return [
            ToolSpec(name=t.name, description=t.description or "", parameters=dict(t.input_schema),
                     effect=tool_effect(t, self.config))
            for t in tools
            if self.allows(t.name)
        ]

    def trusts(self, source: str) -> bool:
        """The operator's `trustedSources` (T3)."""
        return source in self._trusted

    async def call_tool(self, ctx: PluginContext, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one tool call; failures become error results the model reads (B3, B13)."""
        assert self._metrics is not None
        if not self.allows(name):
            self._metrics.tool_call("refused")
            return ToolResult(text=f"{TOOL_FAILED}: tool {name!r} is not allowed on this server", is_error=True)
        try:
            result = await self._run(ctx, call_tool(name, arguments, self.config.timeoutSeconds))
        except Exception as exc:
            reason = self.scrub(describe(exc))
            log.warning("mcp_bridge %s: tool %s failed: %s", self.id, name, reason)
            self._metrics.tool_call("failed")
            return ToolResult(text=f"{TOOL_FAILED}: {reason}", is_error=True)
        text = self.scrub(tool_result_text(result))  # a server may echo the credential (B4)
        if result.is_error:
            self._metrics.tool_call("error")
            return ToolResult(text=f"{TOOL_FAILED}: {text}", is_error=True)
        self._metrics.tool_call("ok")
        return ToolResult(text=text)

    async def end_request(self, ctx: PluginContext) -> None:
        """Close the request's own session when it was not pooled (B15)."""
        token = ctx.state.get(f"mcp_bridge:{self.id}:request")
        if ctx.conversation_key is None and token is not None and self._pool is not None:
            await self._pool.release_request(token)
