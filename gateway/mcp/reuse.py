"""Keep the HTTP connection of an answered MCP request for the next one.

The SDK closes a POST's event stream as soon as the JSON-RPC answer arrived in it, before the
server's end of the stream (the last chunk, sent right after). httpcore can reuse a connection only
when the response was read to its end, so every streamed answer cost a new TCP connection (a
connect here, an accept at the server: measured as one connect per federated call, bench/README.md).
`DrainingTransport` reads what is left of a response that is closed early — at most
`DRAIN_BYTES`, for at most `DRAIN_SECONDS` — and only then closes it, so a stream that ended
returns its connection to the pool (`keep_connections` puts it under a client's transports, the
environment's proxies included). The answer has already been delivered when the SDK closes the
stream, so nobody waits for this; a stream that does not end in time (a GET event stream) or is
closed under cancellation is closed as before, and its connection dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2

DRAIN_SECONDS = 0.5
DRAIN_BYTES = 64 * 1024


class _DrainingStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

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
        response.stream = _DrainingStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def keep_connections(client: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """`client` with every transport it chooses from (its own and the proxies' it mounted from the
    environment) wrapped in a `DrainingTransport`. httpx2 offers no public hook for this, so should
    its attributes change shape the client is returned as it is (connections are then not kept)."""
    transport = getattr(client, "_transport", None)
    mounts = getattr(client, "_mounts", None)
    if not isinstance(transport, httpx2.AsyncBaseTransport) or not isinstance(mounts, dict):  # pragma: no cover
        return client
    client._transport = DrainingTransport(transport)  # noqa: SLF001
    for pattern, mounted in mounts.items():
        if isinstance(mounted, httpx2.AsyncBaseTransport):
            mounts[pattern] = DrainingTransport(mounted)
    return client
