"""The plugin interface (G2): a node with one `request` input and one `request` output.

Every hook passes its input through by default, so a plugin overrides only what it does.
Hook order for one request (see README "Plugin hooks"):

1. `gather_context(ctx, request)` of every plugin, concurrently (mcp_bridge: prefetch + resources),
   then `before_model(ctx, request)` for each plugin, in YAML order (mcp_bridge: inject them).
2. `tools(ctx)` of every plugin: the gateway tools offered to the model.
3. The tool loop: each gateway tool call goes to the owning plugin's `call_tool`, and its
   result passes every plugin's `inspect` before the model reads it.
4. `after_model(ctx, request, response)` for each plugin, in YAML order (non-streaming only).
5. `end_request(ctx)` for each plugin, always, even when the request failed.

A refusal is an exception (`GuardBlocked`), never a special return value.
"""

from __future__ import annotations

import builtins

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx2
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from gateway.errors import GuardBlocked  # noqa: F401  (re-exported for plugins)
from gateway.identity import Identity
from gateway.secrets import SecretSet

ChatRequest = dict[str, Any]
"""An OpenAI chat-completion request body (JSON edge); `messages` is always a list."""

ChatResponse = dict[str, Any]
"""An OpenAI `chat.completion` response body (JSON edge)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool a plugin offers the model, in the plugin's own naming."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call brought back, as the text the model will read."""

    text: str
    is_error: bool = False


InspectKind = Literal["tool_result", "prefetch", "resource", "client_message"]


@dataclass(frozen=True)
class InspectItem:
    """One piece of text about to reach the model, for the inspectors (P1, B11).

    `server` is the id of the plugin node it came from (or "client"); `source` is the tool
    name, the resource URI/name, or the message role.
    """

    kind: InspectKind
    server: str
    source: str
    text: str


Inspector = Callable[[InspectItem], Awaitable[None]]


@dataclass
class PluginContext:
    """Per-request facts a plugin may read. Tokens of B6 come from here."""

    identity: Identity
    conversation_key: str | None
    request_id: str
    """For correlating logs; it may come from the client's `X-Request-Id`, so it is not unique:
    never key per-request resources by it (use `state`)."""
    route: str
    deadline: float
    inspect: Inspector
    state: dict[str, Any] = field(default_factory=dict)
    """Scratch space per request; plugins key it by their own id."""


@dataclass(frozen=True)
class PluginEnv:
    """What the gateway hands a plugin at start-up."""

    http: httpx2.AsyncClient
    metrics: CollectorRegistry
    route: str
    base_dir: Path | None = None
    """Folder of the config file: relative `file:` secret references are read from here."""
    secrets: SecretSet | None = None
    """Resolve secrets into this set (`resolve_secret(ref, base_dir, secrets)`) so logs scrub them."""


@dataclass(frozen=True)
class PluginSpec:
    """How a plugin declares itself to the registry (gateway.registry): its `type` in the YAML,
    its pydantic config model (`extra="forbid"`, a `type: Literal[...]` field and an `id`; secret
    fields typed `SecretRef`), and a factory that imports the plugin's code only when a route
    uses it."""

    type: str
    config: builtins.type[BaseModel]  # `type` is the YAML key's name here, so the builtin is spelt out
    factory: Callable[[Any], "Plugin"]
    commands: Callable[[Any], None] | None = None
    """Adds the plugin's `toolgate` sub-commands to the CLI's sub-parsers (imported lazily)."""


class Plugin:
    """Base class: every hook passes its input through."""

    id: str = "plugin"
    max_tool_calls: int | None = None
    """Cap on consecutive gateway tool calls this plugin allows (B2); None = no opinion."""

    async def start(self, env: PluginEnv) -> None:
        """Open long-lived resources (connections, pools)."""

    async def stop(self) -> None:
        """Close what `start` opened."""

    async def gather_context(self, ctx: PluginContext, request: ChatRequest) -> None:
        """I/O that prepares `before_model` (e.g. prefetch, resource reads). The chain runs this
        hook of every plugin concurrently, before any `before_model` (B18); it must not change
        the request: keep what it fetched in `ctx.state`."""

    async def before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
        return request

    async def tools(self, ctx: PluginContext) -> list[ToolSpec]:
        return []

    async def call_tool(self, ctx: PluginContext, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(text=f"unknown tool {name!r}", is_error=True)

    async def inspect(self, ctx: PluginContext, item: InspectItem) -> None:
        """Raise `GuardBlocked` to refuse the request; return to allow."""

    async def after_model(
        self, ctx: PluginContext, request: ChatRequest, response: ChatResponse
    ) -> ChatResponse:
        return response

    async def end_request(self, ctx: PluginContext) -> None:
        """Release per-request resources (e.g. an unpooled MCP session, B15)."""
