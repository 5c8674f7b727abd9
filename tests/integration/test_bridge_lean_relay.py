"""The lean relay (issue 35, gateway/bridge/fast_path.py): the hot 2026-07-28 requests on `/mcp` are
answered without the SDK's server stack, and answered exactly as the SDK's path answers them — the
same status, content type and JSON-RPC message — while everything else still goes to the SDK.

Each request is sent twice to one running Bridge: with the lean relay on, and with it off (the
SDK's path), and the two answers are compared."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge import fast_path
from gateway.bridge.fast_path import LeanRelay
from tests.support.bridge_servers import BridgeApp, CallLog, audit_flushed, bridge_app, mcp_http, tool_server
from tests.support.conformance import ConformanceFixture
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import McpServerState, http_app

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@dataclass
class World:
    app: BridgeApp
    server: ServerThread
    state: McpServerState
    log: CallLog

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"

    @property
    def lean(self) -> LeanRelay:
        manager = self.app.service._endpoint.manager  # noqa: SLF001
        assert manager is not None
        lean = getattr(manager.app, "lean", None)
        assert isinstance(lean, LeanRelay)
        return lean


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    fixture = ConformanceFixture().start()
    state, log = McpServerState(), CallLog()
    try:
        with serve(http_app(state, legacy_only=True)) as python_server, serve(tool_server(log, delay=0.0)) as tools:
            config = BridgeConfig.model_validate({
                "database": "lean.db",
                "connections": [
                    {"id": "conf", "owner": "alice", "endpoint": fixture.url},
                    {"id": "py", "owner": "alice", "endpoint": f"{python_server.url}/mcp"},
                    {"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp"},
                ],
            })
            app = bridge_app(config, tmp_path_factory.mktemp("lean"))
            with serve(app.app) as server:
                yield World(app, server, state, log)
    finally:
        fixture.stop()


def headers(method: str | None = "tools/call", **extra: str) -> dict[str, str]:
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": VERSION}
    if method is not None:
        sent["mcp-method"] = method
    return {**sent, **extra}


def call(name: str, arguments: dict[str, Any] | None = None, request_id: Any = 7) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": META}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def post(world: World, body: Any, sent: dict[str, str], *, lean: bool) -> tuple[int, str, Any, int]:
    """(status, content type, JSON body or None, requests the lean relay answered meanwhile)."""
    relay = world.lean
    before = relay.served
    world.app.service._endpoint.manager.app.lean = relay if lean else None  # noqa: SLF001
    try:
        async with mcp_http("alice-key") as http:
            response = await http.post(world.url, content=json.dumps(body), headers=sent)
    finally:
        world.app.service._endpoint.manager.app.lean = relay  # noqa: SLF001
    kind = response.headers.get("content-type", "").partition(";")[0]
    decoded = json.loads(response.content) if kind == "application/json" and response.content else None
    return response.status_code, kind, decoded, relay.served - before


TAKEN = {
    "a tool's result": (call("tools__echo", {"text": "hi"}), headers(**{"mcp-name": "tools__echo"})),
    "a tool's failure": (call("tools__boom", {}), headers(**{"mcp-name": "tools__boom"})),
    "an unknown tool": (call("nope__nothing", {}), headers(**{"mcp-name": "nope__nothing"})),
    "a tool called without arguments": (call("tools__echo", None, "req-1"), headers(**{"mcp-name": "tools__echo"})),
    "the tool list": ({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}}, headers("tools/list")),
    "a resource": (
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "test://static-text", "_meta": META}},
        headers("resources/read", **{"mcp-name": "test://static-text"}),
    ),
    "a resource nobody has": (
        {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "test://nothing", "_meta": META}},
        headers("resources/read", **{"mcp-name": "test://nothing"}),
    ),
    "a notification": ({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}, headers(None)),
}


@pytest.mark.parametrize("case", list(TAKEN))
async def test_a_hot_request_is_answered_by_the_lean_relay_exactly_as_by_the_sdk(world: World, case: str) -> None:
    body, sent = TAKEN[case]
    lean = await post(world, body, sent, lean=True)
    sdk = await post(world, body, sent, lean=False)
    assert lean[3] == 1 and sdk[3] == 0, "the lean relay answered the first, the SDK the second"
    assert lean[:3] == sdk[:3]


LEFT = {
    "a batch": ([call("tools__echo", {"text": "hi"})], headers()),
    "a request id that is a bool": (call("tools__echo", {"text": "hi"}, True), headers(**{"mcp-name": "tools__echo"})),
    "arguments that are not an object": (call("tools__echo", ["hi"]), headers(**{"mcp-name": "tools__echo"})),  # type: ignore[arg-type]
    "a params field the plain shape has not": (
        {**call("tools__echo", {"text": "hi"}), "params": {**call("tools__echo", {"text": "hi"})["params"], "task": {}}},
        headers(**{"mcp-name": "tools__echo"}),
    ),
    "an envelope naming another version": (
        {**call("tools__echo", {"text": "hi"}), "params": {"name": "tools__echo", "_meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}},
        headers(**{"mcp-name": "tools__echo"}),
    ),
    "a routing header that does not match the body": (call("tools__echo", {"text": "hi"}), headers(**{"mcp-name": "tools__boom"})),
    "no envelope": ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "tools__echo"}}, headers(**{"mcp-name": "tools__echo"})),
    "a cursor": ({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "x", "_meta": META}}, headers("tools/list")),
    "another method": ({"jsonrpc": "2.0", "id": 3, "method": "prompts/list", "params": {"_meta": META}}, headers("prompts/list")),
    "no event stream accepted": (call("tools__echo", {"text": "hi"}), headers(accept="application/json", **{"mcp-name": "tools__echo"})),
    "not JSON": ("{", headers()),
}


@pytest.mark.parametrize("case", list(LEFT))
async def test_what_is_not_plain_is_left_to_the_sdk(world: World, case: str) -> None:
    body, sent = LEFT[case]
    if case == "not JSON":
        async with mcp_http("alice-key") as http:
            before = world.lean.served
            response = await http.post(world.url, content=b"{", headers=sent)
        assert response.status_code == 400 and world.lean.served == before
        return
    lean = await post(world, body, sent, lean=True)
    sdk = await post(world, body, sent, lean=False)
    assert lean[3] == 0, "the SDK answered"
    assert lean[:3] == sdk[:3]


async def test_the_lean_relay_audits_every_call_it_answers(world: World) -> None:
    # R: F9
    lean = await post(world, call("tools__echo", {"text": "audited"}), headers(**{"mcp-name": "tools__echo"}), lean=True)
    assert lean[3] == 1 and lean[2]["result"]["content"] == [{"type": "text", "text": "audited"}]
    await audit_flushed(world.app, world.server)
    async with mcp_http("alice-key") as http:
        records = (await http.get(f"{world.server.url}/audit", params={"resource": "tools__echo"})).json()["data"]
    assert any(r["args"].get("text") == {"type": "string", "length": 7} and r["status"] == "success" and r["action"] == "mcp.tool_call"
               and r["scope"] == "federation" for r in records), json.dumps(records)[:1500]


async def test_progress_and_log_messages_of_a_call_reach_a_stateless_caller_on_an_event_stream(world: World) -> None:
    # R: F14
    seen: list[float] = []
    logged: list[Any] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    before = world.lean.served
    async with Client(streamable_http_client(world.url, http_client=mcp_http("alice-key")), mode="auto",
                      logging_callback=on_log) as alice:
        with_progress = await alice.call_tool("conf__test_tool_with_progress", {}, progress_callback=progress)
        with_logs = await alice.call_tool("conf__test_tool_with_logging", {}, meta={"io.modelcontextprotocol/logLevel": "info"})
    assert not with_progress.is_error and not with_logs.is_error
    assert world.lean.served - before >= 2
    assert seen == [0, 50, 100], "the three notifications the tool sends when called directly"
    assert logged == ["Tool execution started", "Tool processing data", "Tool execution completed"]


async def test_a_stateless_caller_that_leaves_cancels_its_call_at_the_connection(world: World) -> None:
    # R: F14
    before = world.lean.served
    async with mcp_http("alice-key") as http:
        request = asyncio.ensure_future(http.post(
            world.url, content=json.dumps(call("py__slow", {"delay": 30})), headers=headers(**{"mcp-name": "py__slow"})))
        started = await asyncio.to_thread(world.state.wait_for, lambda: world.state.calls["slow"] >= 1, 10)
        request.cancel()
    cancelled = await asyncio.to_thread(world.state.wait_for, lambda: world.state.calls["slow:cancelled"] >= 1, 10)
    assert started and cancelled, "the connection saw the cancellation"
    assert world.lean.served - before == 1


async def test_a_post_that_is_not_json_is_refused_by_the_sdk_as_before(world: World) -> None:
    sent = headers(**{"mcp-name": "tools__echo", "content-type": "text/plain"})
    lean = await post(world, call("tools__echo", {"text": "hi"}), sent, lean=True)
    assert lean[0] == 400 and lean[3] == 0, "a POST that is not JSON is the SDK's to refuse"


async def test_a_call_silent_for_the_ping_interval_is_kept_alive_on_an_event_stream(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R: F14 (the keep-alive runs beside the call: the answer commits to an event stream, pinged, then the result)
    monkeypatch.setattr(fast_path, "PING_SECONDS", 0.05)
    before = world.lean.served
    async with mcp_http("alice-key") as http:
        response = await http.post(
            world.url, content=json.dumps(call("py__slow", {"delay": 1.0})), headers=headers(**{"mcp-name": "py__slow"}))
    assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
    frames = response.text.split("\r\n\r\n")
    assert frames[0] == ": ping" and frames[-1] == "", "pings first, the stream ends after the result"
    result = frames[-2]
    assert set(frames[:-2]) == {": ping"}, "nothing but pings before the result"
    assert result.startswith("event: message\r\ndata: ")
    answer = json.loads(result.partition("data: ")[2])
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == "slow done"
    assert world.lean.served - before == 1
