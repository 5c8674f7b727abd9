"""The Bridge's MCP endpoint: `/mcp` and `/mcp/{bridge_id}` over Streamable HTTP (F1, F2).

One low-level SDK `Server` whose tool list is computed per request from the caller and the bridge
in the URL, and one session manager that serves session-ful clients (2025-11-25 handshake) and
stateless 2026-07-28 requests alike. In front of it, `McpEndpoint` authenticates every HTTP
message, resolves the bridge (another account's bridge is not found), and binds each session to
the caller and the bridge it was opened on: the SDK alone would accept a session id on any path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
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
from gateway.bridge.api_support import MAX_BODY_BYTES
from gateway.bridge.audit_args import Scrub
from gateway.bridge.federation import CallerScope, owners_of
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.sessions import Binding, SessionTable, TooManyOpening, caller_key
from gateway.bridge.store import BridgeStore
from gateway.errors import GatewayError, NotFound, Unavailable, error_response
from gateway.identity import Identity

log = logging.getLogger("toolgate.bridge.endpoint")

SCOPE_KEY = "toolgate.bridge.caller"

Authenticate = Callable[[Request], Awaitable[Identity]]


def build_server(handlers: BridgeHandlers) -> Server[Any]:
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
        return await handlers.call_tool(caller(ctx), params.name, params.arguments)

    return Server(
        "toolgate-bridge",
        version="0.1.0",
        instructions="Tools of your MCP connections (<connectionId>__<tool>) and, per bridge, its pipelines.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # The 2026-07-28 path would otherwise re-run tools/list (every connection) to validate Mcp-Param headers.
        get_tool_input_schema=lambda name: None,
    )


def build_manager(server: Server[Any], allowed_hosts: list[str], max_sessions: int = 10_000) -> StreamableHTTPSessionManager:
    """A session-ful manager (stateless 2026-07-28 requests are served by it too)."""
    origins = [f"{scheme}://{host}" for host in allowed_hosts for scheme in ("http", "https")]
    security = (
        TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=origins)
        if allowed_hosts
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    return StreamableHTTPSessionManager(
        server, security_settings=security, session_idle_timeout=1800, max_sessions=max_sessions
    )


def _binding(identity: Identity, bridge_id: str | None) -> Binding:
    """Who a session belongs to: the caller (`caller_key`) and the bridge it was opened on."""
    return (*caller_key(identity), bridge_id)


class McpEndpoint:
    """ASGI app for `/mcp` and `/mcp/{bridge_id}`: auth, bridge scoping, session binding, then the SDK."""

    def __init__(
        self, store: BridgeStore, authenticate: Authenticate, *, scrub: Scrub, limits: BridgeLimits | None = None
    ) -> None:
        self._scrub = scrub
        self.manager: StreamableHTTPSessionManager | None = None
        """Set by the service while it runs (a manager runs once, so each start makes a new one)."""
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
            caller = await self._caller(identity, scope.get("path_params", {}).get("bridge_id"))
        except GatewayError as exc:
            await error_response(exc, self._scrub)(scope, receive, send)
            return
        if request.method == "POST":  # read here, bounded in size and time (the SDK would answer a slow body with 500)
            try:
                receive = _replay(await read_body(request, MAX_BODY_BYTES), receive)
            except GatewayError as exc:
                await error_response(exc, self._scrub)(scope, receive, send)
                return
        binding = _binding(identity, caller.bridge.id if caller.bridge else None)
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        scope[SCOPE_KEY] = caller
        if session_id is not None:
            # Every session is minted through here, so an id we do not hold is foreign, expired or forgotten.
            if self._sessions.owner(session_id) != binding:
                log.warning("session %s refused: opened by another caller or on another bridge", session_id[:16])
                await _json(send, 404, _rpc_error(-32600, "Session not found"))
                return
            self._sessions.touch(session_id)
            await manager.handle_request(scope, receive, self._watch(send, session_id, binding, request.method, []))
            return
        try:
            self._sessions.begin_open(binding)
        except TooManyOpening:
            await _json(send, 429, _rpc_error(-32000, "too many sessions being opened by this caller; retry later"))
            return
        minted: list[str] = []
        try:
            await manager.handle_request(scope, receive, self._watch(send, None, binding, request.method, minted))
        finally:
            alive = _alive_in(manager)
            evicted = self._sessions.end_open(binding, minted[0] if minted else None, alive)
            if len(self._sessions) > self._limits.sessions:
                self._sessions.prune(alive)
            for old in evicted:  # the caller's own least recently used sessions, beyond its cap
                await _close_session(manager, old)

    async def _caller(self, identity: Identity, bridge_id: str | None) -> CallerScope:
        owners = owners_of(identity)
        if bridge_id is None:
            return CallerScope(identity, owners)
        bridge = await self._store.get_bridge(bridge_id)
        if bridge is None or bridge.owner not in owners:
            raise NotFound(f"bridge {bridge_id} not found")
        return CallerScope(identity, owners, bridge)

    def _watch(self, send: Send, session_id: str | None, binding: Binding, method: str, minted: list[str]) -> Send:
        """Bind a session the SDK mints (noted in `minted`) as its response starts; forget a session
        its client deletes."""

        async def watched(message: Message) -> None:
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
