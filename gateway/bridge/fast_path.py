"""The lean relay (issue 35): the hot 2026-07-28 requests on `/mcp` served without the SDK's server stack.

A 2026-07-28 request is one POST, one JSON-RPC request, one answer, no session. For the requests an
agent makes on every turn — `tools/call`, `tools/list`, `resources/read` and notifications — the
SDK's server path builds and re-validates pydantic models of the envelope, the params and the
result, runs the handler in a task group behind a memory stream, and answers through starlette:
about as much CPU as the call itself costs the tool server. `LeanRelay` answers them straight from
the decoded body instead, with the Bridge's own handlers (so every check stays where it is: the
audit, the scrubbing, the outbound slots, the answer bound, the names), and writes the answer as
the SDK would (the same JSON, the same status, the same headers).

It takes a request only when the SDK would serve it without complaint, checked on the raw values:
the transport's Host/Origin/Content-Type rules and `Accept`, no duplicated routing header, the
envelope ladder (`classify_inbound_request`), params of exactly the method's plain shape. Anything
else — a batch, an odd id, extra params, a cursor, a rejected envelope, every other method, every
session-ful (2025-11-25) request — goes to the SDK, which answers it as before.

What a connection sends during a call (progress, log messages) reaches the caller as the SDK's path
sends it: the answer stays `application/json` unless something is sent first, then becomes an event
stream; a call silent for `PING_SECONDS` commits to the event stream and is kept alive with
comments. A caller that goes away cancels its call (and so the upstream call), as on the SDK's path.
The SDK's request context (its `ServerSession`) is built only when a log message or progress needs
it (`LeanContext.session`); its middleware (the OpenTelemetry server span) wraps every call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server import Server
from mcp.server._streamable_http_modern import _SingleExchangeDispatchContext
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.runner import aclose_shielded, modern_error_data
from mcp.server.session import ServerSession
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import ListToolsResult, ReadResourceRequestParams
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.types import Receive, Send

from gateway.bridge.federation import CallerScope
from gateway.bridge.handlers import BridgeHandlers
from gateway.bridge.offerings import Offerings

log = logging.getLogger("toolgate.bridge.fast_path")

PING_SECONDS = 15.0
"""A call silent this long commits the answer to an event stream and is kept alive (as the SDK's path)."""

SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"

_PARAMS: dict[str, frozenset[str]] = {
    "tools/call": frozenset({"name", "arguments", "_meta"}),
    "tools/list": frozenset({"_meta"}),
    "resources/read": frozenset({"uri", "_meta"}),
}
"""The methods taken, and the params each may carry to be taken (anything more goes to the SDK)."""

_JSON = [(b"content-type", b"application/json")]
_SSE = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_PING = b": ping\r\n\r\n"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class _Answer:
    """The response of one request: JSON unless something is sent before the result."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.streaming = False
        self._lock = asyncio.Lock()

    async def event(self, frame: bytes) -> None:
        """Send one event-stream frame (committing the event stream first)."""
        async with self._lock:
            if not self.streaming:
                self.streaming = True
                await self._send({"type": "http.response.start", "status": 200, "headers": _SSE})
            await self._send({"type": "http.response.body", "body": frame, "more_body": True})

    async def finish(self, status: int, message: dict[str, Any]) -> None:
        body = _dumps(message)
        async with self._lock:
            if self.streaming:
                frame = b"event: message\r\ndata: " + body + b"\r\n\r\n"
                await self._send({"type": "http.response.body", "body": frame, "more_body": False})
                return
            headers = [*_JSON, (b"content-length", str(len(body)).encode())]
            await self._send({"type": "http.response.start", "status": status, "headers": headers})
            await self._send({"type": "http.response.body", "body": body, "more_body": False})


class _Sink:
    """The SDK dispatch context's notification sink: each notification an event of the answer."""

    def __init__(self, answer: _Answer) -> None:
        self._answer = answer

    async def send(self, frame: bytes) -> None:
        await self._answer.event(frame)


class LeanContext:
    """What the Bridge's handlers and relays read of a request (`Downstream`), without building the
    SDK's request context up front: `session` (the SDK's `ServerSession`, which sends log messages
    and progress on this request's answer, with the SDK's own rules) is made on first use."""

    def __init__(
        self, request: Request, request_id: str | int, method: str, params: dict[str, Any], version: str,
        envelope: tuple[Any, Any], answer: _Answer,
    ) -> None:
        self.request = request
        self.request_id = request_id
        self.method = method
        self.params = params
        self.protocol_version = version
        meta = params.get("_meta")
        self.meta: dict[str, Any] | None = meta if isinstance(meta, dict) else None
        self._envelope = envelope
        self._answer = answer
        self._session: ServerSession | None = None
        self.connection: Connection | None = None

    @property
    def session(self) -> ServerSession:
        if self._session is None:
            self.connection = Connection.from_envelope(self.protocol_version, *self._envelope)
            dctx = _SingleExchangeDispatchContext(
                transport=TransportContext(kind="streamable-http", can_send_request=False, headers=self.request.headers),
                request_id=self.request_id,
                message_metadata=ServerMessageMetadata(request_context=self.request),
                progress_token=progress_token_from_params(self.params),
                sink=_Sink(self._answer),  # type: ignore[arg-type]  # duck-typed: `send(bytes)`
            )
            self._session = ServerSession(dctx, self.connection, request_meta=self.meta)  # type: ignore[arg-type]
        return self._session

    def sdk_context(self) -> ServerRequestContext[Any, Any]:
        """The SDK's request context, for what needs the real thing (offerings' reads)."""
        return ServerRequestContext(
            session=self.session, lifespan_context=None, method=self.method, params=self.params,
            request_id=self.request_id, meta=self.meta, protocol_version=self.protocol_version,  # type: ignore[arg-type]
            request=self.request,
        )

    async def close(self) -> None:
        if self.connection is not None:
            await aclose_shielded(self.connection)


class LeanRelay:
    """Serves the hot 2026-07-28 requests of `/mcp` and `/mcp/<bridge>` (see the module docstring)."""

    def __init__(self, handlers: BridgeHandlers, offerings: Offerings, server: Server[Any]) -> None:
        self._handlers = handlers
        self._offerings = offerings
        self._server = server
        self._stamp: dict[str, Any] | None = None
        """The server-info stamp, dumped once: the SDK hands out a deep copy per answer in case the
        caller mutates it; an answer here is written as soon as it is made and never changed."""
        self._security: tuple[TransportSecuritySettings | None, TransportSecurityMiddleware] | None = None
        self.served = 0
        """Requests answered here (the rest went to the SDK)."""

    def _middleware(self, settings: TransportSecuritySettings | None) -> TransportSecurityMiddleware:
        kept = self._security
        if kept is None or kept[0] is not settings:
            kept = self._security = (settings, TransportSecurityMiddleware(settings))
        return kept[1]

    async def serve(
        self, caller: CallerScope, request: Request, body: bytes, security: TransportSecuritySettings | None,
        receive: Receive, send: Send,
    ) -> bool:
        """Answer the request and return True, or return False (nothing sent) for the SDK to answer it."""
        headers = request.headers
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version not in MODERN_PROTOCOL_VERSIONS or request.method != "POST":
            return False
        if await self._middleware(security).validate_request(request, is_post=True) is not None:
            return False
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):
            return False
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return False
        if not isinstance(decoded, dict) or decoded.get("jsonrpc") != "2.0":
            return False
        method = decoded.get("method")
        if "id" not in decoded:
            return await self._notification(decoded, method, send)
        allowed = _PARAMS.get(method) if isinstance(method, str) else None
        request_id = decoded["id"]
        params = decoded.get("params", {})
        if (
            allowed is None or not _is_id(request_id) or set(decoded) - {"jsonrpc", "id", "method", "params"}
            or not isinstance(params, dict) or not set(params) <= allowed or not isinstance(params.get("_meta"), dict)
        ):
            return False
        if find_duplicated_routing_header(headers.items()) is not None:
            return False
        verdict = classify_inbound_request(decoded, headers=_first_values(headers.raw))
        if isinstance(verdict, InboundLadderRejection) or verdict.protocol_version != version:
            return False
        call = self._call(caller, method, params)
        if call is None:
            return False
        self.served += 1
        answer = _Answer(send)
        ctx = LeanContext(
            request, request_id, method, params, version, (verdict.client_info, verdict.client_capabilities), answer
        )
        await self._answer(ctx, call, answer, receive)
        return True

    async def _notification(self, decoded: dict[str, Any], method: Any, send: Send) -> bool:
        """A client notification: acknowledged and dropped, as the SDK's path does (202)."""
        params = decoded.get("params")
        if (
            not isinstance(method, str) or set(decoded) - {"jsonrpc", "method", "params"}
            or not (params is None or isinstance(params, dict))
        ):
            return False
        self.served += 1
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    def _call(
        self, caller: CallerScope, method: str, params: dict[str, Any]
    ) -> Callable[[LeanContext], Awaitable[BaseModel]] | None:
        """The handler call for a request of the plain shape (None: not plain, the SDK answers)."""
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
                return None
            return lambda ctx: self._handlers.call_tool(caller, name, arguments, ctx)  # type: ignore[arg-type]
        if method == "tools/list":
            return lambda ctx: self._list_tools(caller)
        if method == "resources/read":
            try:
                uri = str(ReadResourceRequestParams.model_validate(params, by_name=False).uri)
            except ValidationError:
                return None
            return lambda ctx: self._offerings.read(caller, uri, ctx.sdk_context())
        return None

    async def _list_tools(self, caller: CallerScope) -> BaseModel:
        return ListToolsResult(tools=await self._handlers.list_tools(caller))

    async def _answer(
        self, ctx: LeanContext, call: Callable[[LeanContext], Awaitable[BaseModel]], answer: _Answer, receive: Receive
    ) -> None:
        """Run the call beside a watch for the caller leaving; answer its result or its error."""
        work = asyncio.ensure_future(self._result(ctx, call))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            while True:
                done, _ = await asyncio.wait({work, gone}, timeout=PING_SECONDS, return_when=asyncio.FIRST_COMPLETED)
                if work in done:
                    break
                if gone in done:  # the caller left: its call is cancelled (and with it the upstream call)
                    work.cancel()
                    await asyncio.wait({work})
                    return
                await answer.event(_PING)
            status, message = work.result()
            await answer.finish(status, message)
        finally:
            gone.cancel()
            if not work.done():  # e.g. the keep-alive ping failed: the caller left mid-write
                work.cancel()
                await asyncio.wait({work})  # the call (and its upstream call) ends before the context closes
            await ctx.close()

    async def _result(self, ctx: LeanContext, call: Callable[[LeanContext], Awaitable[BaseModel]]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON-RPC answer) of the call, shaped for the wire as the SDK's runner does."""
        try:
            wired = await self._through_middleware(ctx, call)
        except Exception as exc:
            error = modern_error_data(exc)
            return (
                ERROR_CODE_HTTP_STATUS.get(error.code, 200),
                {"jsonrpc": "2.0", "id": ctx.request_id, "error": error.model_dump(mode="json", by_alias=True, exclude_none=True)},
            )
        return 200, {"jsonrpc": "2.0", "id": ctx.request_id, "result": wired}

    async def _through_middleware(self, ctx: LeanContext, call: Callable[[LeanContext], Awaitable[BaseModel]]) -> dict[str, Any]:
        """The call inside the SDK server's middleware (its OpenTelemetry span), its result for the wire."""

        async def inner(context: Any) -> dict[str, Any]:
            return self._wire(ctx, await call(ctx))

        chain: Callable[[Any], Awaitable[Any]] = inner
        for middleware in reversed(self._server.middleware):
            chain = _bind(middleware, chain)
        return await chain(ctx)

    def _wire(self, ctx: LeanContext, result: BaseModel) -> dict[str, Any]:
        """The result as the SDK's runner shapes it: the per-version surface, `resultType`, the
        server-info stamp (`ServerRunner._serialize`)."""
        dumped = serialize_server_result(
            ctx.method, ctx.protocol_version, result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {SERVER_INFO_META_KEY: self._server_info_stamp()}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self._server_info_stamp()}
        return dumped

    def _server_info_stamp(self) -> dict[str, Any]:
        if self._stamp is None:
            self._stamp = self._server.server_info_stamp
        return self._stamp


def _first_values(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers as `dict(request.headers)` gives them (a repeated name: its first value),
    without its lookup per name through the whole list."""
    flat: dict[str, str] = {}
    for name, value in raw:
        flat.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return flat


def _bind(middleware: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    async def chained(ctx: Any) -> Any:
        return await middleware(ctx, call_next)

    return chained


async def _disconnected(receive: Receive) -> None:
    """Return once the caller has gone (the body was read already)."""
    while (await receive()).get("type") != "http.disconnect":
        pass

