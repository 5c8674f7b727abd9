"""A tool call on an open session without the SDK client's transport (gateway/mcp/lean.py, issue 35):
against a real server of either generation (2026-07-28, and 2025-11-25 with a session id), every
outcome — a result, a tool's failure, progress, an answer over the bound, and each way a server can
answer badly — comes back exactly as the SDK's own call gives it (the same result, or the same
error code and text)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import mcp
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import Receive, Scope, Send

from gateway.mcp.connection import McpConnection
from gateway.mcp.errors import AnswerTooLarge, McpCallFailed
from gateway.mcp.lean import can_lean, lean_call
from gateway.mcp.target import McpClients, McpTarget
from tests.support.http_server import ServerThread, replayed, request_body, serve
from tests.support.mcp_servers import McpServerState, recording_app

BOUND = 64 * 1024


def tools_app() -> Any:
    server = MCPServer("lean-tools")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def fails() -> str:
        raise ToolError("it failed")

    @server.tool()
    async def big() -> str:
        return "x" * (2 * BOUND)

    @server.tool()
    async def counts(ctx: Context) -> str:
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3, f"step {step}")
        return "counted"

    return server.streamable_http_app()


BAD_ANSWERS: dict[str, tuple[int, str, bytes]] = {
    "status500": (500, "text/plain", b"oops"),
    "status404": (404, "text/plain", b"gone"),
    "status400_rpc": (400, "application/json", b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad params"}}'),
    "accepted": (202, "text/plain", b""),
    "plain_text": (200, "text/plain", b"hello"),
    "broken_json": (200, "application/json", b"{"),
    "stream_without_answer": (200, "text/event-stream", b": nothing\r\n\r\n"),
    "redirect": (307, "text/plain", b""),
}


def answering_badly(inner: Any) -> Any:
    """The tool server, except that a `tools/call` of a name in BAD_ANSWERS is answered that way."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body = await request_body(receive)
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        name = decoded.get("params", {}).get("name") if isinstance(decoded, dict) and decoded.get("method") == "tools/call" else None
        if name in BAD_ANSWERS:
            status, kind, payload = BAD_ANSWERS[name]
            headers = [(b"content-type", kind.encode()), (b"content-length", str(len(payload)).encode())]
            if status == 307:
                headers.append((b"location", b"http://example.invalid/elsewhere"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        await inner(scope, replayed(body, receive), send)

    return app


@pytest.fixture(scope="module", params=["2026-07-28", "2025-11-25"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    app = tools_app()
    if request.param == "2025-11-25":  # refuses the 2026-07-28 generation: clients open a session with a handshake
        app = recording_app(McpServerState(), app, legacy_only=True)
    with serve(answering_badly(app)) as running:
        yield running


@pytest.fixture
async def session(server: ServerThread) -> AsyncIterator[tuple[McpConnection, McpClients]]:
    clients = McpClients(max_answer_bytes=BOUND)
    connection = McpConnection(clients.factory(McpTarget(label="lean", endpoint=f"{server.url}/mcp")), "lean/test")
    await connection.open(10)
    try:
        yield connection, clients
    finally:
        await connection.close()
        await clients.close()


async def outcome(connection: McpConnection, name: str, arguments: dict[str, Any], *, lean: bool, progress: Any = None) -> Any:
    """The call's result (as JSON) or its error (kind, code, text), through the lean call or the SDK's."""

    async def operation(conn: McpConnection, client: mcp.Client) -> types.CallToolResult:
        if lean:
            assert conn.watch.lean is not None and can_lean(client, conn.watch.lean)
            return await lean_call(client, conn.watch.lean, name, arguments, progress, conn.watch.session_id)
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        return await client.session.send_request(request, types.CallToolResult, progress_callback=progress)

    try:
        result = await connection.run(operation, 10)
    except MCPError as exc:
        return ("MCPError", exc.code, exc.message)
    except AnswerTooLarge as exc:
        return ("AnswerTooLarge", exc.limit)
    except McpCallFailed as exc:  # the session watch saw the server end the session
        return (type(exc).__name__, exc.reason)
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("name, arguments", [
    ("echo", {"text": "hello"}), ("fails", {}), ("no_such_tool", {}), ("echo", {}), ("big", {}),
])
async def test_a_call_comes_back_as_the_sdk_gives_it(session: tuple[McpConnection, McpClients], name: str, arguments: dict[str, Any]) -> None:
    connection, _ = session
    assert await outcome(connection, name, arguments, lean=True) == await outcome(connection, name, arguments, lean=False)


async def test_an_answer_over_the_bound_is_cut_while_read_and_the_session_kept(session: tuple[McpConnection, McpClients]) -> None:
    # R: B13
    connection, _ = session
    assert await outcome(connection, "big", {}, lean=True) == ("AnswerTooLarge", BOUND)
    assert (await outcome(connection, "echo", {"text": "after"}, lean=True))["content"] == [{"type": "text", "text": "after"}]


async def test_progress_during_a_call_reaches_the_callback_as_with_the_sdk(session: tuple[McpConnection, McpClients]) -> None:
    connection, _ = session
    seen: dict[bool, list[tuple[float, float | None, str | None]]] = {True: [], False: []}
    for lean in (True, False):

        async def progress(value: float, total: float | None, message: str | None, lean: bool = lean) -> None:
            seen[lean].append((value, total, message))

        assert (await outcome(connection, "counts", {}, lean=lean, progress=progress))["content"][0]["text"] == "counted"
    assert seen[True] == seen[False] == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("name", list(BAD_ANSWERS))
async def test_a_bad_answer_fails_with_the_sdks_error(server: ServerThread, name: str) -> None:
    outcomes = []
    for lean in (True, False):  # each on its own session: a 404 ends the session it came on
        clients = McpClients(max_answer_bytes=BOUND)
        connection = McpConnection(clients.factory(McpTarget(label="lean", endpoint=f"{server.url}/mcp")), "lean/test")
        await connection.open(10)
        try:
            outcomes.append(await outcome(connection, name, {}, lean=lean))
        finally:
            await connection.close()
            await clients.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] in ("MCPError", "SessionLost")


async def test_a_handshake_session_is_called_with_its_session_id(session: tuple[McpConnection, McpClients]) -> None:
    connection, _ = session
    assert (await outcome(connection, "echo", {"text": "x"}, lean=True))["content"] == [{"type": "text", "text": "x"}]
    assert (connection.watch.session_id is None) == (connection._client.session.protocol_version == "2026-07-28")  # noqa: SLF001
