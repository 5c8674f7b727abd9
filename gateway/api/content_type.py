"""Request bodies are JSON, said so by `Content-Type` (G6), on every route: 415 otherwise, before
a route reads anything (why: `gateway.api.body.require_json`).

The model APIs check it themselves (`ChatHandler` calls `require_json`, so the refusal is counted
and shaped like their other errors); this middleware covers every other route — the MCP endpoint
and the Bridge REST API. The console's HTML forms (sign-in, sign-out) post
`application/x-www-form-urlencoded` under `/console/`, where its handlers check the type and a
CSRF token; that type stays accepted there.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.body import media_type, require_json
from gateway.errors import ErrorShape, UnsupportedMediaType, error_response, jsonrpc_error, openai_error

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM = "application/x-www-form-urlencoded"
FORM_PREFIX = "/console/"
"""Paths under which the console's HTML forms post `FORM`."""


def error_shape(path: str) -> ErrorShape:
    """JSON-RPC on the MCP endpoint (`/mcp`, `/mcp/<bridgeId>`), as the MCP SDK answers a refused
    transport request; the OpenAI envelope elsewhere (the Bridge REST API's own shape)."""
    return jsonrpc_error if path == "/mcp" or path.startswith("/mcp/") else openai_error


class JsonBodies:
    """Pure ASGI (safe for streaming): a body, or a declared body type, on any path but `checked`
    (whose handlers call `require_json` themselves) must be JSON; else 415."""

    def __init__(self, app: ASGIApp, checked: frozenset[str], scrub: Callable[[str], str]) -> None:
        self.app = app
        self.checked = checked
        self.scrub = scrub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS or path in self.checked:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if path.startswith(FORM_PREFIX) and media_type(headers.get("content-type", "")) == FORM:
            await self.app(scope, receive, send)
            return
        try:
            require_json(headers)
        except UnsupportedMediaType as exc:
            await error_response(exc, self.scrub, error_shape(path))(scope, receive, send)
            return
        await self.app(scope, receive, send)
