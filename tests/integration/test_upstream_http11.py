"""The lean HTTP/1.1 client of the chat path's upstream calls (gateway/upstream/http11.py, issue 35),
against raw HTTP servers on loopback: keep-alive, the body's three framings, a server that
compresses unasked, a connection dropped before the answer, a server that says nothing, and
when it steps aside for httpx2."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest

from gateway.upstream.http11 import Http11Pool, Origin
from gateway.upstream.openai_compat import OpenAICompatUpstream

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""(request body, writer) → whether to keep the connection open for the next request."""


class RawServer:
    """An asyncio server that reads whole requests (Content-Length bodies) and lets `handler` answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> "RawServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:  # the handlers end on their own (a read that meets the close)
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                if not await self.handler(await reader.readexactly(length), writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def answer(body: bytes, *headers: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body), b"".join(h + b"\r\n" for h in headers), body)


async def post(pool: Http11Pool, url: str, body: bytes = b'{"q": 1}', read_timeout: float = 30) -> tuple[int, bytes]:
    response = await pool.post(Origin(url), b"content-type: application/json\r\n", body, connect_timeout=10, read_timeout=read_timeout)
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


@pytest.fixture
async def pool() -> AsyncIterator[Http11Pool]:
    made = Http11Pool()
    yield made
    await made.aclose()


async def test_one_connection_serves_consecutive_calls_and_a_closed_one_is_replaced(pool: Http11Pool) -> None:
    async def echo(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b'{"echo": ' + body + b"}"))
        await writer.drain()
        return body != b'{"last": 1}'  # the server closes the connection after this one

    async with RawServer(echo) as server:
        assert await post(pool, server.url) == (200, b'{"echo": {"q": 1}}')
        assert await post(pool, server.url, b'{"last": 1}') == (200, b'{"echo": {"last": 1}}')
        assert server.connections == 1
        assert await post(pool, server.url) == (200, b'{"echo": {"q": 1}}')  # the closed one is not reused
        assert server.connections == 2
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")


async def test_a_chunked_body_is_read_as_it_arrives_and_one_ended_by_closing_is_read_whole(pool: Http11Pool) -> None:
    first_read = asyncio.Event()

    async def chunked(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"8\r\ndata: 1\n\r\n")
        await writer.drain()
        await first_read.wait()  # the second part is sent only once the client has the first
        writer.write(b"8\r\ndata: 2\n\r\n0\r\n\r\n")
        await writer.drain()
        return True

    async with RawServer(chunked) as server:
        response = await pool.post(Origin(server.url), b"", b"{}", connect_timeout=10, read_timeout=30)
        parts = []
        async for part in response.aiter_bytes():
            parts.append(part)
            first_read.set()
        await response.aclose()
    assert parts == [b"data: 1\n", b"data: 2\n"]

    async def until_close(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n" + b"x" * 100_000)
        await writer.drain()
        return False

    async with RawServer(until_close) as server:
        assert await post(pool, server.url) == (200, b"x" * 100_000)


async def test_an_interim_answer_is_passed_over_for_the_final_one(pool: Http11Pool) -> None:
    async def hinted(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n" + answer(b'{"final": true}', b"x-final: 1"))
        await writer.drain()
        return True

    async with RawServer(hinted) as server:
        response = await pool.post(Origin(server.url), b"", b"{}", connect_timeout=10, read_timeout=30)
        assert (response.status_code, response.headers.get("x-final"), "link" in response.headers) == (200, "1", False)
        assert await response.aread() == b'{"final": true}'
        await response.aclose()
        assert await post(pool, server.url) == (200, b'{"final": true}')  # and the connection serves the next call
        assert server.connections == 1


async def test_an_answer_compressed_unasked_is_decoded_and_no_compression_is_asked_for(pool: Http11Pool) -> None:
    async def gzipped(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(gzip.compress(b'{"ok": true}'), b"content-encoding: gzip"))
        await writer.drain()
        return True

    async with RawServer(gzipped) as server:
        assert await post(pool, server.url) == (200, b'{"ok": true}')
    assert b"accept-encoding" not in server.requests[0].lower()


async def test_a_connection_dropped_before_any_answer_is_retried_once_on_a_new_one(pool: Http11Pool) -> None:
    drops = {"left": 1}

    async def dropping(body: bytes, writer: asyncio.StreamWriter) -> bool:
        if drops["left"]:
            drops["left"] -= 1
            return False  # closed without a byte of response
        writer.write(answer(b'{"ok": 1}'))
        await writer.drain()
        return True

    async with RawServer(dropping) as server:
        assert await post(pool, server.url) == (200, b'{"ok": 1}')
        assert (len(server.requests), server.connections) == (2, 2)
        drops["left"] = 2
        with pytest.raises(httpx2.RemoteProtocolError, match="without a response"):
            await post(pool, server.url)
        assert len(server.requests) == 4  # the kept-alive connection's try and one retry, no more


async def test_a_server_that_says_nothing_is_a_read_timeout_and_an_unreachable_one_a_connect_error(pool: Http11Pool) -> None:
    async def silent(body: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()
        return False

    async with RawServer(silent) as server:
        with pytest.raises(httpx2.ReadTimeout):
            await post(pool, server.url, read_timeout=0.2)
        url = server.url
    with pytest.raises(httpx2.ConnectError):
        await post(pool, url)


async def test_it_steps_aside_for_https_a_proxy_from_the_environment_and_request_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert Http11Pool.serves("http://127.0.0.1:8000/v1")
    assert not Http11Pool.serves("https://api.example.com/v1")
    assert not Http11Pool.serves("http://user:secret@127.0.0.1:8000/v1")  # httpx2 sends them as basic auth

    async def completion(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}'))
        await writer.drain()
        return True

    async def hook(request: httpx2.Request) -> None:
        request.headers["x-hooked"] = "1"

    async with RawServer(completion) as server, httpx2.AsyncClient() as http:
        upstream = OpenAICompatUpstream("u", server.url.removesuffix("/chat/completions"), None, 30, http)
        await upstream.complete({"model": "m", "messages": []})
        http.event_hooks["request"].append(hook)  # as tracing adds its traceparent, after the upstreams are made
        await upstream.complete({"model": "m", "messages": []})
        await upstream.aclose()
    assert b"user-agent: toolgate" in server.requests[0] and b"x-hooked" not in server.requests[0]
    assert b"x-hooked: 1" in server.requests[1]  # through httpx2, whose hooks ran
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    assert not Http11Pool.serves("http://127.0.0.1:8000/v1")


async def test_an_endless_head_endless_interim_answers_and_a_second_response_fail_the_call(pool: Http11Pool) -> None:
    # R: B4 -- a hostile upstream cannot make the gateway hold an unbounded head, loop on 1xx, or
    # slip a second response into the first
    async def endless_head(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for n in range(20_000):  # 20,000 header lines of ~30 bytes: 600 KB, past the 100 KiB bound
            writer.write(b"x-filler-%05d: %s\r\n" % (n, b"y" * 16))
        await writer.drain()
        return False

    async def interim_forever(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" * 50)
        await writer.drain()
        return False

    async def two_answers(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b'{"a": 1}') + answer(b'{"b": 2}'))
        await writer.drain()
        return True

    for handler, said in ((endless_head, "head is over"), (interim_forever, "interim"), (two_answers, "more than one response")):
        async with RawServer(handler) as server:
            with pytest.raises(httpx2.RemoteProtocolError, match=said):
                response = await pool.post(Origin(server.url), b"", b"{}", connect_timeout=10, read_timeout=30)
                try:
                    await response.aread()
                finally:
                    await response.aclose()


async def test_a_key_with_a_line_break_never_splits_the_request_on_the_wire() -> None:
    # R: B4 -- an env secret with a trailing newline: the request is refused, not sent as two
    async def completion(body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(b'{"id": "c", "object": "chat.completion", "choices": []}'))
        await writer.drain()
        return True

    async with RawServer(completion) as server, httpx2.AsyncClient() as http:
        upstream = OpenAICompatUpstream("u", server.url.removesuffix("/chat/completions"), "sk-abc\n", 30, http)
        with pytest.raises(Exception):
            await upstream.complete({"model": "m", "messages": []})
        await upstream.aclose()
    assert server.requests == []


@pytest.mark.parametrize(("url", "host", "target"), [
    ("http://LocalHost:8123/v1/chat/completions", "localhost:8123", "/v1/chat/completions"),
    ("http://models.test:80/v1/chat/completions", "models.test", "/v1/chat/completions"),
    ("http://models.test:81/x/../v1/chat/completions?a=1", "models.test:81", "/v1/chat/completions?a=1"),
])
def test_the_host_header_and_target_are_written_as_httpx2_writes_them(url: str, host: str, target: str) -> None:
    # a server checking Host (DNS-rebinding protection) must see what the httpx2 path sent
    origin = Origin(url)
    assert (origin.host_header, origin.target) == (host, target)
    assert (origin.host_header, origin.target) == (httpx2.URL(url).netloc.decode(), httpx2.URL(url).raw_path.decode())
