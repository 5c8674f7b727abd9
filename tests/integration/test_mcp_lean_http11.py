"""The lean call's POST on the lean HTTP/1.1 client (gateway/mcp/lean_http.py, issue 35), where it
differs from the session's httpx2 client: against real servers of either generation on loopback, the
POST goes on the session's own `Http11Pool` and keeps one connection; a 404 for an ended session
ends it and the pool replaces it; an answer over the bound, or content-encoded, is refused as
through httpx2; a redirect within the origin is followed (through httpx2); a cancelled call's
connection is never reused; a guarded target's connections go only to addresses the egress policy
admits, checked when the lean client connects; https and proxied endpoints stay on httpx2."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import mcp
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CollectorRegistry
from starlette.types import Receive, Scope, Send

from gateway.egress import UNUSABLE, EgressPolicy
from gateway.mcp.connection import McpConnection
from gateway.mcp.errors import AnswerTooLarge, session_ended
from gateway.mcp.lean import LeanHttp, lean_call
from gateway.mcp.metrics import PoolMetrics
from gateway.mcp.operations import relay_tool_call
from gateway.mcp.pool import SessionPool
from gateway.mcp.target import McpClients, McpTarget, mcp_http_client
from tests.support.http_server import ServerThread, replayed, request_body, serve
from tests.support.mcp_servers import McpServerState, http_app, recording_app

BOUND = 64 * 1024


class Seen:
    """What the test server saw of `tools/call` POSTs: (client port, tool name) in order; `held`
    is set once the `hold` tool runs, and `release` lets it answer."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.headers: list[dict[str, str]] = []
        self.held = threading.Event()
        self.release = threading.Event()


def tools_app(seen: Seen, hosts: list[str] | None = None) -> Any:
    """The test tools; `hosts`: Host headers the server accepts besides its own loopback ones."""
    server = MCPServer("lean-http11")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def big() -> str:
        return "x" * (2 * BOUND)

    @server.tool()
    async def hold() -> str:
        seen.held.set()
        await asyncio.to_thread(seen.release.wait, 10)
        return "held"

    security = TransportSecuritySettings(allowed_hosts=hosts) if hosts else None
    return server.streamable_http_app(transport_security=security)


