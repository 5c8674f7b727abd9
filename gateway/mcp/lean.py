"""A tool call on an open HTTP session in one POST, without the SDK client's transport.

The SDK client sends a request through a dispatcher, two memory streams and a task per POST, and
reads the answer back the same way; for the relay's hot request (the Bridge's `tools/call` on a
caller's pooled session, issue 35) that machinery costs about half as much CPU again as the HTTP
exchange itself. A request on a Streamable HTTP session is one POST whose answer is a JSON body or
an event stream, so `lean_call` makes it directly:

- the same request: the session's own stamp (`_meta` envelope, `MCP-Protocol-Version`,
  `Mcp-Method`, `Mcp-Name`), the session's HTTP client (its pooled connections, the answer bound
  of bounds.py, the session watch, the draining of reuse.py), redirects only within the origin;
  to a plain-HTTP endpoint the POST goes on the session's lean HTTP/1.1 client under the same
  rules (lean_http.py);
- the same answer: the result checked against the protocol version and typed as the SDK does
  (`validate_server_result`, `CallToolResult`); a JSON-RPC error, a non-2xx status, a 202, an
  unfollowed redirect, an unexpected content type, an event stream that fails or ends early raise
  the `MCPError` the SDK's transport would (same code, same text);
- what arrives meanwhile on an event stream: progress to `progress`, every other notification to
  the session's own notification handling (log messages to its logging callback, then its message
  handler), as the SDK routes them;
- on a handshake-era (2025-11-25) session: its `Mcp-Session-Id` (as the server gave it, noted by the
  session watch), a request the server sends on the call's stream (sampling, elicitation, roots)
  answered through the session's own callbacks and POSTed back, a stream that ends early resumed
  with `Last-Event-ID` as the SDK does, and a 404 read as "Session terminated" (the pool replaces
  the session);
- a cancelled call closes its POST, which is how 2026-07-28 cancels; on a handshake-era session the
  server is also told (`notifications/cancelled`, "caller cancelled"), as the SDK does.

Stdio sessions keep the SDK's path (`operations.relay_tool_call`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp
import mcp_types as types
from httpx2 import EventSource
from mcp import MCPError
from mcp.client.session import _clamp_inbound_ttl, _later_revision_fields
from mcp.client.streamable_http import DEFAULT_RECONNECTION_DELAY_MS, MAX_RECONNECTION_ATTEMPTS, _unfollowed_redirect
from mcp.shared._httpx_utils import stream_within_origin
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, jsonrpc_message_adapter
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway.egress import EgressPolicy
from gateway.json_bytes import json_bytes, read_json
from gateway.mcp.lean_http import LeanPosts, drop

log = logging.getLogger("toolgate.mcp")

_ids = itertools.count(1)
_background: set[asyncio.Task[None]] = set()
NOTICE_SECONDS = 5.0
"""Longest a cancellation notice or an answer to the server's request may take (in the background)."""


@dataclass
class LeanHttp:
    """How a session's requests reach its server: its HTTP client, endpoint and event size bound;
    `egress`: the policy a guarded target's connections are checked by (None: not guarded).
    `posts`: the session's own lean HTTP/1.1 client for its calls to a plain-HTTP endpoint
    (lean_http.py; None: every request through `http`), closed with the session (`aclose`)."""

    http: httpx2.AsyncClient
    url: str
    max_event_bytes: int
    egress: EgressPolicy | None = None
    posts: LeanPosts | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if LeanPosts.serves(self.url):
            self.posts = LeanPosts(self.http, self.url, self.max_event_bytes, self.egress)

    async def aclose(self) -> None:
        if self.posts is not None:
            await self.posts.aclose()


def can_lean(client: mcp.Client, http: LeanHttp | None) -> bool:
    """Is this an open HTTP session (either generation)?"""
    return http is not None and client.session.protocol_version is not None


@dataclass
class _Exchange:
    """One request's exchange: where it goes and what the session needs on every message of it."""

    http: LeanHttp
    session: Any
    request_id: str
    headers: dict[str, str]
    progress: ProgressFnT | None
    modern: bool
    session_id: str | None

    async def post(self, message: dict[str, Any]) -> None:
        """POST a message of the session (an answer to the server's request, a notice), bounded."""
        body = json_bytes(message, ascii=True)
        async with asyncio.timeout(NOTICE_SECONDS):
            response = await self.http.http.post(self.http.url, content=body, headers=self.session_headers())
            await response.aclose()

    def session_headers(self) -> dict[str, str]:
        """The call's headers without its routing headers (`Mcp-Method`, `Mcp-Name`): those of the
        session's other messages about it (a notice, an answer, the resumption GET)."""
        return {key: value for key, value in self.headers.items() if key.lower() not in ("mcp-method", "mcp-name")}


