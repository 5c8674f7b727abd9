"""One exception tree; each class carries its HTTP status, OpenAI error type and code.

A single handler (gateway.app) renders any `GatewayError` as the OpenAI envelope
`{"error": {"message", "type", "code"}}`. Messages never contain secrets.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str = "internal_error"

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


class Forbidden(GatewayError):
    status, type, code = 403, "permission_error", "forbidden"


class NotFound(GatewayError):
    status, type, code = 404, "invalid_request_error", "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class PayloadTooLarge(GatewayError):
    status, type, code = 413, "invalid_request_error", "request_too_large"


class UpstreamRateLimited(GatewayError):
    status, type, code = 429, "rate_limit_error", "upstream_rate_limited"


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


class InternalError(GatewayError):
    status, type, code = 500, "server_error", "internal_error"
