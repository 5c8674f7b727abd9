"""A request written on a kept-alive connection the model server was just closing (G5).

Model servers built on uvicorn close an idle keep-alive connection after 5 s; a request the
gateway writes on it at that moment gets no response at all (the server read nothing, or closed
the connection without answering). The gateway sends such a request once more on a new
connection, as the official `openai` SDK does for connection errors. An upstream that answers
nothing twice, or fails after it has begun to answer, is a 502 as before. Found by the
200-conversation load test (bench/load.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import openai
import pytest

from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config

COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
CHUNKS = [
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hel"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
]


class DroppingUpstream:
    """A raw HTTP/1.1 server on loopback: it reads each request whole, then drops the connection
    without a byte of response for the first `drops` requests, and answers the rest."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.requests = 0
        self.authorized = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.run_until_complete(server.wait_closed())

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = json.loads(await reader.readexactly(int(headers["content-length"])))
                self.requests += 1
                self.authorized += headers.get("authorization") == f"Bearer {canary.UPSTREAM_KEY}"
                if self.requests <= self.drops:
                    writer.close()
                    return
                if body.get("stream"):
                    events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in CHUNKS) + b"data: [DONE]\n\n"
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"content-length: %d\r\n\r\n" % len(events) + events)
                else:
                    payload = json.dumps(COMPLETION).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n" % len(payload) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def __enter__(self) -> "DroppingUpstream":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def once() -> Iterator[DroppingUpstream]:
    with DroppingUpstream(drops=1) as upstream:
        yield upstream


# R: G5
def test_a_request_the_upstream_dropped_unanswered_is_sent_once_more(once: DroppingUpstream) -> None:
    with running_gateway(simple_config(once.url)) as gw:
        answer = client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello"
    assert (once.requests, once.authorized) == (2, 2)


# R: G5
def test_a_stream_the_upstream_dropped_before_answering_is_opened_once_more(once: DroppingUpstream) -> None:
    with running_gateway(simple_config(once.url)) as gw:
        stream = client(gw).chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "hello"
    assert once.requests == 2


# R: G5, G6
def test_an_upstream_that_drops_the_request_twice_is_a_502_after_two_tries() -> None:
    with DroppingUpstream(drops=5) as upstream, running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "bad_gateway"
    assert upstream.requests == 2