def watched(seen: Seen, inner: Any) -> Any:
    """The tool server, recording each `tools/call` POST's client port and tool; `zipped` is
    answered with a gzip-encoded JSON body, and POSTs to `/old` are redirected to `/mcp` (307)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        if scope["path"] == "/old":
            await send({"type": "http.response.start", "status": 307,
                        "headers": [(b"location", b"/mcp"), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        body = await request_body(receive)
        decoded = json.loads(body)
        if isinstance(decoded, dict) and decoded.get("method") == "tools/call":
            name = decoded["params"]["name"]
            seen.calls.append((scope["client"][1], name))
            seen.headers.append({k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
            if name == "zipped":
                payload = gzip.compress(json.dumps({"jsonrpc": "2.0", "id": decoded["id"], "result": {"content": []}}).encode())
                await send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"application/json"), (b"content-encoding", b"gzip"),
                    (b"content-length", str(len(payload)).encode())]})
                await send({"type": "http.response.body", "body": payload})
                return
        await inner(scope, replayed(body, receive), send)

    return app


@pytest.fixture(scope="module")
def seen() -> Seen:
    return Seen()


@pytest.fixture(scope="module", params=["2026-07-28", "2025-11-25"])
def server(request: pytest.FixtureRequest, seen: Seen) -> Iterator[ServerThread]:
    app = tools_app(seen)
    if request.param == "2025-11-25":  # refuses the 2026-07-28 generation: clients open a session with a handshake
        app = recording_app(McpServerState(), app, legacy_only=True)
    with serve(watched(seen, app)) as running:
        yield running


async def opened(endpoint: str, clients: McpClients, target: McpTarget | None = None) -> McpConnection:
    connection = McpConnection(clients.factory(target or McpTarget(label="lean", endpoint=endpoint)), "lean/http11")
    await connection.open(10)
    return connection


@pytest.fixture
async def session(server: ServerThread) -> AsyncIterator[McpConnection]:
    clients = McpClients(max_answer_bytes=BOUND)
    connection = await opened(f"{server.url}/mcp", clients)
    try:
        yield connection
    finally:
        await connection.close()
        await clients.close()


def lean_of(connection: McpConnection) -> LeanHttp:
    assert connection.watch.lean is not None and connection.watch.lean.posts is not None
    return connection.watch.lean


async def outcome(connection: McpConnection, name: str, arguments: dict[str, Any], *, lean: bool = True) -> Any:
    """The call's result (as JSON) or its error, through the lean call or the SDK's."""

    async def operation(conn: McpConnection, client: mcp.Client) -> types.CallToolResult:
        if lean:
            return await lean_call(client, lean_of(conn), name, arguments, None, conn.watch.session_id)
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        return await client.session.send_request(request, types.CallToolResult)

    try:
        result = await connection.run(operation, 10)
    except MCPError as exc:
        return ("MCPError", exc.code, exc.message)
    except AnswerTooLarge as exc:
        return ("AnswerTooLarge", exc.limit)
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def ports_of(seen: Seen, name: str) -> list[int]:
    return [port for port, called in seen.calls if called == name]


async def test_calls_on_a_plain_http_session_go_on_the_lean_client_over_one_kept_connection(
    session: McpConnection, seen: Seen
) -> None:
    lean = lean_of(session)
    before, texts = lean.posts.sent, []  # type: ignore[union-attr]
    for i in range(5):
        texts.append((await outcome(session, "echo", {"text": f"call {i}"}))["content"][0]["text"])
    assert texts == [f"call {i}" for i in range(5)]
    assert lean.posts.sent - before == 5  # type: ignore[union-attr]
    assert len(set(ports_of(seen, "echo")[-5:])) == 1, "the streamed answers were read to their end: one connection"


async def test_the_lean_post_carries_the_headers_the_sdks_post_does(session: McpConnection, seen: Seen) -> None:
    # R: B14 (the session id, the protocol version, the connection's auth header: all as the SDK sends them)
    await outcome(session, "echo", {"text": "a"}, lean=False)
    await outcome(session, "echo", {"text": "a"})
    sdk, lean = ({k: v for k, v in sent.items() if k != "content-length"} for sent in seen.headers[-2:])  # the ids differ
    assert lean == sdk
    assert lean["accept-encoding"] == "identity" and ("mcp-session-id" in lean) == (session.watch.session_id is not None)


async def test_an_answer_over_the_bound_or_content_encoded_is_refused_as_through_httpx2(session: McpConnection) -> None:
    # R: B13
    lean = lean_of(session)
    before = lean.posts.sent  # type: ignore[union-attr]
    assert await outcome(session, "big", {}) == ("AnswerTooLarge", BOUND)
    assert await outcome(session, "zipped", {}) == await outcome(session, "zipped", {}, lean=False)
    assert (await outcome(session, "zipped", {}))[:2] == ("MCPError", types.PARSE_ERROR)
    assert (await outcome(session, "echo", {"text": "kept"}))["content"] == [{"type": "text", "text": "kept"}]
    assert lean.posts.sent - before == 4  # type: ignore[union-attr]


async def test_a_cancelled_call_drops_its_connection_and_the_next_call_gets_another(session: McpConnection, seen: Seen) -> None:
    seen.held.clear()
    seen.release.clear()

    async def operation(conn: McpConnection, client: mcp.Client) -> types.CallToolResult:
        lean = lean_of(conn)
        call = asyncio.ensure_future(lean_call(client, lean, "hold", {}, None, conn.watch.session_id))
        assert await asyncio.to_thread(seen.held.wait, 10), "the server never ran the tool"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        seen.release.set()
        return await lean_call(client, lean, "echo", {"text": "after"}, None, conn.watch.session_id)

    try:
        result = await session.run(operation, 20)
    finally:
        seen.release.set()
    assert result.content[0].text == "after"  # type: ignore[union-attr]
    assert ports_of(seen, "echo")[-1] != ports_of(seen, "hold")[-1], "the half-read connection was reused"


async def test_a_redirect_within_the_origin_is_followed_through_httpx2_from_then_on(server: ServerThread, seen: Seen) -> None:
    clients = McpClients(max_answer_bytes=BOUND)
    connection = await opened(f"{server.url}/old", clients)  # the handshake follows the 307 within the origin too
    try:
        lean = lean_of(connection)
        assert (await outcome(connection, "echo", {"text": "moved"}))["content"][0]["text"] == "moved"
        assert lean.posts.redirected and lean.posts.sent == 1  # type: ignore[union-attr]
        assert (await outcome(connection, "echo", {"text": "again"}))["content"][0]["text"] == "again"
        assert lean.posts.sent == 1, "later calls go straight through httpx2"  # type: ignore[union-attr]
    finally:
        await connection.close()
        await clients.close()


# R: B16
async def test_a_session_the_server_ended_gets_404_on_the_lean_client_and_is_replaced_and_the_call_retried() -> None:
    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as sessionful:
        clients = McpClients()
        pool = SessionPool(clients.factory(McpTarget(label="docs", endpoint=f"{sessionful.url}/mcp")), server="docs",
                           timeout=10, idle_seconds=60, metrics=(metrics := PoolMetrics(CollectorRegistry(), "docs")))
        pool.start()
        try:
            first = await pool.acquire("conv", "r1")
            ok = await pool.run("conv", "r1", relay_tool_call("count", {}, 10, set()))
            state.kill(state.opened[0])
            with pytest.raises(MCPError) as ended:  # the 404 alone, on the ended session
                await first.run(relay_tool_call("count", {}, 10, set()), 10)
            assert session_ended(ended.value)
            assert first.watch.ended and first.watch.status == 404
            again = await pool.run("conv", "r2", relay_tool_call("count", {}, 10, set()))
            second = await pool.acquire("conv", "r2")
        finally:
            await pool.close()
            await clients.close()
    assert ok.content[0].text == f"session {state.opened[0]} call 1"  # type: ignore[union-attr]
    assert again.content[0].text == f"session {state.opened[1]} call 1"  # type: ignore[union-attr]
    # the first session: its call, the 404 above, the pool's try that met the 404 too; then the retry on the replacement
    assert lean_of(first).posts.sent == 3 and lean_of(second).posts.sent == 1  # type: ignore[union-attr]
    assert metrics.replaced._value.get() == 1 and len(state.opened) == 2  # noqa: SLF001
    assert first.closed and lean_of(first).posts._pool._open == set()  # type: ignore[union-attr]  # noqa: SLF001 - closed with its session


class FlipResolver:
    """Resolves every name to `address` (the test changes it), recording the names asked."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        return [self.address]


