"""Bounds on what a connection answers (issue 32, finding N2: a connection answering a `tools/call`
with 50 MB made the Bridge build a 100 MB response, RSS peaking at 1 GB, other callers stalled
2.8 s; a 3.5 MB input fanned out to 40 tool nodes took 20 s and 360 MB).

Every answer read from a connection is now cut at `bridge.limits.resultBytes` while it is read, and
a pipeline wave's tool calls are refused before dispatch when their arguments together pass
`bridge.limits.waveBytes`. The server here is a plain JSON-RPC-over-HTTP MCP server that streams
its answers in chunks and records how far it got before the Bridge hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.limits import MIB
from tests.support import canary
from tests.support.bridge_servers import BridgeApp, audit_flushed, bridge_app, edge, graph, mcp_http, node, pipeline, tool_node
from tests.support.http_server import ServerThread, request_body, serve

BOUND = 4 * MIB
"""`bridge.limits.resultBytes` and `valueBytes` by default."""
CHUNK = 64 * 1024
HANG_UP_SECONDS = 20.0
"""How long the server holds a paused answer waiting for the client to hang up, before it sends
the rest anyway (what a server does to a client that keeps reading)."""


@dataclass
class Answer:
    """One `tools/call` the flood server answered: what it was asked, how far it got."""

    tool: str
    argument_bytes: int
    size: int = 0
    sent: int = 0
    """Bytes of the answer handed to the HTTP stack so far."""
    finished: bool = False
    hung_up_at: int | None = None
    """`sent` when the client was seen closing the connection before the answer's end."""
    over: threading.Event = field(default_factory=threading.Event)
    """Set once the answer ended: finished, or the client hung up."""


@dataclass
class FloodLog:
    answers: list[Answer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, answer: Answer) -> Answer:
        with self.lock:
            self.answers.append(answer)
        return answer

    def of(self, tool: str) -> list[Answer]:
        with self.lock:
            return [a for a in self.answers if a.tool == tool]


