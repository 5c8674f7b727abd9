"""What to connect to, and the shared things every session of a process uses.

`McpTarget` names one MCP server: a Streamable HTTP endpoint (either protocol generation) or a
stdio command, the auth header (its value already resolved from a secret reference), the protocol
mode and the call bound. `McpClients` holds what sessions share: one `httpx2` client per auth
header (creating one costs ~25 ms; each bounds every answer while it is read, bounds.py), the
discovery cache (a server's `server/discover` answer, or the fact that it only speaks the handshake
generation, so no later session probes again), and the response hook that notices a server ending
a session with a bare HTTP status (`SessionWatch`).

A `guarded` target is an endpoint a caller chose (a connection made through the REST API): every
session to it (a first one, a replacement, a pipeline node's) is admitted by the egress policy
first, and it is reached only through clients whose sockets open to checked addresses (SSRF,
gateway/egress.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any, Literal

import httpx2
import mcp
import mcp_types as types
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.egress import DestinationRefused, EgressPolicy
from gateway.mcp.bounds import BoundedTransport
from gateway.mcp.errors import SESSION_ENDED
from gateway.mcp.lean import LeanHttp
from gateway.mcp.reuse import DrainingTransport, wrap_transports

log = logging.getLogger("toolgate.mcp")

PYTHON_NAMES = frozenset({"python", "python3"})

MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
"""Default largest answer (one JSON-RPC message: a JSON body, or one server-sent event) read from a
Streamable HTTP server, counted while it arrives (bounds.py); mcp_bridge's, whose servers are the
operator's. The Bridge passes its own, smaller bound (`bridge.limits.resultBytes`). (The SDK's
default, 1 MiB per event, would fail ordinary large tool results.)"""

MCP_LIMITS = httpx2.Limits(max_connections=None, max_keepalive_connections=200, keepalive_expiry=2.0)
"""No cap on connections: every open session of a session-ful server holds one for its event
stream while it lives (B14), so a cap would make the session past it wait and fail. Idle
connections are dropped after 2 s, before a server's own keep-alive (uvicorn: 5 s) closes them
under a request just being sent."""

EVENT_STREAM_SECONDS = 2.0
"""Longest wait, once a session-ful HTTP session is open, for the server to answer the session's
event stream (the GET the SDK starts after the handshake): see `EventStream`."""

MAX_ERROR_BODY = 4096
"""Largest error body the session watch reads to learn whether a 400 means "no such session"."""

Protocol = Literal["auto", "legacy"]


def sdk_timeout(timeout: float) -> float:
    """The SDK's own read timeout for calls the gateway bounds at `timeout` (B17): only a backstop,
    past that bound. The gateway's bound must fire first: cancelling a call makes the SDK tell the
    server (`notifications/cancelled`, shielded), while an SDK timeout of the same length races the
    gateway's cancellation, loses that notice, and leaves the server working on a call nobody waits for."""
    return 2 * timeout


def stdio_parameters(command: list[str] | tuple[str, ...], cwd: Path | None = None) -> mcp.StdioServerParameters:
    """How to start a stdio server; a bare `python`/`python3` means this interpreter (venvs work)."""
    program, *args = command
    if program in PYTHON_NAMES:
        program = sys.executable
    return mcp.StdioServerParameters(command=program, args=args, cwd=cwd)


@dataclass(frozen=True)
class McpTarget:
    """One MCP server as the layer connects to it. `auth_header` is (name, resolved value)."""

    label: str
    endpoint: str | None = None
    command: tuple[str, ...] | None = None
    cwd: Path | None = None
    auth_header: tuple[str, str] | None = field(default=None, repr=False)
    protocol: Protocol = "auto"
    timeout: float = 30.0
    guarded: bool = False
    """An endpoint a caller chose: admitted on every connect, reached through guarded clients only (SSRF)."""

    @property
    def key(self) -> tuple[Any, ...]:
        """What the discovery cache is keyed by: where the server is and how it is spoken to."""
        return (self.endpoint, self.command, self.protocol)


@dataclass
class SessionWatch:
    """What the HTTP layer saw of one session: set when the server answered a request carrying the
    session id with 404, or with 400 saying the session is not valid (B16). The SDK reports such a
    400 only as "Server returned an error response" when the body is not a JSON-RPC error it can
    read (the TypeScript SDK's examples omit the `id`)."""

    ended: bool = False
    status: int | None = None
    lean: LeanHttp | None = None
    """How the session's requests reach its HTTP server, for a call made without the SDK's
    transport (lean.py); None for stdio."""
    session_id: str | None = None
    """The `Mcp-Session-Id` the server gave the session (handshake era), for the same calls."""


