"""A tool call on an open 2026-07-28 HTTP session in one POST, without the SDK client's transport.

The SDK client sends a request through a dispatcher, two memory streams and a task per POST, and
reads the answer back the same way; for the relay's hot request (the Bridge's `tools/call` on a
caller's pooled session, issue 35) that machinery costs about half as much CPU again as the HTTP
exchange itself. On a 2026-07-28 session a request is self-contained — one POST, one answer, no
session id, no server-to-client requests, no resumption — so `lean_call` makes it directly:

- the same request: the session's own stamp (`_meta` envelope, `MCP-Protocol-Version`,
  `Mcp-Method`, `Mcp-Name`), the session's HTTP client (its pooled connections, the answer bound
  of bounds.py, the session watch, the draining of reuse.py), redirects only within the origin;
- the same answer: the result checked against the protocol version and typed as the SDK does
  (`validate_server_result`, `CallToolResult`); a JSON-RPC error, a non-2xx status, a 202, an
  unfollowed redirect, an unexpected content type, an event stream that fails or ends early raise
  the `MCPError` the SDK's transport would (same code, same text);
- what arrives meanwhile on an event stream: progress to `progress`, every other notification to
  the session's own notification handling (log messages to its logging callback, then its message
  handler), as the SDK routes them;
- a cancelled call closes its POST, which is how 2026-07-28 cancels.

Anything else (a handshake-era session, stdio) keeps the SDK's path (`operations.relay_tool_call`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp
import mcp_types as types
from httpx2 import EventSource
from mcp import MCPError
from mcp.client.session import _clamp_inbound_ttl, _later_revision_fields
from mcp.client.streamable_http import _unfollowed_redirect
from mcp.shared._httpx_utils import stream_within_origin
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, jsonrpc_message_adapter
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

_ids = itertools.count(1)


@dataclass(frozen=True)
class LeanHttp:
    """How a session's requests reach its server: its HTTP client, endpoint and event size bound."""

    http: httpx2.AsyncClient
    url: str
    max_event_bytes: int


def can_lean(client: mcp.Client, http: LeanHttp | None) -> bool:
    """Is this an HTTP session of the 2026-07-28 generation (one POST per request)?"""
    return http is not None and client.session.protocol_version in MODERN_PROTOCOL_VERSIONS


def _error(code: int, message: str, data: Any = None) -> MCPError:
    return MCPError(code=code, message=message, data=data)


async def lean_call(
    client: mcp.Client, http: LeanHttp, name: str, arguments: dict[str, Any], progress: ProgressFnT | None = None
) -> types.CallToolResult:
    """`tools/call` `name` on the session of `client` in one POST (see the module docstring)."""
    request_id = f"tg-{next(_ids)}"
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if progress is not None:
        params["_meta"] = {"progressToken": request_id}
    data: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    options: dict[str, Any] = {}
    session = client.session
    session._stamp(data, options)  # noqa: SLF001 - the session's own envelope and headers, exactly
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json", **options.get("headers", {})}
    body = json.dumps(data, separators=(",", ":")).encode()
    async with stream_within_origin(http.http, "POST", http.url, content=body, headers=headers) as response:
        raw = await _answer(session, response, request_id, http.max_event_bytes, progress)
    version = session.protocol_version or "2025-11-25"
    _clamp_inbound_ttl(raw)
    try:
        _methods.validate_server_result("tools/call", version, raw)
    except KeyError:
        pass
    if not (foreign := _later_revision_fields("tools/call", version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    return types.CallToolResult.model_validate(raw, by_name=False)


async def _answer(
    session: Any, response: httpx2.Response, request_id: str, max_event_bytes: int, progress: ProgressFnT | None
) -> dict[str, Any]:
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
                message = json.loads(await response.aread())
            except (httpx2.StreamError, ValueError):
                message = None
            if isinstance(message, dict) and isinstance(message.get("error"), dict) and "result" not in message:
                raise _rpc_error(message["error"])
        if status == 404:
            raise _error(METHOD_NOT_FOUND, "Not Found")  # no session id on this generation: the method is unknown
        raise _error(INTERNAL_ERROR, "Server returned an error response")
    if content_type.startswith("application/json"):
        return _result(_message(await response.aread(), "Failed to parse JSON response"), request_id)
    if not content_type.startswith("text/event-stream"):
        raise _error(INVALID_REQUEST, f"Unexpected content type: {content_type}")
    try:
        async for event in EventSource(response, max_event_size=max_event_bytes):
            if event.event != "message" or not event.data:
                continue  # what the SDK skips too (priming events, other event types)
            message = _message(event.data, "Failed to parse SSE message")
            if "method" in message:
                if "id" not in message:
                    await _notified(session, message, request_id, progress)
                continue  # a request: no 2026-07-28 server sends one
            return _result(message, None)  # the answer on this POST's stream is this request's, whatever its id
    except httpx2.SSEError as exc:
        raise _error(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from exc
    raise _error(CONNECTION_CLOSED, "SSE stream ended without a response")


def _message(data: str | bytes, failure: str) -> dict[str, Any]:
    """One JSON-RPC message; one the SDK could not read fails the call as it does (`failure`: its words)."""
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0" and _plain(message):
        return message
    try:  # the SDK's reading, for its verdict and its words
        parsed = jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError as exc:
        raise _error(PARSE_ERROR, f"{failure}: {exc}") from exc
    return parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)


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
