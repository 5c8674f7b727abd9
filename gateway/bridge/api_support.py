"""Shared pieces of the Bridge's REST routes: authentication, JSON bodies, error rendering."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.bridge.federation import CallerScope, owners_of
from gateway.errors import BadRequest, Forbidden, GatewayError, PayloadTooLarge
from gateway.identity import Identity

Authenticate = Callable[[Request], Awaitable[Identity]]
Endpoint = Callable[[Request], Awaitable[Response]]

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest REST body read (the MCP endpoint's own limit too); beyond it: 413, read no further."""


class Conflict(GatewayError):
    """The id is taken, or the thing was declared in the YAML config and is managed there."""

    status, type, code = 409, "invalid_request_error", "conflict"


def rendered(fn: Endpoint) -> Endpoint:
    """Render `GatewayError`s as the OpenAI error envelope, so the routes work in any Starlette app."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except GatewayError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    return endpoint


async def caller_of(request: Request, authenticate: Authenticate) -> CallerScope:
    """Authenticate the request and return the caller's scope (raises `Unauthorized`)."""
    identity = await authenticate(request)
    return CallerScope(identity, owners_of(identity))


async def json_body(request: Request) -> Any:
    """The request body as JSON, or 400 saying why not (413 beyond `MAX_BODY_BYTES`)."""
    too_large = PayloadTooLarge(f"body is larger than {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None


def object_body(data: Any, allowed: set[str]) -> dict[str, Any]:
    """A JSON object with only the `allowed` keys."""
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return data


def owner_for(caller: CallerScope, requested: Any) -> str:
    """The owner of a new thing: `requested` if the caller may act for it, else the caller's own id."""
    if requested is None:
        return caller.owners[0]
    if not isinstance(requested, str) or requested not in caller.owners:
        raise Forbidden(f"you cannot create things for owner {requested!r}; yours: {', '.join(caller.owners)}")
    return requested