def _error(code: int, message: str, data: Any = None) -> MCPError:
    return MCPError(code=code, message=message, data=data)


async def lean_call(
    client: mcp.Client, http: LeanHttp, name: str, arguments: dict[str, Any], progress: ProgressFnT | None = None,
    session_id: str | None = None,
) -> types.CallToolResult:
    """`tools/call` `name` on the session of `client` in one POST (see the module docstring);
    `session_id`: the session's `Mcp-Session-Id` (handshake era, when the server gave one)."""
    request_id = f"tg-{next(_ids)}"
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if progress is not None:
        params["_meta"] = {"progressToken": request_id}
    data: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    options: dict[str, Any] = {}
    session = client.session
    session._stamp(data, options)  # noqa: SLF001 - the session's own envelope and headers, exactly
    version = session.protocol_version or "2025-11-25"
    modern = version in MODERN_PROTOCOL_VERSIONS
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if not modern:
        if session_id is not None:
            headers["mcp-session-id"] = session_id
        headers[MCP_PROTOCOL_VERSION_HEADER] = version
    headers.update(options.get("headers", {}))
    exchange = _Exchange(http, session, request_id, headers, progress, modern, None if modern else session_id)
    body = json_bytes(data, ascii=True)
    try:
        async with _posted(http, body, headers) as response:
            raw = await _answer(exchange, response)
    except asyncio.CancelledError:
        if not modern:  # the server is told, as the SDK tells it (2026-07-28: closing the POST is the notice)
            _in_background(exchange.post({
                "jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id, "reason": "caller cancelled"},
            }))
        raise
    _clamp_inbound_ttl(raw)
    try:
        _methods.validate_server_result("tools/call", version, raw)
    except KeyError:
        pass
    if not (foreign := _later_revision_fields("tools/call", version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    return types.CallToolResult.model_validate(raw, by_name=False)


@asynccontextmanager
async def _posted(http: LeanHttp, body: bytes, headers: dict[str, str]) -> AsyncIterator[httpx2.Response]:
    """The answer to the call's POST: on the session's lean HTTP/1.1 client where it applies
    (lean_http.py), else on its `httpx2` client, redirects followed only within the origin."""
    response = await http.posts.post(body, headers) if http.posts is not None else None
    if response is None:
        async with stream_within_origin(http.http, "POST", http.url, content=body, headers=headers) as response:
            yield response
        return
    try:
        yield response
    except BaseException as exc:
        if not isinstance(exc, Exception):  # cancelled: the connection is dropped at once, not drained
            drop(response)
        raise
    finally:
        await response.aclose()


def _in_background(work: Any) -> None:
    task = asyncio.ensure_future(_quietly(work))
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _quietly(work: Any) -> None:
    try:
        await work
    except Exception as exc:  # a notice or an answer that could not be sent: the server times out as with the SDK
        log.debug("mcp: a message to the server was not sent: %s", type(exc).__name__)


async def _answer(exchange: _Exchange, response: httpx2.Response) -> dict[str, Any]:
    """The result of the request from its HTTP answer, or the `MCPError` the SDK's transport raises."""
    status = response.status_code
    if status == 202:
        raise _error(INVALID_REQUEST, "server answered a request with 202 Accepted")
    if (redirect := _unfollowed_redirect(response)) is not None:
        raise _error(INVALID_REQUEST, redirect)
    content_type = response.headers.get("content-type", "").lower()
    if status >= 400:
        if content_type.startswith("application/json"):
            try:
                message = read_json(await response.aread())
            except (httpx2.StreamError, ValueError):
                message = None
            if isinstance(message, dict) and isinstance(message.get("error"), dict) and "result" not in message:
                raise _rpc_error(message["error"])
        if status == 404:
            if exchange.session_id is None:  # no session: the method is unknown
                raise _error(METHOD_NOT_FOUND, "Not Found")
            raise _error(INVALID_REQUEST, "Session terminated")
        raise _error(INTERNAL_ERROR, "Server returned an error response")
    if content_type.startswith("application/json"):
        try:
            content = await _read(response)
        except httpx2.StreamError as exc:  # cut at the bound, or content-encoded (bounds.py): as the SDK reports it
            raise _error(PARSE_ERROR, f"Failed to parse JSON response: {exc}") from exc
        return _result(_message(content, "Failed to parse JSON response"), exchange.request_id)
    if not content_type.startswith("text/event-stream"):
        raise _error(INVALID_REQUEST, f"Unexpected content type: {content_type}")
    pending: set[asyncio.Task[None]] = set()
    try:
        return await _stream(exchange, response, pending)
    finally:
        for task in pending:  # answers to the server still being made when the call ended
            task.cancel()


async def _read(response: httpx2.Response) -> bytes:
    """`await response.aread()` for a JSON answer, without httpx2's three async generators over its
    stream (`aiter_bytes`, `aiter_raw` and the list they fill): with no content coding and no chunk
    size, its decoder and chunker pass the bytes through as they come. As `aread` does it: the stream
    marked consumed and read to its end, the response closed after (also when the read fails), a
    transport error given its request, the content kept on the response."""
    stream = response.stream
    if (
        response.is_stream_consumed or response.is_closed or not isinstance(stream, httpx2.AsyncByteStream)
        or any(coding.strip().lower() not in ("", "identity")
               for coding in response.headers.get_list("content-encoding", split_commas=True))
    ):
        return await response.aread()
    response.is_stream_consumed = True
    response._num_bytes_downloaded = 0  # noqa: SLF001 - counted as `aiter_raw` counts it
    parts: list[bytes] = []
    try:
        try:
            async for part in stream:
                response._num_bytes_downloaded += len(part)  # noqa: SLF001
                parts.append(part)
        finally:
            await response.aclose()
    except httpx2.RequestError as exc:
        exc.request = response.request
        raise
    content = b"".join(parts)
    response._content = content  # noqa: SLF001 - as `aread` keeps it
    return content


@dataclass
class _Position:
    """Where a call's event stream got to: the last event id and the server's retry interval."""

    last_event_id: str | None = None
    retry_ms: int | None = None


async def _stream(exchange: _Exchange, response: httpx2.Response, pending: set[asyncio.Task[None]]) -> dict[str, Any]:
    """Read the call's event stream (and, once it ends early, its resumptions) up to the answer, as
    the SDK's transport does: a failed stream fails the call, one that broke off is resumed with
    `Last-Event-ID` when its events had ids (handshake era), else the call ends without an answer."""
    position = _Position()
    found: dict[str, Any] | None = None
    try:
        found = await _read_events(exchange, response, pending, position)
    except MCPError:
        raise
    except Exception as exc:  # the stream broke off (the SDK logs it and resumes, or gives up)
        log.debug("mcp: a call's event stream ended: %s", type(exc).__name__)
    attempt = 0
    while found is None:
        if position.last_event_id is None or exchange.modern:
            raise _error(CONNECTION_CLOSED, "SSE stream ended without a response")
        if attempt >= MAX_RECONNECTION_ATTEMPTS:
            raise _error(CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")
        delay = position.retry_ms if position.retry_ms is not None else DEFAULT_RECONNECTION_DELAY_MS
        await asyncio.sleep(delay / 1000.0)
        headers = exchange.session_headers()
        headers["last-event-id"] = position.last_event_id
        before = position.last_event_id
        try:
            async with exchange.http.http.stream("GET", exchange.http.url, headers=headers) as resumed:
                kind = resumed.headers.get("content-type", "").lower()
                if resumed.status_code >= 400 or not kind.startswith("text/event-stream"):
                    attempt += 1
                    continue
                found = await _read_events(exchange, resumed, pending, position)
        except MCPError:
            raise
        except Exception as exc:
            log.debug("mcp: resuming a call's event stream failed: %s", type(exc).__name__)
            attempt += 1
            continue
        attempt = 0 if position.last_event_id != before else attempt + 1
    return found


async def _read_events(
    exchange: _Exchange, response: httpx2.Response, pending: set[asyncio.Task[None]], position: _Position
) -> dict[str, Any] | None:
    """`_events`, a malformed event stream failing the call as the SDK fails it."""
    try:
        return await _events(exchange, response, pending, position)
    except httpx2.SSEError as exc:
        raise _error(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from exc


async def _events(
    exchange: _Exchange, response: httpx2.Response, pending: set[asyncio.Task[None]], position: _Position
) -> dict[str, Any] | None:
    """The answer on one event stream, or None when the stream ended without it."""
    async for event in EventSource(response, max_event_size=exchange.http.max_event_bytes):
        if event.id:
            position.last_event_id = event.id
        if event.retry is not None:
            position.retry_ms = event.retry
        if event.event != "message" or not event.data:
            continue  # what the SDK skips too (priming events, other event types)
        message = _message(event.data, "Failed to parse SSE message")
        if "method" in message:
            if "id" not in message:
                await _notified(exchange.session, message, exchange.request_id, exchange.progress)
            elif not exchange.modern:  # the server's request (sampling, elicitation, roots): answered meanwhile
                task = asyncio.ensure_future(_serve_request(exchange, message))
                pending.add(task)
                task.add_done_callback(pending.discard)
            continue
        return _result(message, None)  # the answer on this stream is this request's, whatever its id
    return None


class _Inbound:
    """What the session's request handling reads of the server's request."""

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id


async def _serve_request(exchange: _Exchange, message: dict[str, Any]) -> None:
    """Answer a request the server sent on the call's stream through the session's own callbacks
    (the relay's), and POST the answer back on the session, as the SDK's dispatcher does."""
    request_id, method, params = message.get("id"), message.get("method"), message.get("params")
    if not isinstance(method, str) or not (params is None or isinstance(params, dict)):
        return
    try:
        result = await exchange.session._on_request(_Inbound(request_id), method, params)  # noqa: SLF001
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
    except Exception as exc:
        error = handler_exception_to_error_data(exc)
        if error is None:
            log.warning("mcp: answering the server's %s failed: %s", method, type(exc).__name__)
            error = types.ErrorData(code=0, message=str(exc))
        answer = {"jsonrpc": "2.0", "id": request_id, "error": error.model_dump(mode="json", by_alias=True, exclude_none=True)}
    await _quietly(exchange.post(answer))


def _message(data: str | bytes, failure: str) -> dict[str, Any]:
    """One JSON-RPC message; one the SDK could not read fails the call as it does (`failure`: its words)."""
    try:
        message = _parsed(data)
    except ValueError:
        message = None
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0" and _plain(message):
        return message
    try:  # the SDK's reading, for its verdict and its words
        parsed = jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError as exc:
        raise _error(PARSE_ERROR, f"{failure}: {exc}") from exc
    return parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _parsed(data: str | bytes) -> Any:
    """`data` as `json.loads` reads it (by orjson where it can, gateway/json_bytes.py)."""
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError:  # a lone surrogate: only json reads it
            return json.loads(data)
    return read_json(data)


def _plain(message: dict[str, Any]) -> bool:
    """A message whose reading needs no model: a notification, or a response with a result or an error."""
    if "method" in message:
        return isinstance(message["method"], str) and isinstance(message.get("params", {}), dict) and "id" not in message
    if "result" in message:
        return isinstance(message["result"], dict) and "error" not in message
    error = message.get("error")
    return isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)


def _rpc_error(error: dict[str, Any]) -> MCPError:
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, int) or not isinstance(message, str):
        return _error(PARSE_ERROR, "Failed to parse JSON response: malformed error")
    return _error(code, message, error.get("data"))


def _result(message: Any, request_id: str | None) -> dict[str, Any]:
    """The result of a response (`request_id`: the id it must carry, None: any), or its error."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise _error(PARSE_ERROR, "Failed to parse JSON response: not a JSON-RPC message")
    if request_id is not None and message.get("id") != request_id:
        raise _error(INVALID_REQUEST, "the server answered another request")
    if isinstance(message.get("error"), dict):
        raise _rpc_error(message["error"])
    result = message.get("result")
    if not isinstance(result, dict):
        raise _error(PARSE_ERROR, "Failed to parse JSON response: no result")
    return result


async def _notified(session: Any, message: dict[str, Any], request_id: str, progress: ProgressFnT | None) -> None:
    """A notification sent during the call: its progress to `progress`, the rest to the session."""
    method, params = message.get("method"), message.get("params")
    if not isinstance(method, str) or not (params is None or isinstance(params, dict)):
        return
    if method == "notifications/progress":
        if progress is not None and params is not None and params.get("progressToken") == request_id:
            value = params.get("progress")
            if isinstance(value, int | float) and not isinstance(value, bool):
                await progress(value, params.get("total"), params.get("message"))
        return
    await session._on_notify(None, method, params)  # noqa: SLF001 - the SDK's own typed routing and callbacks
