"""The plugin interface (G2): a node with one `request` input and one `request` output.

Every hook passes its input through by default, so a plugin overrides only what it does.
Hook order for one request (see docs/gateway.md, "Plugin hooks"):

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
from gateway.provenance import Provenance
from gateway.secrets import SecretSet

ChatRequest = dict[str, Any]
"""An OpenAI chat-completion request body (JSON edge); `messages` is always a list."""

ChatResponse = dict[str, Any]
"""An OpenAI `chat.completion` response body (JSON edge)."""


ToolEffect = Literal["read_only", "open_world", "side_effect", "destructive"]
"""What running a tool does (T2): `read_only` reads and reaches nothing outside its server;
`open_world` only reads but reaches the outside world (a URL fetch, a web search: the request
itself carries data out); `side_effect` changes something; `destructive` may overwrite or delete
(MCP's `destructiveHint`, true unless the server says false). A `ToolSpec` that says nothing is
`side_effect`; mcp_bridge maps a tool without annotations to `destructive` (MCP's defaults)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool a plugin offers the model, in the plugin's own naming."""

    name: str
    description: str
    parameters: dict[str, Any]
    effect: ToolEffect = "side_effect"


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made, before it runs (T3): a gateway tool (`server` is its plugin
    node) or one of the client's own tools (`client` true, server `client`), arguments parsed."""

    exposed: str
    server: str
    name: str
    arguments: dict[str, Any]
    effect: ToolEffect
    client: bool = False


@dataclass(frozen=True)
class Hold:
    """A plugin's decision not to run a call now (T3, T6). `reason` is what the model and the
    person read (argument names and source ids, never the untrusted text); `code` is the rule's id
    for logs and metrics; `confirm_seconds`, when set, lets the person confirm the call (T4)."""

    reason: str
    code: str
    confirm_seconds: float | None = None


@dataclass(frozen=True)
class HeldCall:
    """A call the firewall did not run in this request, as the response reports it."""

    call: ToolCall
    hold: Hold
    confirm: str | None = None
    """`confirm <code>`: the text the person sends to run it (T4); None when it cannot be confirmed."""


class AnswerFilter:
    """Rewrites the model's answer text as it streams (T5): `feed` returns what may be sent now,
    `flush` the rest at the end. The base filter passes everything through."""

    def feed(self, text: str) -> str:
        return text

    def flush(self) -> str:
        return ""


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


Inspector = Callable[[InspectItem], Awaitable[str | None]]
"""Inspects an item (raising `GuardBlocked` to refuse) and returns the text the model reads, which a
plugin may have wrapped (spotlighting, T6); None means the item's text as it is."""


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
    provenance: Provenance = field(default_factory=Provenance)
    """Every piece of the request's context, labelled trusted or untrusted (T1)."""
    held: list[HeldCall] = field(default_factory=list)
    """Calls the firewall did not run in this request (T3), reported with the answer."""


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
    commands: Callable[[Any, Callable[[str], Any]], None] | None = None
    """Adds the plugin's `toolgate` sub-commands to the CLI's sub-parsers (imported lazily). Called
    with the sub-parsers and the gateway's config loader (`gateway.config.load_config`: a path in,
    the validated config out, a ValueError listing the problems otherwise), so a plugin never
    imports gateway.config, which imports the plugins' specs."""


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

    def present(self, ctx: PluginContext, item: InspectItem, text: str) -> str:
        """The text the model reads for an inspected item (a tool result, prefetch result or
        resource): `text` as it is, or wrapped (spotlighting, T6)."""
        return text

    def trusts(self, source: str) -> bool:
        """Whether the operator trusts what this node's `source` (a tool, a resource) returns, like
        the client's own words (T3). Untrusted unless the node's config says so."""
        return False

    async def check_tool_call(self, ctx: PluginContext, call: ToolCall) -> Hold | None:
        """Before a call runs (a gateway tool) or goes back to the client (a client tool): None
        lets it run, a `Hold` stops it and the model reads the hold's reason as the result (T3)."""
        return None

    def answer_filter(self, ctx: PluginContext) -> AnswerFilter | None:
        """A rewriter of the streamed answer text (T5); `after_model` does the same for a whole
        answer. None: the plugin does not touch the answer."""
        return None

    async def after_model(
        self, ctx: PluginContext, request: ChatRequest, response: ChatResponse
    ) -> ChatResponse:
        return response

    async def end_request(self, ctx: PluginContext) -> None:
        """Release per-request resources (e.g. an unpooled MCP session, B15)."""