async def test_a_guarded_targets_lean_connections_go_only_to_addresses_the_egress_policy_admits() -> None:
    # R: F3 (checked where the lean client connects: DNS can answer differently after the session opened)
    resolver = FlipResolver("127.0.0.1")
    clients = McpClients(max_answer_bytes=BOUND, egress=EgressPolicy(["127.0.0.0/8"], resolve=resolver, own=[]))
    seen = Seen()
    with serve(watched(seen, tools_app(seen, ["tools.test:*"]))) as server:
        endpoint = f"http://tools.test:{server.port}/mcp"
        target = McpTarget(label="guarded", endpoint=endpoint, guarded=True)
        connection = await opened(endpoint, clients, target)
        try:
            resolver.address = "10.9.9.9"  # the lean client has no connection yet: its first one is checked
            resolver.asked.clear()
            with pytest.raises(httpx2.ConnectError, match=f"^{UNUSABLE}$"):
                await outcome(connection, "echo", {"text": "x"})
            assert resolver.asked == ["tools.test"] and seen.calls == []
            resolver.address = "127.0.0.1"
            assert (await outcome(connection, "echo", {"text": "ok"}))["content"][0]["text"] == "ok"
            assert lean_of(connection).posts.sent == 1  # type: ignore[union-attr]
        finally:
            await connection.close()
            await clients.close()


def test_only_plain_http_endpoints_without_a_proxy_or_credentials_get_the_lean_client(monkeypatch: pytest.MonkeyPatch) -> None:
    http = mcp_http_client()
    assert LeanHttp(http, "http://tools.example/mcp", BOUND).posts is not None
    assert LeanHttp(http, "https://tools.example/mcp", BOUND).posts is None
    assert LeanHttp(http, "http://user:secret@tools.example/mcp", BOUND).posts is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert LeanHttp(http, "http://tools.example/mcp", BOUND).posts is None


@pytest.mark.parametrize("written", ["http://LocalHost:{port}/mcp", "http://localhost:{port}/x/../mcp"])
async def test_the_lean_post_writes_host_and_path_as_httpx2_does_for_an_endpoint_written_unusually(written: str) -> None:
    # R: B14 — a server that checks Host (the SDK's DNS-rebinding protection) accepted the session
    # (httpx2, normalised) and refused every lean call (Host as typed: `LocalHost:…`)
    calls = Seen()
    with serve(watched(calls, tools_app(calls, hosts=["localhost:*"]))) as running:
        clients = McpClients()
        connection = await opened(written.format(port=running.port), clients)
        try:
            lean = lean_of(connection)
            result = await outcome(connection, "echo", {"text": "through"})
            assert result["content"][0]["text"] == "through"
            assert lean.posts.sent == 1  # type: ignore[union-attr]
            assert calls.headers[-1]["host"] == f"localhost:{running.port}"
        finally:
            await connection.close()
            await clients.close()