_WATCH: contextvars.ContextVar[SessionWatch | None] = contextvars.ContextVar("toolgate_mcp_session_watch", default=None)


@dataclass
class EventStream:
    """The session's own event stream (the standalone GET of the handshake generation), as the HTTP
    layer saw it. A server sends what belongs to no request of the client — a request such as
    elicitation made without naming the call it serves (the TypeScript SDK's `server.request`),
    `list_changed`, resource updates — on that stream only, and drops it while the stream is not
    open yet. The SDK starts the GET beside the first request, so a call made at once could lose
    its own elicitation; a session is handed out only once the server answered the GET (any
    status: 405 means it has no such stream), at most `EVENT_STREAM_SECONDS` after the handshake."""

    sessionful: bool = False
    """The server gave the session an id (only then does the SDK open the stream)."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)


_STREAM: contextvars.ContextVar[EventStream | None] = contextvars.ContextVar("toolgate_mcp_event_stream", default=None)


def watching(watch: SessionWatch) -> contextvars.Token[SessionWatch | None]:
    """Make `watch` the session watch of the current task and of the tasks it starts from now on
    (the SDK's transport tasks copy the context of the task that opens the client)."""
    return _WATCH.set(watch)


async def _watch_response(response: httpx2.Response) -> None:
    stream = _STREAM.get()
    if stream is not None:
        if response.request.method == "GET":
            stream.answered.set()
        elif "mcp-session-id" in response.headers:
            stream.sessionful = True
    watch = _WATCH.get()
    status = response.status_code
    if watch is not None and status < 300 and (given := response.headers.get("mcp-session-id")):
        watch.session_id = given
    if watch is None or status not in (400, 404) or "mcp-session-id" not in response.request.headers:
        return
    if status == 404:
        watch.ended, watch.status = True, status
        return
    length = response.headers.get("content-length", "")
    if not length.isdigit() or int(length) > MAX_ERROR_BODY:
        return
    body = await response.aread()
    if SESSION_ENDED.search(body.decode("utf-8", "replace")):
        watch.ended, watch.status = True, status


async def _event_stream_answered(stream: EventStream, target: McpTarget) -> None:
    """Wait (bounded) until the server answered a session-ful session's event stream (`EventStream`)."""
    if not stream.sessionful:
        return
    try:
        await asyncio.wait_for(stream.answered.wait(), EVENT_STREAM_SECONDS)
    except TimeoutError:
        log.info("mcp %s: the session's event stream was not answered within %gs; going on without it",
                 target.label, EVENT_STREAM_SECONDS)


def no_cookies() -> CookieJar:
    """A cookie jar that keeps nothing. One client serves every owner whose connections send the
    same auth header (or none), so a cookie one caller's server set would go out with the next
    owner's calls to that host; MCP sessions are the `Mcp-Session-Id` header, never a cookie."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def mcp_http_client(
    headers: dict[str, str] | None = None, egress: EgressPolicy | None = None, max_answer_bytes: int = MAX_SSE_EVENT_BYTES
) -> httpx2.AsyncClient:
    """An `httpx2` client for MCP servers: long reads (event streams), no connection cap, the session
    watch, every answer bounded at `max_answer_bytes` while it is read (bounds.py), connections kept
    after a streamed answer (reuse.py); with `egress`, on its guarded transport (no proxy from the
    environment either)."""
    guarded: dict[str, Any] = {"transport": egress.transport(MCP_LIMITS), "trust_env": False} if egress is not None else {}
    client = httpx2.AsyncClient(
        headers=headers or {},
        cookies=no_cookies(),
        timeout=httpx2.Timeout(30, read=300),
        limits=MCP_LIMITS,
        event_hooks={"response": [_watch_response]},
        **guarded,
    )
    # the bound inside the draining: a cut answer is closed at once, not drained
    return wrap_transports(client, lambda inner: DrainingTransport(BoundedTransport(inner, max_answer_bytes)))


@dataclass(frozen=True)
class Discovered:
    """How a server was last reached: a modern version and its discover result, or `legacy`."""

    mode: str
    result: types.DiscoverResult | None = None


ClientOptions = dict[str, Any]
"""Extra keyword arguments for `mcp.Client` (callbacks: sampling, elicitation, roots, logging, messages)."""


class McpClients:
    """HTTP clients by auth header and the discovery cache, shared by every session of an owner.
    `egress` admits guarded targets (by default: no loopback, private or link-local address)."""

    def __init__(self, max_answer_bytes: int = MAX_SSE_EVENT_BYTES, egress: EgressPolicy | None = None) -> None:
        """`max_answer_bytes`: the largest answer (a JSON body, one event) read from a server (bounds.py)."""
        self.max_answer_bytes = max_answer_bytes
        self.egress = egress if egress is not None else EgressPolicy()
        self._http: dict[tuple[tuple[str, str] | None, bool], httpx2.AsyncClient] = {}
        self._discovered: dict[tuple[Any, ...], Discovered] = {}

    def http(self, auth_header: tuple[str, str] | None, guarded: bool = False) -> httpx2.AsyncClient:
        """The client sending `auth_header` (or none), guarded or not, created on first use."""
        client = self._http.get((auth_header, guarded))
        if client is None:
            client = mcp_http_client(
                dict([auth_header]) if auth_header else None, self.egress if guarded else None, self.max_answer_bytes
            )
            self._http[(auth_header, guarded)] = client
        return client

    def discovered(self, target: McpTarget) -> Discovered | None:
        """What the cache knows of how to reach `target`."""
        return self._discovered.get(target.key)

    def forget(self, target: McpTarget) -> None:
        """Drop the discovery of `target` (it failed, or its connection changed)."""
        self._discovered.pop(target.key, None)

    def factory(self, target: McpTarget, options: Callable[[], ClientOptions] | None = None) -> Callable[[], Any]:
        """A maker of connected-on-enter sessions for `target` (what `McpConnection` opens)."""
        return lambda: self.session(target, options() if options is not None else {})

    @contextlib.asynccontextmanager
    async def session(self, target: McpTarget, options: ClientOptions | None = None) -> AsyncIterator[mcp.Client]:
        """An open `mcp.Client` for `target`; the first session of a target probes the protocol
        (`mode="auto"`), later ones reuse what it found. A failure forgets it. A guarded target is
        admitted first, every time (`DestinationRefused`)."""
        if target.guarded:  # SSRF: on every connect, a replacement session's too (names may resolve anew)
            if target.endpoint is None or target.command is not None:
                raise DestinationRefused()
            await self.egress.admit(target.endpoint)
        if target.command is not None:
            transport: Any = stdio_parameters(target.command, target.cwd)
        else:
            assert target.endpoint is not None
            http = self.http(target.auth_header, target.guarded)
            transport = streamable_http_client(
                target.endpoint, http_client=http,
                max_sse_event_size=self.max_answer_bytes,  # a backstop: the transport's bound cuts first
            )
            watch = _WATCH.get()
            if watch is not None:  # the session's own requests may go out without the SDK's transport (lean.py)
                watch.lean = LeanHttp(http, target.endpoint, self.max_answer_bytes, self.egress if target.guarded else None)
        known = self._discovered.get(target.key)
        mode: str = target.protocol if known is None else known.mode
        extra: dict[str, Any] = dict(options or {})
        if known is not None and known.result is not None:
            extra["prior_discover"] = known.result
        client = mcp.Client(transport, mode=mode, read_timeout_seconds=sdk_timeout(target.timeout), cache=None, **extra)
        stream = EventStream()
        _STREAM.set(stream)  # the transport's tasks (the GET's among them) inherit this context
        try:
            async with client:
                if known is None:
                    self._learn(target, client)
                await _event_stream_answered(stream, target)
                yield client
        except BaseException:
            self.forget(target)
            raise

    def _learn(self, target: McpTarget, client: mcp.Client) -> None:
        version = client.protocol_version
        result = client.session.discover_result
        if version in MODERN_PROTOCOL_VERSIONS and result is not None:
            self._discovered[target.key] = Discovered(version, result)
        elif version is not None:
            self._discovered[target.key] = Discovered("legacy")

    async def close(self) -> None:
        """Close every HTTP client."""
        clients, self._http = list(self._http.values()), {}
        for client in clients:
            await client.aclose()
