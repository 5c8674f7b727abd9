"""`toolgate route`: a small conversation-affine router in front of several gateway replicas.

Each gateway process keeps its own MCP session pool (B14), so every turn of a conversation must
reach the same process. The router picks a backend by a consistent hash of `X-Conversation-Id`;
without one, of the `Authorization` header (a caller's derived conversation keys (G4) then stay on
one backend too); with neither, round-robin (such requests are not pooled anyway). Adding or
removing a backend moves only the conversations of that backend's share of the ring.

Bodies are streamed both ways as they come (SSE passes through unbuffered); a client that leaves
closes the backend request, so the gateway sees it leave too. A backend that cannot be reached
gets a 502 with the OpenAI error envelope. No retries and no health checks: put a real load
balancer (see README, "Operations") in front where those matter.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import itertools
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
from starlette.types import Message, Receive, Scope, Send

from gateway.errors import UpstreamError, error_response

log = logging.getLogger("toolgate.router")

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer", b"trailers",
    b"transfer-encoding", b"upgrade",
})
POINTS = 160
"""Points per backend on the ring: enough for an even share, few enough to build instantly."""


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing: a key maps to the first backend point at or after its hash, clockwise."""

    def __init__(self, backends: Sequence[str], points: int = POINTS) -> None:
        if not backends:
            raise ValueError("at least one backend")
        ring = sorted((_point(f"{backend}#{i}"), backend) for backend in backends for i in range(points))
        self._hashes = [h for h, _ in ring]
        self._owners = [b for _, b in ring]

    def pick(self, key: str) -> str:
        """The backend that owns `key`."""
        index = bisect.bisect_left(self._hashes, _point(key)) % len(self._hashes)
        return self._owners[index]


class Router:
    """The ASGI app: forwards every request to one backend chosen by conversation (module docstring)."""

    def __init__(self, backends: Sequence[str], *, http: httpx2.AsyncClient | None = None) -> None:
        self.backends = [b.rstrip("/") for b in backends]
        self._ring = HashRing(self.backends)
        self._turn = itertools.count()
        # Backends are uvicorn processes that close idle connections after 5 s: reusing one just as it
        # closes fails the request, so idle connections are dropped well before that.
        self._http = http or httpx2.AsyncClient(
            timeout=httpx2.Timeout(None, connect=10.0),
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=200, keepalive_expiry=2.0),
        )

    def backend_for(self, headers: dict[bytes, bytes]) -> str:
        """X-Conversation-Id, else Authorization, on the ring; else the next backend in turn."""
        for name in (b"x-conversation-id", b"authorization"):
            value = headers.get(name, b"").strip()
            if value:
                return self._ring.pick(name.decode() + ":" + value.decode("latin-1"))
        return self.backends[next(self._turn) % len(self.backends)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._http.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])  # for the choice only: repeated headers are forwarded as they came
        backend = self.backend_for(headers)
        url = backend + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        forwarded = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP and k.lower() != b"host"]
        has_body = b"content-length" in headers or b"transfer-encoding" in headers
        request = self._http.build_request(scope["method"], url, headers=forwarded,
                                           content=_body(receive) if has_body else None)
        try:
            response = await self._http.send(request, stream=True)
        except httpx2.HTTPError as exc:
            await self._unreachable(scope, receive, send, backend, exc)
            return
        except ClientGone:
            return
        try:
            pump = asyncio.ensure_future(self._relay(response, send))
            gone = asyncio.ensure_future(_disconnected(receive))
            await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            gone.cancel()
            if not pump.done():  # the client left: stop, and closing the response tells the backend
                pump.cancel()
            await asyncio.gather(pump, gone, return_exceptions=True)
            if not pump.cancelled() and pump.exception() is not None:
                # the backend failed mid-body: end the client's connection without a clean ending
                log.warning("backend %s failed mid-response: %s", backend, type(pump.exception()).__name__)
                raise pump.exception()  # type: ignore[misc]
        finally:
            await response.aclose()

    async def _relay(self, response: httpx2.Response, send: Send) -> None:
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        async for chunk in response.aiter_raw():
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _unreachable(self, scope: Scope, receive: Receive, send: Send, backend: str, exc: Exception) -> None:
        log.warning("backend %s could not be reached: %s", backend, type(exc).__name__)
        number = self.backends.index(backend) + 1
        error = UpstreamError(f"gateway backend {number} of {len(self.backends)} could not be reached ({type(exc).__name__})")
        await error_response(error, lambda text: text)(scope, receive, send)  # the message holds no secret


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    """The client's request body, chunk by chunk as it arrives."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has gone (its request body was read in full before this is called)."""
    while True:
        message: dict[str, Any] = dict(await receive())
        if message["type"] == "http.disconnect":
            return


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen {value!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def check_backend(url: str) -> str:
    """A backend base URL: http(s)://host:port, no path beyond `/`."""
    parsed = httpx2.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host or parsed.path not in ("", "/"):
        raise ValueError(f"--backend {url!r}: expected a base URL such as http://127.0.0.1:8081")
    return url.rstrip("/")
