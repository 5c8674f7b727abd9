"""One exception tree; each class carries its HTTP status, OpenAI error type and code.

A single handler (gateway.app) renders any `GatewayError` as the OpenAI envelope
`{"error": {"message", "type", "code"}}`. Messages never contain secrets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.responses import Response


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str = "internal_error"
    challenge: str | None = None
    """The `WWW-Authenticate` value its response carries (401, and 403 for a missing scope)."""
    headers: dict[str, str] | None = None
    """More response headers (a 429's `Retry-After` and `x-ratelimit-*`)."""

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}


class BadRequest(GatewayError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class Unauthorized(GatewayError):
    status, type, code = 401, "authentication_error", "invalid_api_key"
    challenge = "Bearer"

    def __init__(self, message: str, *, challenge: str | None = None) -> None:
        super().__init__(message)
        if challenge is not None:
            self.challenge = challenge


class Forbidden(GatewayError):
    status, type, code = 403, "permission_error", "forbidden"


class InsufficientScope(Forbidden):
    """An access token without a scope the resource requires (RFC 6750 `insufficient_scope`)."""

    code = "insufficient_scope"
    challenge = 'Bearer error="insufficient_scope"'

    def __init__(self, message: str, *, challenge: str | None = None) -> None:
        super().__init__(message)
        if challenge is not None:
            self.challenge = challenge


class NotFound(GatewayError):
    status, type, code = 404, "invalid_request_error", "not_found"


class MethodNotAllowed(GatewayError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class ModelNotFound(NotFound):
    code = "model_not_found"


class Unavailable(GatewayError):
    status, type, code = 503, "server_error", "unavailable"


class RequestTimeout(GatewayError):
    """The request body did not arrive within `server.body_timeout_seconds`."""

    status, type, code = 408, "invalid_request_error", "request_timeout"


class UnsupportedMediaType(GatewayError):
    """A request body that is not JSON where the API takes JSON: a web page can send `text/plain`
    (or a form) to any address without asking first, JSON only after the browser's CORS check."""

    status, type, code = 415, "invalid_request_error", "unsupported_media_type"


class MisdirectedRequest(GatewayError):
    """A request addressed (`Host`) to a name this gateway does not answer to: with auth off, a
    name other than loopback's means a page reached it through DNS rebinding."""

    status, type, code = 421, "invalid_request_error", "misdirected_request"


class HeadersTooLarge(GatewayError):
    status, type, code = 431, "invalid_request_error", "headers_too_large"


class PayloadTooLarge(GatewayError):
    status, type, code = 413, "invalid_request_error", "request_too_large"


class UpstreamRateLimited(GatewayError):
    status, type, code = 429, "rate_limit_error", "upstream_rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the upstream asked to wait (its `Retry-After`), if it said: the deployment cools down that long (O1)."""


class RateLimited(GatewayError):
    """A limit of `limits:` refused the request (O2): 429 with `Retry-After` and the
    `x-ratelimit-*` headers. `type` is OpenAI's: `requests`, `tokens`, or `insufficient_quota`
    for a spent budget; `rule` and `reason` label `toolgate_requests_limited_total`."""

    status, type, code = 429, "requests", "rate_limit_exceeded"

    def __init__(self, message: str, *, rule: str = "", reason: str = "requests", headers: dict[str, str] | None = None,
                 type: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.rule, self.reason, self.headers = rule, reason, headers or {}
        if type is not None:
            self.type = type


class UpstreamError(GatewayError):
    status, type, code = 502, "upstream_error", "bad_gateway"


class UpstreamTimeout(GatewayError):
    status, type, code = 504, "upstream_error", "upstream_timeout"


class UpstreamBadRequest(GatewayError):
    """The upstream refused the request itself (4xx other than auth and rate limits)."""

    status, type, code = 400, "invalid_request_error", "upstream_bad_request"

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ContextWindowExceeded(UpstreamBadRequest):
    """The upstream refused the request as longer than its model's context window: a route's
    fallbacks are tried at once (O1); without one, the client gets this 400."""

    code = "context_length_exceeded"


class GuardBlocked(GatewayError):
    """An inspector refused content (B13, P2). The message names the inspector, the source and
    the rule, never the content itself."""

    status, type, code = 400, "invalid_request_error", "content_blocked"

    def __init__(self, *, inspector: str, server: str, source: str, rules: list[str], score: float) -> None:
        self.inspector, self.server, self.source, self.rules, self.score = inspector, server, source, rules, score
        super().__init__(
            f"request refused by {inspector}: content from {server}/{source} matched "
            f"{', '.join(rules) or 'the detector'} (score {score:.2f})"
        )


ErrorShape = Callable[[GatewayError], dict[str, Any]]
"""Renders an error in one client API's shape (the OpenAI envelope unless a dialect says otherwise)."""


def openai_error(exc: GatewayError) -> dict[str, Any]:
    """The OpenAI envelope `{"error": {"message", "type", "code", "param"}}`."""
    return exc.body()


def jsonrpc_error(exc: GatewayError) -> dict[str, Any]:
    """The MCP endpoint's shape: a JSON-RPC error without an id (`-32600`, invalid request), as
    the MCP SDK answers a transport-level refusal."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": exc.message}}


def error_response(exc: GatewayError, scrub: Callable[[str], str], shape: ErrorShape = openai_error) -> Response:
    """The one error renderer of every route: `exc` in `shape`, scrubbed of every resolved secret."""
    raw = scrub(json.dumps(shape(exc), ensure_ascii=False))
    headers = {"www-authenticate": exc.challenge} if exc.challenge else {}
    headers.update(exc.headers or {})
    return Response(raw, status_code=exc.status, media_type="application/json", headers=headers)


def internal_error(request_id: str | None) -> GatewayError:
    """What a client sees of a bug: a 500 naming the request id (the traceback is only logged)."""
    return GatewayError(f"internal error (request id {request_id})")
