"""With auth off, only this machine's own pages and clients may use the gateway (DNS rebinding).

`auth.mode: none` binds loopback only (config.py), but a browser on this machine can still be
brought to it: a web page whose name is then rebound to 127.0.0.1 is, to the browser,
same-origin with the gateway, so it may send JSON and read every answer — the Content-Type rule
(content_type.py) stops only cross-origin pages. Such a request names the page's host in `Host`
and its origin in `Origin`. So, with auth off and `server.allow_remote_without_auth` unset, every
request must be addressed to a loopback name (`localhost`, 127.0.0.0/8, `[::1]`, any port: 421
otherwise), and a request a page sent (`Origin`) must come from one (403 otherwise; `Origin: null`,
a sandboxed frame or a local file, too). The MCP SDK's own check (`bridge.allowedHosts`) does the
same on `/mcp` for the hosts an operator lists; this one holds on every route, by default.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.content_type import error_shape
from gateway.config import is_loopback
from gateway.errors import Forbidden, GatewayError, MisdirectedRequest, error_response


def host_name(host: str) -> str:
    """The name part of a `Host` value: `[::1]:8080` → `::1`, `localhost:8080` → `localhost`."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(headers: Headers) -> GatewayError | None:
    """Why a request to a gateway with auth off may not be served, or None when it may."""
    host = headers.get("host")
    if host is not None and not is_loopback(host_name(host)):
        return MisdirectedRequest(
            f"this gateway runs without authentication (auth.mode: none) and answers only requests addressed "
            f"to localhost, 127.0.0.1 or [::1], not to {host[:255]!r} (a page reaching it through another name "
            "is refused: DNS rebinding); to serve other names, turn authentication on "
            "(or set server.allow_remote_without_auth)"
        )
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not is_loopback(parts.hostname or ""):
            return Forbidden(
                f"this gateway runs without authentication (auth.mode: none) and serves pages of this machine "
                f"only (http://localhost, 127.0.0.1, [::1]), not a page of {origin[:255]!r}"
            )
    return None


class LoopbackOnly:
    """Pure ASGI (safe for streaming): refuse, in the route's error shape, what `refusal` names."""

    def __init__(self, app: ASGIApp, scrub: Callable[[str], str]) -> None:
        self.app = app
        self.scrub = scrub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(Headers(scope=scope))
            if refused is not None:
                await error_response(refused, self.scrub, error_shape(scope.get("path", "")))(scope, receive, send)
                return
        await self.app(scope, receive, send)
