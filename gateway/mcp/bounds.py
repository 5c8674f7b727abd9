"""A bound on what an MCP server sends back, enforced while it is read.

An answer (a tool result with its text and `structuredContent`, a listing page, a resource) used
to be read whole before anything looked at its size: a server answering 50 MB made the gateway
hold 100 MB and more. `BoundedTransport` wraps the transports of every MCP HTTP client
(`target.mcp_http_client`) and counts each response's bytes as they arrive:

- a JSON body (and any other body that is not an event stream) is cut as soon as more than
  `max_bytes` of it arrived;
- an event stream (a POST's streamed answer, or the session's GET stream, which lives as long as
  the session) is cut when one event passes `max_bytes`: the count starts afresh where an event
  ends (a blank line), so a long-lived stream of small messages is never cut.

A cut raises `AnswerOverLimit` inside the SDK's reader, which fails that one request and keeps the
session: the SDK turns a `StreamError` in a JSON answer into a parse error for the request, and an
`SSEError` in an event stream into "SSE stream failed" for it (a GET stream just reconnects), so
the exception is both. The response is closed at once: the rest of the answer is never read and
its connection is dropped. The request's job learns that it was the bound, not the server, through
the `AnswerWatch` of its context (`watching_answer`), and reports `AnswerTooLarge` (errors.py).

The count is of the bytes as sent, so an answer must not be compressed: httpx2 decodes a
`Content-Encoding` after the transport, and a gzipped 16 MiB result is 16 KiB on the wire.
`BoundedTransport` asks for `Accept-Encoding: identity` and refuses an encoded answer unread
(`AnswerEncoded`, the same two bases: the request fails, the session is kept).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2

EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r")
"""Where an event ends: a line ending followed by an empty line. Every blank line under any mix of
CR, LF and CRLF holds one of these pairs, and none of them occurs inside a line."""


class AnswerOverLimit(httpx2.SSEError, httpx2.StreamError):
    """An answer cut at `limit` bytes while it was read (see the module docstring for the two bases)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the MCP server's answer is over the limit of {limit} bytes")
        self.limit = limit


class AnswerEncoded(httpx2.SSEError, httpx2.StreamError):
    """An answer sent with a `Content-Encoding` although identity was asked for: its decoded size
    cannot be counted as it is read, so it is not read at all."""

    def __init__(self, encoding: str) -> None:
        super().__init__(f"the MCP server's answer is content-encoded ({encoding[:32]}); only identity is read")


@dataclass
class AnswerWatch:
    """What the bound did to the answers of one request: `limit` is set when one was cut."""

    limit: int | None = None


_ANSWER: contextvars.ContextVar[AnswerWatch | None] = contextvars.ContextVar("toolgate_mcp_answer", default=None)


def watching_answer() -> AnswerWatch:
    """A fresh `AnswerWatch` for the current task and the tasks it starts from now on (the SDK sends
    a request, and reads its answer, in a task started from the context of the task that asks)."""
    watch = AnswerWatch()
    _ANSWER.set(watch)
    return watch


def event_bytes(counted: int, last: bytes, chunk: bytes) -> int:
    """The bytes of the event being read once `chunk` arrived: `counted` before it, or only what
    follows the last end of an event in it. `last` is the byte before `chunk` (an event's end may
    straddle two chunks)."""
    end = max(chunk.rfind(pair) for pair in EVENT_ENDS)
    if end >= 0:
        return len(chunk) - end - 2
    if last + chunk[:1] in EVENT_ENDS:
        return len(chunk) - 1
    return counted + len(chunk)


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int, per_event: bool, encoding: str | None = None) -> None:
        self._inner = inner
        self._max = max_bytes
        self._per_event = per_event
        self._encoding = encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding is not None:
            raise AnswerEncoded(self._encoding)
        counted = 0
        last = b""
        async for chunk in self._inner:
            if self._per_event:
                counted = event_bytes(counted, last, chunk)
                last = chunk[-1:] or last
            else:
                counted += len(chunk)
            if counted > self._max:
                watch = _ANSWER.get()
                if watch is not None:
                    watch.limit = self._max
                raise AnswerOverLimit(self._max)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded(stream: httpx2.AsyncByteStream, headers: httpx2.Headers, max_bytes: int) -> httpx2.AsyncByteStream:
    """`stream`, the body of an answer with `headers`, bounded at `max_bytes` as it is read (per
    event for an event stream), and refused unread when content-encoded. (`BoundedTransport` bounds
    every answer of an httpx2 client with it; the lean call's POSTs on the lean HTTP/1.1 client too.)"""
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    codings = [c.strip().lower() for c in headers.get_list("content-encoding", split_commas=True)]
    encoding = ", ".join(c for c in codings if c and c != "identity") or None
    return _BoundedStream(stream, max_bytes, per_event=media == "text/event-stream", encoding=encoding)


class BoundedTransport(httpx2.AsyncBaseTransport):
    """Wraps a transport; every response body is bounded at `max_bytes` as it is read (per event
    for an event stream). Answers are asked for, and only read, without a content encoding."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = bounded(response.stream, response.headers, self.max_bytes)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
