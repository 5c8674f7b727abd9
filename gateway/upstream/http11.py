"""A lean HTTP/1.1 client for the chat path's upstream calls over plain `http://` (issue 35),
and for the Bridge's tool calls on an open MCP session (gateway/mcp/lean_http.py).

`httpx2` spends most of the gateway's CPU on a chat request (its anyio streams, a readability
poll of every pooled connection before reuse, h11): more than half of the whole request, parsing,
auth and answering included. This client does what an upstream call needs and nothing else:
POST a body, read the status, headers and body (whole or as it arrives), keep the connection
alive for the next call. It runs on asyncio's transports with `httptools` (uvicorn's parser,
already a dependency); a connection the server closes is known at once from the transport, not
polled.

Its failures are raised as the `httpx2` exceptions the same failures raise there (`ConnectError`,
`ConnectTimeout`, `ReadTimeout`, `ReadError`, `RemoteProtocolError`), so callers map them once.
It is used only where it behaves as `httpx2` would (`Http11Pool.serves`): `http://` URLs, no
proxy from the environment, no request hooks on the shared client (tracing adds one); the rest
goes through `httpx2`.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httptools
import httpx2

KEEPALIVE_SECONDS = 2.0
"""An idle connection is not reused after this (as the shared `httpx2` client: before a model
server's own keep-alive, uvicorn's and vLLM's 5 s, can close it under a request being written)."""

MAX_IDLE = 200
"""Idle connections kept per origin (the shared client's `max_keepalive_connections`)."""

BUFFERED = 1 << 20
"""Bytes of a response body read ahead of the consumer before the socket is paused."""

MAX_HEAD_BYTES = 100 * 1024
"""A response head (interim answers included) larger than this fails the call, as httpcore's limit does."""

MAX_INTERIM = 10
"""Interim (1xx) answers read before the final one at most."""

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


class Origin:
    """Where requests for one base URL go, and the bytes of the request line's target and Host —
    of the URL as `httpx2` writes it (host lower-cased, default port and dot segments dropped), so
    a server that checks Host sees what the `httpx2` path sent."""

    __slots__ = ("host", "port", "target", "host_header")

    def __init__(self, url: str) -> None:
        parts = urlsplit(str(httpx2.URL(url)))
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.host_header = parts.netloc.rsplit("@", 1)[-1]


class Response:
    """What a caller reads of an answer: `status_code`, `headers` (lower-case names, the last
    value of a repeated one), and the body whole (`content` after `aread`) or as it comes
    (`aiter_bytes`). `aclose` returns the connection to the pool when the body was read to its end."""

    def __init__(self, conn: "_Connection", pool: "Http11Pool", read_timeout: float) -> None:
        self._conn = conn
        self._pool = pool
        self._read_timeout = read_timeout
        self.status_code = conn.status
        self.headers = conn.headers
        self.content = b""
        self._closed = False

    async def aread(self) -> bytes:
        chunks = [chunk async for chunk in self.aiter_bytes()]
        self.content = b"".join(chunks)
        return self.content

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives: what each read of the socket brought, one by one (as httpx2
        yields it), decoded when the server compressed it unasked (gzip, deflate: as httpx2 does)."""
        conn = self._conn
        decoder = _decoder(self.headers.get("content-encoding", ""))
        while True:
            if conn.body:
                data = conn.body.popleft()
                conn.take(len(data))
                if decoder is not None:
                    data = _decoded(decoder, data)
                if data:
                    yield data
                continue
            if conn.complete:
                if decoder is not None and (rest := decoder.flush()):
                    yield rest
                return
            await conn.wait(self._read_timeout)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.release(self._conn)


def _decoder(encoding: str) -> Any:
    """A zlib decompressor for a gzip or deflate body; None for identity (or one httpx2 would pass through too)."""
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


def _decoded(decoder: Any, data: bytes) -> bytes:
    try:
        return bytes(decoder.decompress(data))
    except zlib.error as exc:
        raise httpx2.DecodingError(f"the upstream's compressed body is corrupt: {exc}") from None


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the response being read on it (httptools' callbacks)."""

    def __init__(self, origin_key: tuple[str, int]) -> None:
        self.key = origin_key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.error: Exception | None = None
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._buffered = 0
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: collections.deque[bytes] = collections.deque()
        self.received = False
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self._buffered = 0
        self._head_bytes = 0
        self._interim = 0

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is one, without subclassing it

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.complete:  # a second message on the same read: the connection is in no known state
            self._fail(httpx2.RemoteProtocolError("the server sent more than one response"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            ours = exc.__context__ if isinstance(exc.__context__, httpx2.RemoteProtocolError) else None  # a callback's
            self._fail(ours or httpx2.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            return
        if not self.head_done:  # everything read so far is head (or interim answers)
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:  # as httpcore: an endless head is not held in memory
                self._fail(httpx2.RemoteProtocolError(f"the response head is over {MAX_HEAD_BYTES} bytes"))
                return
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and not self.complete and self.error is None and not self._has_length and exc is None:
            self.complete = True  # a body delimited by the end of the connection (a reset cuts it: an error)
        elif not self.complete and self.error is None:
            reason = f": {exc}" if exc else ""
            if self.head_done:
                self.error = httpx2.RemoteProtocolError(f"the server closed the connection mid-body{reason}")
            else:
                self.error = (httpx2.RemoteProtocolError if exc is None else httpx2.ReadError)(
                    f"the server closed the connection without a response{reason}")
        self._wake()

    def pause_writing(self) -> None:  # pragma: no cover - request bodies are small
        pass

    def resume_writing(self) -> None:  # pragma: no cover
        pass

    # -- httptools callbacks --
    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same read (raised: the parser stops, data_received fails)
            raise httpx2.RemoteProtocolError("the server sent more than one response")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:  # an interim answer (103 Early Hints): the final one follows
            self.headers = {}
            self._interim += 1
            if self._interim > MAX_INTERIM:
                self._fail(httpx2.RemoteProtocolError(f"the server sent over {MAX_INTERIM} interim (1xx) answers"))
            return
        self.head_done = True
        self._has_length = "content-length" in self.headers or "chunked" in self.headers.get("transfer-encoding", "").lower()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self._buffered += len(body)
        if self._buffered > BUFFERED and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if not self.head_done:
            return  # the end of an interim answer
        self.keep_alive = self.parser.should_keep_alive()  # read now: the parser resets for the next message
        self.complete = True

    # -- for the response --
    _has_length = True

    def take(self, size: int) -> None:
        self._buffered -= size
        if self._paused and self._buffered <= BUFFERED // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    async def wait(self, timeout: float) -> None:
        """Until more arrives, the response ends or fails (raised), or `timeout` (ReadTimeout)."""
        if self.error is not None:
            raise self.error
        if self.complete or self.body:
            return
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        handle = loop.call_later(timeout, self._timed_out, self._waiter)
        try:
            await self._waiter
        finally:
            handle.cancel()
            self._waiter = None
        if self.error is not None:
            raise self.error

    def _timed_out(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(httpx2.ReadTimeout("the upstream sent nothing within the read timeout"))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self.error = exc
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def reusable(self) -> bool:
        return not self.closed and self.error is None and self.complete and self.keep_alive and not self.body

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


AddressOf = Callable[[str, int], Awaitable[str]]
"""`(host, port) -> the address to connect to`; it raises `httpx2.ConnectError` to refuse the host
(the MCP layer's egress check for callers' connections, gateway/mcp/lean_http.py)."""


class Http11Pool:
    """Keep-alive connections per origin; `post` sends one request on one of them (or a new one).

    `address_of`: where a new connection to a host goes (by default the host itself, as the
    resolver gives it). `resend`: whether a request whose connection failed before any byte of a
    response is sent once more on a new connection (the chat path's rule); without it (a tool call,
    which must not run twice) a request once written is never sent again — the server may have read
    and run it before the connection broke — and the failure is raised, as `httpx2` raises it."""

    def __init__(self, *, max_connections: int = 1000, address_of: AddressOf | None = None, resend: bool = True) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._open: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._address_of = address_of
        self._resend = resend

    @staticmethod
    def serves(url: str) -> bool:
        """Whether calls to `url` can come here rather than through the shared `httpx2` client:
        plain HTTP without credentials in the URL, and no proxy from the environment (read once, as `httpx2` reads it when its
        client is made). The caller also checks the client's request hooks on each call."""
        return (url.startswith("http://") and "@" not in urlsplit(url).netloc  # credentials in the URL: httpx2 sends them
                and not any(os.environ.get(name) for name in PROXY_VARIABLES))

    async def post(self, origin: Origin, headers: bytes, payload: bytes, *, connect_timeout: float, read_timeout: float) -> Response:
        """POST `payload` with the header lines `headers` (each ending in CRLF, without Host and
        Content-Length). With `resend`, a request whose connection failed before any byte of a
        response (a kept-alive one the server was just closing) is sent once more on a new
        connection, as `OpenAICompatUpstream` does through `httpx2`; a second failure is raised."""
        request = b"".join((b"POST ", origin.target.encode("latin-1"), b" HTTP/1.1\r\nhost: ", origin.host_header.encode("latin-1"),
                            b"\r\n", headers, b"content-length: ", str(len(payload)).encode(), b"\r\n\r\n", payload))
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._idle.clear()
            self._loop = loop
        await self._slots.acquire()
        try:
            for attempt in (0, 1):
                conn = self._idle_connection((origin.host, origin.port)) if attempt == 0 else None
                if conn is None:
                    conn = await self._connect(origin, connect_timeout)
                try:
                    return await self._exchange(conn, request, read_timeout)
                except (httpx2.RemoteProtocolError, httpx2.ReadError):
                    if conn.received or attempt or not self._resend:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        except BaseException:
            self._slots.release()
            raise

    async def _exchange(self, conn: _Connection, request: bytes, read_timeout: float) -> Response:
        conn.reset()
        assert conn.transport is not None
        conn.transport.write(request)
        try:
            while not conn.head_done:
                await conn.wait(read_timeout)
        except BaseException:
            self._discard(conn)
            raise
        return Response(conn, self, read_timeout)

    def _idle_connection(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < KEEPALIVE_SECONDS:
                return conn
            self._discard(conn)
        return None

    async def _connect(self, origin: Origin, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        key = (origin.host, origin.port)
        try:
            async with asyncio.timeout(timeout):
                host = origin.host if self._address_of is None else await self._address_of(origin.host, origin.port)
                _, conn = await loop.create_connection(lambda: _Connection(key), host, origin.port)
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"no connection to {origin.host}:{origin.port} within {timeout:g}s") from None
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot connect to {origin.host}:{origin.port}: {exc}") from None
        self._open.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        """The response is done with: keep its connection if it can serve another request."""
        self._slots.release()
        if conn.reusable():
            idle = self._idle.setdefault(conn.key, [])
            if len(idle) < MAX_IDLE:
                conn.idle_since = time.monotonic()
                idle.append(conn)
                return
        self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        self._open.discard(conn)
        conn.close()

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
