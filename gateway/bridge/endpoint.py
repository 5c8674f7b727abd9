"""The Bridge's MCP endpoint: `/mcp` and `/mcp/{bridge_id}` over Streamable HTTP (F1, F2).

One low-level SDK `Server` whose tool list is computed per request from the caller and the bridge
in the URL, and one session manager that serves session-ful clients (2025-11-25 handshake) and
stateless 2026-07-28 requests alike. In front of it, `McpEndpoint` authenticates every HTTP
message, resolves the bridge (another account's bridge is not found), and binds each session to
the caller and the bridge it was opened on: the SDK alone would accept a session id on any path.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from gateway.api.body import read_body
from gateway.bridge.api_support import MAX_BODY_BYTES, addressed, visible_bridge
from gateway.bridge.audit_args import Scrub
from gateway.bridge.fast_path import LeanRelay
from gateway.bridge.federation import CallerScope, owners_of
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.offerings import Offerings
from gateway.bridge.records import ItemKey
from gateway.bridge.sessions import Binding, SessionTable, TooManyOpening, caller_key
from gateway.bridge.store import BridgeStore
from gateway.errors import GatewayError, PayloadTooLarge, Unavailable, error_response
from gateway.identity import Identity

log = logging.getLogger("toolgate.bridge.endpoint")

SCOPE_KEY = "toolgate.bridge.caller"

Authenticate = Callable[[Request], Awaitable[Identity]]


ANNOUNCED: ContextVar[frozenset[str] | None] = ContextVar("toolgate_bridge_announced", default=None)
"""The capability kinds the caller of the current HTTP message may be announced (F13)."""


class BridgeServer(Server[Any]):
    """The SDK server announcing, per caller, only what the caller's connections have (F13)."""

    lean: LeanRelay | None = None
    """The lean relay serving this server's hot 2026-07-28 requests without the SDK (fast_path.py)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        announced = ANNOUNCED.get()
        if announced is None:
            return capabilities
        absent = {kind: None for kind in ("resources", "prompts", "completions", "logging") if kind not in announced}
        return capabilities.model_copy(update=absent)


def build_server(handlers: BridgeHandlers, offerings: Offerings) -> Server[Any]:
    """The SDK server whose handlers read the caller scope the endpoint put on the HTTP request."""

    def caller(ctx: ServerRequestContext[Any]) -> CallerScope:
        request = ctx.request
        scope = request.scope.get(SCOPE_KEY) if isinstance(request, Request) else None
        if not isinstance(scope, CallerScope):
            raise RuntimeError("Bridge request without a caller scope")
        return scope

    async def on_list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await handlers.list_tools(caller(ctx)))

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await handlers.call_tool(caller(ctx), params.name, params.arguments, ctx)

    async def on_list_resources(ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await offerings.resources(caller(ctx)))

    async def on_list_resource_templates(ctx: ServerRequestContext[Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=await offerings.templates(caller(ctx)))

    async def on_read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await offerings.read(caller(ctx), str(params.uri), ctx)

    async def on_list_prompts(ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=await offerings.prompts(caller(ctx)))

    async def on_get_prompt(ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return await offerings.get_prompt(caller(ctx), params.name, params.arguments, ctx)

    async def on_completion(ctx: ServerRequestContext[Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        return await offerings.complete(caller(ctx), params, ctx)

    async def on_set_logging_level(ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        return await offerings.set_level(caller(ctx), params.level)

    async def on_subscribe_resource(ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        return await offerings.subscribe(caller(ctx), str(params.uri), True, ctx)

    async def on_unsubscribe_resource(ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        return await offerings.subscribe(caller(ctx), str(params.uri), False, ctx)

    with warnings.catch_warnings():  # logging and subscriptions are deprecated as of 2026-07-28, still relayed before
        warnings.simplefilter("ignore")
        server = BridgeServer(
            "toolgate-bridge",
            version="0.1.0",
            instructions="Tools, resources and prompts of your MCP connections (<prefix>__<name>) and, per bridge, its pipelines.",
            # The 2026-07-28 path would otherwise re-run tools/list (every connection) to validate Mcp-Param headers.
            get_tool_input_schema=lambda name: None,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
            on_list_resources=on_list_resources,
            on_list_resource_templates=on_list_resource_templates,
            on_read_resource=on_read_resource,
            on_list_prompts=on_list_prompts,
            on_get_prompt=on_get_prompt,
            on_completion=on_completion,
            on_set_logging_level=on_set_logging_level,
            on_subscribe_resource=on_subscribe_resource,
            on_unsubscribe_resource=on_unsubscribe_resource,
        )
    server.lean = LeanRelay(handlers, offerings, server)
    return server


def with_bare_hosts(allowed_hosts: list[str]) -> list[str]:
    """`host:*` admits any port, so also the Host header without one (`Host: localhost`, default port)."""
    hosts = list(allowed_hosts)
    for host in allowed_hosts:
        if host.endswith(":*") and host[:-2] not in hosts:
            hosts.append(host[:-2])
    return hosts


def build_manager(server: Server[Any], allowed_hosts: list[str], max_sessions: int = 10_000) -> StreamableHTTPSessionManager:
    """A session-ful manager (stateless 2026-07-28 requests are served by it too)."""
    allowed_hosts = with_bare_hosts(allowed_hosts)
    origins = [f"{scheme}://{host}" for host in allowed_hosts for scheme in ("http", "https")]
    security = (
        TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=origins)
        if allowed_hosts
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    return StreamableHTTPSessionManager(
        server, security_settings=security, session_idle_timeout=1800, max_sessions=max_sessions
    )


def _binding(identity: Identity, bridge: ItemKey | None) -> Binding:
    """Who a session belongs to: the caller (`caller_key`) and the bridge it was opened on, by
    (owner, id): should the id the caller typed name another bridge later (tenancy.py), the
    session is not that bridge's."""
    return (*caller_key(identity), bridge)