TOOLS = [
    {"name": "flood", "description": "answers `bytes` of text (and `structured` bytes of structuredContent)",
     "inputSchema": {"type": "object", "properties": {
         "bytes": {"type": "integer"}, "structured": {"type": "integer"}, "sse": {"type": "boolean"},
         "pauseAt": {"type": "integer"}, "padding": {"type": "integer"}, "q": {"type": "string"}}}},
    {"name": "take", "description": "takes `text`, answers its length",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
]


def flood_server(log: FloodLog) -> Any:
    """A stateless MCP server (JSON-RPC over HTTP POST, no session) whose `flood` tool streams its
    answer in 64 KiB chunks: as a JSON body, or (`sse`) as one server-sent event after `padding`
    bytes of comment events. With `pauseAt`, it stops after that many bytes until the client hangs
    up (at most `HANG_UP_SECONDS`), then sends the rest; it records what it sent and whether the
    client hung up before the end."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] != "POST":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = await request_body(receive)
        request = json.loads(body)
        if "id" not in request:  # a notification
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        method, params = request["method"], request.get("params") or {}
        if method == "tools/call" and params.get("name") == "flood":
            await flood(request["id"], params.get("arguments") or {}, receive, send)
            return
        if method == "initialize":
            answer: dict[str, Any] = {"result": {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                                                 "serverInfo": {"name": "flood", "version": "1"}}}
        elif method == "tools/list":
            answer = {"result": {"tools": TOOLS}}
        elif method == "tools/call" and params.get("name") == "take":
            arguments = params.get("arguments") or {}
            log.add(Answer("take", len(json.dumps(arguments)), finished=True))
            answer = {"result": {"content": [{"type": "text", "text": f"took {len(arguments.get('text', ''))}"}]}}
        elif method == "ping":
            answer = {"result": {}}
        else:
            answer = {"error": {"code": -32601, "message": f"no method {method}"}}
        data = json.dumps({"jsonrpc": "2.0", "id": request["id"], **answer}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    async def flood(request_id: Any, arguments: dict[str, Any], receive: Any, send: Any) -> None:
        text, structured = int(arguments.get("bytes", 0)), int(arguments.get("structured", 0))
        sse, pause_at, padding = bool(arguments.get("sse")), arguments.get("pauseAt"), int(arguments.get("padding", 0))
        head = b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":{"content":[{"type":"text","text":"'
        middle = b'"}]' + (b',"structuredContent":{"data":"' if structured else b"")
        tail = (b'"}' if structured else b"") + b"}}"
        if sse:
            head, tail = b"event: message\r\ndata: " + head, tail + b"\r\n\r\n"
        answer = log.add(Answer("flood", len(json.dumps(arguments)), size=len(head) + text + len(middle) + structured + len(tail)))
        hung_up = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hung_up.set()

        watcher = asyncio.ensure_future(watch())

        async def put(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async def fill(byte: bytes, count: int) -> None:
            while count > 0 and not hung_up.is_set():
                piece = min(CHUNK, count)
                if pause_at is not None and answer.sent < pause_at <= answer.sent + piece:
                    piece = pause_at - answer.sent
                await put(byte * piece)
                answer.sent += piece
                count -= piece
                if answer.sent == pause_at:
                    try:
                        await asyncio.wait_for(hung_up.wait(), HANG_UP_SECONDS)
                    except TimeoutError:
                        pass

        try:
            kind = b"text/event-stream" if sse else b"application/json"
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
            for _ in range(padding // CHUNK):
                await put(b": " + b"p" * (CHUNK - 4) + b"\n\n")
            await put(head)
            await fill(b"x", text)
            await put(middle)
            await fill(b"y", structured)
            if not hung_up.is_set():
                await send({"type": "http.response.body", "body": tail})
                answer.finished = True
        finally:
            if hung_up.is_set():
                answer.hung_up_at = answer.sent
            watcher.cancel()
            answer.over.set()

    return app


@dataclass
class World:
    app: BridgeApp
    server: ServerThread
    log: FloodLog

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    log = FloodLog()
    with serve(flood_server(log)) as upstream:
        config = BridgeConfig.model_validate({
            "database": "bridge.db",
            "apiEndpointAllowPrivate": ["127.0.0.0/8"],  # alice's own connection below points at loopback
            "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{upstream.url}/mcp"}],
            "bridges": [{"id": "pipes", "owner": "alice", "connections": ["tools"]}],
        })
        app = bridge_app(config, tmp_path_factory.mktemp("results"))
        with serve(app.app) as bridge:
            made = httpx2.post(f"{bridge.url}/connections", json={"id": "mine", "endpoint": f"{upstream.url}/mcp"},
                               headers={"Authorization": f"Bearer {canary.ALICE_KEY}"})
            assert made.status_code == 201, made.text
            yield World(app, bridge, log)


@contextlib.asynccontextmanager
async def caller(world: World, path: str = "/mcp") -> AsyncIterator[Client]:
    """alice's MCP client of the Bridge, reading answers of up to 64 MiB (the SDK's default is 1 MiB)."""
    transport = streamable_http_client(f"{world.url}{path}", http_client=mcp_http("alice-key"), max_sse_event_size=64 * MIB)
    async with Client(transport, mode="legacy") as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """A call with a deadline: a Bridge that waited for the whole 50 MB would wait for the server's
    `HANG_UP_SECONDS` first."""
    return await asyncio.wait_for(client.call_tool(tool, arguments), HANG_UP_SECONDS / 2)


def ended(answer: Answer) -> Answer:
    """`answer` once the server saw it end (finished, or the client hung up), with a deadline."""
    assert answer.over.wait(HANG_UP_SECONDS + 10), "the flood server's answer never ended"
    return answer


async def audit(world: World, **params: str) -> list[dict[str, Any]]:
    await audit_flushed(world.app, world.server)
    async with mcp_http("alice-key") as http:
        response = await http.get(f"{world.url}/audit", params={"limit": "1000", **params})
    assert response.status_code == 200
    return list(response.json()["data"])


@pytest.mark.parametrize("sse", [False, True], ids=["json-body", "event-stream"])
async def test_a_50_mb_tool_result_on_a_callers_connection_is_cut_at_the_bound_while_the_server_still_sends(
    world: World, sse: bool
) -> None:
    # R: F1, F10 (issue 32, N2: a 50 MB answer became a 100 MB response and 1 GB of RSS)
    pause_at = BOUND + 4 * CHUNK
    before = len(world.log.of("flood"))
    async with caller(world) as alice:
        result = await call(alice, "mine__flood", {"bytes": 50_000_000, "sse": sse, "pauseAt": pause_at})
        assert result.is_error
        assert result.content == [types.TextContent(text=f"tool mine__flood failed: the result of flood is over the limit of {BOUND} bytes")]
        answer = ended(world.log.of("flood")[before])
        assert (answer.finished, answer.hung_up_at) == (False, pause_at), (
            "the Bridge hung up while the server still had 45 MB to send; it never waited for them"
        )
        again = await call(alice, "mine__flood", {"bytes": 10, "sse": sse})
    assert again.content == [types.TextContent(text="x" * 10)], "the caller's session of the connection is still usable"
    records = [r for r in await audit(world, resource="mine__flood") if r["status"] == "failure"]
    assert len(records) >= 1, "the refused call is audited as a failure"


async def test_text_and_structured_content_count_together_against_the_bound(world: World) -> None:
    # R: F1 (each half is under the bound; the answer carrying both is not)
    half = BOUND // 2 + CHUNK
    async with caller(world) as alice:
        result = await call(alice, "mine__flood", {"bytes": half, "structured": half})
    assert result.content == [types.TextContent(text=f"tool mine__flood failed: the result of flood is over the limit of {BOUND} bytes")]
    assert result.structured_content is None


async def test_a_result_under_the_bound_passes_whole(world: World) -> None:
    # R: F1
    size = BOUND - 64 * 1024  # the text, under the bound with its envelope
    async with caller(world) as alice:
        result = await call(alice, "mine__flood", {"bytes": size, "structured": 0})
    assert not result.is_error
    assert result.content == [types.TextContent(text="x" * size)]


async def test_the_bound_is_per_event_so_a_long_event_stream_of_small_events_is_read_whole(world: World) -> None:
    # R: F1 (an event stream lives as long as its request or session: only one event is bounded)
    async with caller(world) as alice:
        result = await call(alice, "mine__flood", {"bytes": 1000, "sse": True, "padding": 2 * BOUND})
    assert result.content == [types.TextContent(text="x" * 1000)]


def one_tool_graph(tool: str, config: dict[str, Any]) -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=["q"]), tool_node("t1", tool, inputs=["q"], outputs=["result"], config=config),
         node("out1", "output", inputs=["r"])],
        [edge("e1", "in1.q", "t1.q"), edge("e2", "t1.result", "out1.r")],
        [pipeline("one")],
    )


async def save(world: World, data: dict[str, Any]) -> None:
    async with mcp_http("alice-key") as http:
        saved = await http.put(f"{world.url}/bridges/pipes/graph", json=data)
    assert saved.status_code == 200, saved.text


async def test_a_pipeline_nodes_oversized_result_fails_that_node_naming_the_bound(world: World) -> None:
    # R: F10, F11
    pause_at = BOUND + 4 * CHUNK
    await save(world, one_tool_graph("flood", {"bytes": 50_000_000, "pauseAt": pause_at}))
    before = len(world.log.of("flood"))
    async with caller(world, "/mcp/pipes") as alice:
        result = await call(alice, "one", {"q": "go"})
    assert result.content == [types.TextContent(
        text=f"node t1 (flood) failed: the result of flood is over the limit of {BOUND} bytes"
    )]
    answer = ended(world.log.of("flood")[before])
    assert (answer.finished, answer.hung_up_at) == (False, pause_at)


async def test_a_wave_whose_arguments_total_over_the_bound_is_refused_before_any_tool_call(world: World) -> None:
    # R: F10, F11 (issue 32: a 3.5 MB input fanned out to 40 tool nodes was sent 40 times)
    fan = 40
    nodes = [node("in1", "input", outputs=["q"]), node("out1", "output", inputs=[f"r{i}" for i in range(fan)])]
    nodes += [tool_node(f"t{i}", "take", inputs=["text"], outputs=["result"]) for i in range(fan)]
    edges = [edge(f"a{i}", "in1.q", f"t{i}.text") for i in range(fan)] + [edge(f"b{i}", f"t{i}.result", f"out1.r{i}") for i in range(fan)]
    await save(world, graph(nodes, edges, [pipeline("fan")]))
    text = "z" * (512 * 1024)  # 40 × 512 KiB = 20 MiB together, over the 16 MiB default of waveBytes
    async with caller(world, "/mcp/pipes") as alice:
        result = await call(alice, "fan", {"q": text})
    assert result.is_error
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert content.text == (
        f"40 tool nodes that run together (t0, t1, t10, t11, t12 and 35 more) would send {fan * (len(text) + 12)} bytes "
        "of arguments, over the limit of 16777216 bytes; none of them was called"
    )
    assert world.log.of("take") == [], "no tool of the wave was called"


async def test_a_waves_results_together_over_the_bound_fail_the_node_whose_result_passes_it(world: World) -> None:
    # R: F10, F11 (each result is under resultBytes; five of them together are over waveBytes)
    fan = 5
    nodes = [node("in1", "input", outputs=["q"]), node("out1", "output", inputs=[f"r{i}" for i in range(fan)])]
    nodes += [tool_node(f"t{i}", "flood", inputs=["q"], outputs=["result"], config={"bytes": 3_500_000}) for i in range(fan)]
    edges = [edge(f"a{i}", "in1.q", f"t{i}.q") for i in range(fan)] + [edge(f"b{i}", f"t{i}.result", f"out1.r{i}") for i in range(fan)]
    await save(world, graph(nodes, edges, [pipeline("five")]))
    async with caller(world, "/mcp/pipes") as alice:
        result = await call(alice, "five", {"q": "go"})
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert re.fullmatch(
        r"node t[0-4] \(flood\) failed: the results of the 5 tool nodes that run together are over the limit of 16777216 bytes",
        content.text,
    ), content.text
