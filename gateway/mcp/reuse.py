"""Keep the HTTP connection of an answered MCP request for the next one.

The SDK closes a POST's event stream as soon as the JSON-RPC answer arrived in it, before the
server's end of the stream (the last chunk, sent right after). httpcore can reuse a connection only
when the response was read to its end, so every streamed answer cost a new TCP connection (a
connect here, an accept at the server: measured as one connect per federated call, bench/README.md).
`DrainingTransport` reads what is left of a response that is closed early — at most
`DRAIN_BYTES`, for at most `DRAIN_SECONDS` — and only then closes it, so a stream that ended
returns its connection to the pool (`target.mcp_http_client` puts it under every transport of a
client, the environment's proxies included, with `wrap_transports`). The answer has already been
delivered when the SDK closes the stream, so nobody waits for this; a stream that does not end in
time (a GET event stream) or is closed under cancellation is closed as before, and its connection
dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
import httpx2

DRAIN_SECONDS = 0.5
DRAIN_BYTES = 64 * 1024


class DrainingStream(httpx2.AsyncByteStream):
    """A response body that drains before it closes (see the module docstring); `drop()` closes
    it at once instead (a cancelled call's: its connection is dropped, never drained)."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

    def drop(self) -> None:
        """Close without draining: what is left is never read, so a connection whose answer was
        not read to its end is not kept."""
        self._ended = True

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._chunks = self._inner.__aiter__()
        return self

    async def __anext__(self) -> bytes:
        assert self._chunks is not None
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            self._ended = True
            raise

    async def aclose(self) -> None:
        try:
            if not self._ended:
                chunks = self._chunks if self._chunks is not None else self._inner.__aiter__()
                with anyio.move_on_after(DRAIN_SECONDS):
                    left = DRAIN_BYTES
                    async for chunk in chunks:  # the reader's own iterator: it goes on where the reader stopped
                        left -= len(chunk)
                        if left < 0:
                            break
        except Exception:  # a broken stream is closed like any other
            pass
        finally:
            await self._inner.aclose()


class DrainingTransport(httpx2.AsyncBaseTransport):
    """Wraps a transport; its responses drain before they close (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = DrainingStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def wrap_transports(
    client: httpx2.AsyncClient, wrap: Callable[[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport]
) -> httpx2.AsyncClient:
    """`client` with every transport it chooses from (its own and the proxies' it mounted from the
    environment) replaced by `wrap(transport)`. httpx2 offers no public hook for this; should its
    attributes change shape, this raises rather than leave a transport unwrapped (the answer bound
    of bounds.py relies on it)."""
    transport = getattr(client, "_transport", None)
    mounts = getattr(client, "_mounts", None)
    if not isinstance(transport, httpx2.AsyncBaseTransport) or not isinstance(mounts, dict):  # pragma: no cover
        raise RuntimeError("httpx2's client has no transport to wrap")
    client._transport = wrap(transport)  # noqa: SLF001
    for pattern, mounted in mounts.items():
        if isinstance(mounted, httpx2.AsyncBaseTransport):
            mounts[pattern] = wrap(mounted)
    return client