class McpEndpoint:
    """ASGI app for `/mcp` and `/mcp/{bridge_id}`: auth, bridge scoping, session binding, then the SDK."""

    def __init__(
        self, store: BridgeStore, authenticate: Authenticate, offerings: Offerings, *, scrub: Scrub,
        limits: BridgeLimits | None = None,
    ) -> None:
        self._scrub = scrub
        self.manager: StreamableHTTPSessionManager | None = None
        """Set by the service while it runs (a manager runs once, so each start makes a new one)."""
        self._offerings = offerings
        self._store = store
        self._authenticate = authenticate
        self._limits = limits or BridgeLimits()
        self._sessions = SessionTable(self._limits.sessionsPerCaller)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.manager
        if manager is None:
            await error_response(Unavailable("the Bridge is not running"), self._scrub)(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            identity = await self._authenticate(request)
            caller = await self._caller(identity, request, scope.get("path_params", {}).get("bridge_id"))
        except GatewayError as exc:
            await error_response(exc, self._scrub)(scope, receive, send)
            return
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if request.method == "POST":  # read here, bounded in size and time (the SDK would answer a slow body with 500)
            try:
                body = await read_body(request, MAX_BODY_BYTES)
            except PayloadTooLarge:  # a JSON-RPC error, like the SDK's own 413 (`_watch`)
                await _json(send, 413, _too_large())
                return
            except GatewayError as exc:
                await error_response(exc, self._scrub)(scope, receive, send)
                return
            lean = getattr(manager.app, "lean", None)
            if session_id is None and isinstance(lean, LeanRelay):  # the hot 2026-07-28 requests (issue 35)
                scope[SCOPE_KEY] = caller
                if await lean.serve(caller, request, body, manager.security_settings, receive, send):
                    return
            receive = _replay(body, receive)
        binding = _binding(identity, caller.bridge.key if caller.bridge else None)
        if session_id is not None:
            # Every session is minted through here, so an id we do not hold is foreign, expired or forgotten.
            owner = self._sessions.owner(session_id)
            if owner != binding:
                if owner is not None:
                    log.warning("session %s refused: opened by another caller or on another bridge", session_id[:16])
                else:
                    log.info("session %s refused: unknown here (ended, deleted, expired, or opened on another replica)",
                             session_id[:16])
                await _json(send, 404, _rpc_error(-32600, "Session not found"))
                return
            self._sessions.touch(session_id)
            if identity.is_anonymous and identity.credential_fp is None:
                caller = dataclasses.replace(caller, downstream_session=session_id)  # auth off: callers by session
            scope[SCOPE_KEY] = caller
            await manager.handle_request(scope, receive, self._watch(send, session_id, binding, request.method, []))
            return
        scope[SCOPE_KEY] = caller
        try:
            self._sessions.begin_open(binding)
        except TooManyOpening:
            await _json(send, 429, _rpc_error(-32000, "too many sessions being opened by this caller; retry later"))
            return
        minted: list[str] = []
        try:
            if request.method == "POST":  # may open a session or discover: capabilities
                try:
                    ANNOUNCED.set(await self._offerings.capabilities(caller))
                except Exception as exc:  # the handlers will meet the same failure and answer it; announce all
                    log.warning("capabilities of %s not computed: %s", caller.name, type(exc).__name__)
            await manager.handle_request(scope, receive, self._watch(send, None, binding, request.method, minted))
        finally:
            alive = _alive_in(manager)
            evicted = self._sessions.end_open(binding, minted[0] if minted else None, alive)
            if len(self._sessions) > self._limits.sessions:
                self._sessions.prune(alive)
            for old in evicted:  # the caller's own least recently used sessions, beyond its cap
                await _close_session(manager, old)

    def session_alive(self, session_id: str) -> bool:
        """Does the caller's Bridge session still exist (not deleted, evicted or expired)?"""
        manager = self.manager
        return manager is not None and _alive_in(manager)(session_id)

    async def _caller(self, identity: Identity, request: Request, bridge_id: str | None) -> CallerScope:
        owners = owners_of(identity)
        if bridge_id is None:
            return CallerScope(identity, owners)
        bridge = await visible_bridge(self._store, addressed(request, owners), bridge_id)  # ?owner= as on the REST API
        return CallerScope(identity, owners, bridge)

    def _watch(self, send: Send, session_id: str | None, binding: Binding, method: str, minted: list[str]) -> Send:
        """Bind a session the SDK mints (noted in `minted`) as its response starts; forget a session
        its client deletes. A body the SDK refuses as too large (413, plain text) is answered as a
        JSON-RPC error instead."""
        too_large = False

        async def watched(message: Message) -> None:
            nonlocal too_large
            if message["type"] == "http.response.start" and message["status"] == 413:
                too_large = True
                return
            if too_large:
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    await _json(send, 413, _too_large())
                return
            if message["type"] == "http.response.start":
                if session_id is None:
                    for key, value in message.get("headers", []):
                        if key.decode("latin-1").lower() == MCP_SESSION_ID_HEADER:
                            minted.append(value.decode("latin-1"))
                            self._sessions.bind(minted[-1], binding)
                elif method == "DELETE" and message["status"] < 300:
                    self._sessions.forget(session_id)
            await send(message)

        return watched


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over the body already read, then waits on the client as before."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def _rpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def _too_large() -> dict[str, Any]:
    return _rpc_error(-32600, f"Request body too large (over {MAX_BODY_BYTES // (1024 * 1024)} MiB)")


def _alive_in(manager: StreamableHTTPSessionManager) -> Callable[[str], bool]:
    """Does the SDK still hold a session? (It expires idle sessions itself; the SDK has no public
    accessor, so its table is read, and everything counts as alive should that ever change.)"""
    instances = getattr(manager, "_server_instances", None)
    return (lambda session_id: session_id in instances) if isinstance(instances, dict) else (lambda session_id: True)


async def _close_session(manager: StreamableHTTPSessionManager, session_id: str) -> None:
    """End a session in the SDK (its transport terminated, its id answers 404 from now on)."""
    instances = getattr(manager, "_server_instances", None)
    transport = instances.get(session_id) if isinstance(instances, dict) else None
    discard = getattr(manager, "_discard_session", None)
    if transport is not None and discard is not None:
        await discard(session_id, transport)
    log.info("session %s closed: its caller opened more than its limit", session_id[:16])


async def _json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})
