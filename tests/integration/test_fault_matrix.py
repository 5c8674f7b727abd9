"""The fault matrix (issue 6, "Prove it holds"): one test per fault, each asserting exactly what the
client sees — the status and OpenAI error envelope, or the text the model reads for a failed tool —
and that nothing is left behind.

Rows: an MCP server down at start-up / dying mid-call / hanging past `timeoutSeconds` / ending
sessions / answering with a tool error / with 10 MB of text / with binary content; an upstream
answering 429 / 500 / malformed JSON / too late / cutting its stream; a client leaving mid-stream;
the Bridge's audit store failing.

"Nothing left behind" is checked the same way in every gateway row (`Watched.nothing_left`), after
the sessions' idle lifetime (`sessionIdleSeconds: IDLE`):
- the gateway's event loop runs exactly the tasks it ran before the first request (no session,
  call, opening or stream task is stuck);
- `toolgate_mcp_sessions_open` is 0 and the MCP server has no live session (each session the
  gateway opened was deleted with DELETE, or ended by the server);
- the upstream is serving no request; once the gateway has stopped, neither the upstream nor the
  MCP server holds a connection from it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.records import AuditRecord
from gateway.bridge.store_sqlite import SqliteStore
from tests.support.bridge_servers import CallLog, bridge_app, mcp_http, tool_server
from tests.support.faults import (
    FAULT_TOOLS,
    ActiveRequests,
    FaultState,
    FaultSubprocess,
    big_text,
    fault_app,
    free_port,
    loop_tasks,
    metric,
    open_connections,
    serve_on,
)
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import PNG
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

IDLE = 1.0
"""`sessionIdleSeconds` of every row: leftovers are looked for once it has passed. The turns of one
row follow each other within a few loopback round trips, far inside it, so a row that expects the
next turn to reuse its session is not at the mercy of the idle close."""
USER = [{"role": "user", "content": "hi"}]
FAULT_TOOL_NAMES = [tool.name for tool in FAULT_TOOLS]


@dataclass
class Model:
    """The scripted upstream, its server and a count of the requests it is still serving."""

    script: ScriptedUpstream
    server: ServerThread
    watch: ActiveRequests

    @property
    def url(self) -> str:
        return self.server.url

    def tool_text(self, request: int) -> str:
        """What the model read as the last tool result in upstream request number `request`."""
        message = self.script.requests[request]["messages"][-1]
        assert message["role"] == "tool"
        return str(message["content"])


@pytest.fixture
def model() -> Iterator[Model]:
    script = ScriptedUpstream()
    watch = ActiveRequests(script.app)
    with serve(watch) as server:
        try:
            yield Model(script, server, watch)
        finally:
            script.release.set()


@pytest.fixture
def state() -> FaultState:
    return FaultState()


@pytest.fixture
def mcp(state: FaultState) -> Iterator[ServerThread]:
    with serve(fault_app(state)) as server:
        try:
            yield server
        finally:
            state.release.set()  # a `hang` still waiting must not hold the server's shutdown


def bridge(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp_bridge", "id": "docs", "endpoint": url, "timeoutSeconds": 5, "sessionIdleSeconds": IDLE, **fields}


@dataclass
class Watched:
    """A running gateway and what it ran before the first request."""

    gw: ServerThread
    baseline: Counter[str]
    model: Model
    states: Sequence[FaultState]

    @property
    def url(self) -> str:
        return self.gw.url

    def nothing_left(self) -> None:
        """Every leftover check that can be made while the gateway runs (see the module doc)."""
        for state in self.states:
            assert wait_until(lambda: state.live_sessions == []), f"sessions left open on the MCP server: {state.live_sessions}"
        assert wait_until(lambda: self.model.watch.active == 0), "the upstream is still serving a request"
        assert wait_until(lambda: loop_tasks(self.gw) == self.baseline), f"tasks left: {loop_tasks(self.gw) - self.baseline}"
        assert metric(self.url, "toolgate_mcp_sessions_open", server="docs") == 0


@contextmanager
def watched_gateway(
    config: dict[str, Any], model: Model, states: Sequence[FaultState] = (), servers: Sequence[ServerThread] = ()
) -> Iterator[Watched]:
    """The gateway for `config`; on a clean exit, nothing is left behind, and once it has stopped the
    upstream and `servers` hold no connection from it."""
    with running_gateway(config) as gw:
        watched = Watched(gw, loop_tasks(gw), model, states)
        yield watched
        watched.nothing_left()
    for server in (model.server, *servers):
        assert wait_until(lambda: open_connections(server) == 0), f"{server.url} still holds connections from the stopped gateway"


def ask(watched: Watched, conversation: str = "c", **kwargs: Any) -> Any:
    """One non-streamed request through the official SDK, in conversation `conversation`."""
    with client(watched.gw, **{"X-Conversation-Id": conversation}) as sdk:
        return sdk.chat.completions.create(model="assistant", messages=USER, **kwargs)


def count_metric(watched: Watched, status: str) -> float:
    return metric(watched.url, "toolgate_mcp_tool_calls_total", server="docs", status=status)


# -- MCP server faults ---------------------------------------------------------------------------


# R: B13
def test_mcp_server_down_at_start_up_the_gateway_serves_without_its_tools_and_uses_them_once_it_is_up(model: Model) -> None:
    port = free_port()
    state = FaultState()
    config = simple_config(model.url, [bridge(f"http://127.0.0.1:{port}/mcp", prefetchTool="count", prefetchLabel="Context")])
    model.script.push(Reply(content="answered without tools"))
    with ExitStack() as later, watched_gateway(config, model, [state]) as gw:
        assert httpx2.get(gw.url + "/readyz").status_code == 200
        assert ask(gw).choices[0].message.content == "answered without tools"
        first = model.script.requests[0]
        assert first["messages"] == [{"role": "user", "content": "hi\n\n## Context\nthe tool failed: the MCP server could not be reached"}]
        assert "tools" not in first
        assert count_metric(gw, "failed") == 1

        later.enter_context(serve_on(fault_app(state), port))  # the server comes up; the gateway is not restarted
        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="answered with tools"))
        assert ask(gw).choices[0].message.content == "answered with tools"
        (session,) = state.opened
        assert model.script.requests[1]["messages"][0]["content"] == f"hi\n\n## Context\nsession {session} call 1"
        assert [t["function"]["name"] for t in model.script.requests[1]["tools"]] == FAULT_TOOL_NAMES
        assert model.tool_text(2) == f"session {session} call 2"


# R: B13, B16
def test_mcp_server_dying_mid_call_gives_the_model_the_tool_failed_and_later_turns_do_not_hang(model: Model) -> None:
    server = FaultSubprocess()
    try:
        config = simple_config(model.url, [bridge(server.url)])
        model.script.push(Reply(tool_calls=[("count", {})]), Reply(tool_calls=[("exit", {})]), Reply(content="carried on"))
        with watched_gateway(config, model) as gw:
            assert ask(gw).choices[0].message.content == "carried on"
            assert server.process.wait(10) == 17, "the server process ended itself inside the call"
            assert re.fullmatch(r"session [0-9a-f]{32} call 1", model.tool_text(1))
            assert model.tool_text(2) == "the tool failed: the MCP server could not be reached"

            model.script.push(Reply(content="still answering"))  # the next turn: offered no tools, it answers
            assert ask(gw).choices[0].message.content == "still answering"
            assert "tools" not in model.script.requests[3]
            assert count_metric(gw, "failed") == 1
    finally:
        server.stop()


# R: B13, B17
def test_mcp_call_hanging_past_timeout_seconds_fails_is_cancelled_on_the_server_and_keeps_the_session(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp", timeoutSeconds=0.5)])
    model.script.push(Reply(tool_calls=[("hang", {})]), Reply(content="gave up waiting"))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        assert ask(gw).choices[0].message.content == "gave up waiting"
        assert model.tool_text(1) == "the tool failed: no answer within 0.5s"
        assert state.wait_for(lambda: state.cancelled["hang"] == 1 and state.hanging == 0), "the hanging call was not cancelled on the server"

        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="next turn"))
        ask(gw)
        (session,) = state.opened
        assert model.tool_text(3) == f"session {session} call 1"
        assert count_metric(gw, "failed") == 1


# R: B16
def test_mcp_server_ending_sessions_the_session_is_replaced_and_the_call_retried_once(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp")])
    with watched_gateway(config, model, [state], [mcp]) as gw:
        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="one"))
        ask(gw)
        (first,) = state.opened
        state.kill(first)  # the server ends the session: its id now gets 404
        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="two"))
        assert ask(gw).choices[0].message.content == "two"
        second = state.opened[1]
        assert model.tool_text(3) == f"session {second} call 1"
        assert metric(gw.url, "toolgate_mcp_sessions_replaced_total", server="docs") == 1

        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="three"))
        ask(gw)  # the replacement lists the tools for itself
        assert model.tool_text(5) == f"session {second} call 2"

        state.end_every_session = True  # now every session ends at once: one retry, then a failed call
        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="four"))
        assert ask(gw).choices[0].message.content == "four"
        assert model.tool_text(7) == "the tool failed: the MCP session ended"
        assert len(state.opened) == 3, "exactly one new session for the one retry"
        assert state.calls["count"] == 3
        assert metric(gw.url, "toolgate_mcp_sessions_replaced_total", server="docs") == 2


# R: B13
def test_mcp_tool_error_reaches_the_model_as_the_tool_failed_beside_a_call_that_worked(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp")])
    model.script.push(Reply(tool_calls=[("fail", {}), ("count", {})]), Reply(content="one of two worked"))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        assert ask(gw).choices[0].message.content == "one of two worked"
        (session,) = state.opened
        results = [m["content"] for m in model.script.requests[1]["messages"][-2:]]
        assert results == ["the tool failed: the disk is full", f"session {session} call 1"]
        assert (count_metric(gw, "error"), count_metric(gw, "ok")) == (1, 1)


# R: B1
def test_mcp_tool_returning_10_mb_of_text_is_run_once_and_read_whole(model: Model, state: FaultState, mcp: ServerThread) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp")])
    model.script.push(Reply(tool_calls=[("big", {"megabytes": 10})]), Reply(content="that was long"))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        assert ask(gw).choices[0].message.content == "that was long"
        assert model.tool_text(1) == big_text(10)
        assert state.calls["big"] == 1, "a big answer must not make the gateway run the tool again"
        assert len(state.opened) == 1, "a big answer does not end the session"
        assert count_metric(gw, "ok") == 1


# R: B13
def test_mcp_tool_answer_over_the_size_cap_fails_once_without_a_retry_and_keeps_the_session(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp", resultBytes=1024 * 1024)])  # the cap, scaled down
    model.script.push(Reply(tool_calls=[("big", {"megabytes": 2})]), Reply(tool_calls=[("count", {})]), Reply(content="too long"))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        assert ask(gw).choices[0].message.content == "too long"
        assert model.tool_text(1) == "the tool failed: the MCP server's answer is over the limit of 1048576 bytes"
        (session,) = state.opened
        assert model.tool_text(2) == f"session {session} call 1", "the session outlives an answer it could not read"
        assert state.calls["big"] == 1, "the same call would fail the same way: it is not run again"
        assert count_metric(gw, "failed") == 1


# R: B10
def test_mcp_tool_returning_binary_content_is_reported_by_mime_type_and_size(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp")])
    model.script.push(Reply(tool_calls=[("binary", {})]), Reply(content="saw the attachments"))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        assert ask(gw).choices[0].message.content == "saw the attachments"
        assert model.tool_text(1) == (
            "three attachments\n[binary content: image/png, 64 bytes]\n[binary content: audio/wav, 32 bytes]\n"
            "[binary content: application/pdf, 400 bytes]"
        )
        assert base64.b64encode(PNG).decode() not in json.dumps(model.script.requests)


# -- upstream faults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "status", "error"),
    [
        pytest.param(
            Reply(status=429, error_message="slow down"), 429,
            {"message": "upstream 'scripted' is rate limiting requests: slow down", "type": "rate_limit_error", "code": "upstream_rate_limited"},
            id="429",
        ),
        pytest.param(
            Reply(status=500), 502,
            {"message": "upstream 'scripted' failed (HTTP 500): scripted failure", "type": "upstream_error", "code": "bad_gateway"},
            id="500",
        ),
        pytest.param(
            Reply(raw=b'{"choices": [{"message": '), 502,
            {"message": "upstream 'scripted' returned a body that is not JSON", "type": "upstream_error", "code": "bad_gateway"},
            id="malformed-json",
        ),
    ],
)
# R: G5, G6
def test_upstream_error_reaches_the_client_as_an_openai_error_and_the_mcp_session_is_still_closed(
    model: Model, state: FaultState, mcp: ServerThread, reply: Reply, status: int, error: dict[str, Any]
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp", prefetchTool="count")])
    model.script.push(reply)
    with watched_gateway(config, model, [state], [mcp]) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw)
        assert caught.value.status_code == status
        assert caught.value.response.json() == {"error": {**error, "param": None}}
        assert metric(gw.url, "toolgate_requests_total", route="assistant", status=str(status)) == 1
        assert state.calls["count"] == 1 and len(state.opened) == 1  # the prefetch used a pooled session


# R: G5, G6
def test_upstream_answering_too_late_gives_504_and_its_connection_is_dropped(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp", prefetchTool="count")])
    config["upstreams"][0]["timeout_seconds"] = 0.5
    model.script.push(Reply(hang=True))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw)
        assert caught.value.status_code == 504
        assert caught.value.response.json() == {"error": {
            "message": "upstream 'scripted' did not answer within 0.5s", "type": "upstream_error", "code": "upstream_timeout", "param": None}}
        # the upstream's handler still hangs, but the gateway is no longer waiting on that connection
        assert wait_until(lambda: open_connections(model.server) == 0), "the timed-out upstream connection is still open"
        model.script.release.set()


# R: G1, G6
def test_upstream_stream_cut_in_the_middle_ends_with_an_error_event_after_the_text_so_far(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp", prefetchTool="count")])
    model.script.push(Reply(content="one two three four", cut_stream_after=3))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        received: list[str] = []
        with client(gw.gw, **{"X-Conversation-Id": "c"}) as sdk:
            stream = sdk.chat.completions.create(model="assistant", messages=USER, stream=True)
            with pytest.raises(openai.APIError) as caught:
                for chunk in stream:
                    received.extend(choice.delta.content or "" for choice in chunk.choices)
        assert "".join(received) == "one two "
        assert caught.value.message == "upstream 'scripted' ended the stream without [DONE]"
        assert caught.value.body == {
            "message": "upstream 'scripted' ended the stream without [DONE]", "type": "upstream_error", "code": "bad_gateway", "param": None}
        assert wait_until(lambda: metric(gw.url, "toolgate_requests_total", route="assistant", status="502") == 1)


# -- the client -----------------------------------------------------------------------------------


# R: G1, B14
def test_client_leaving_mid_stream_cancels_the_upstream_request_and_returns_the_session_to_the_pool(
    model: Model, state: FaultState, mcp: ServerThread
) -> None:
    config = simple_config(model.url, [bridge(mcp.url + "/mcp")])
    model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="one two three four", hang_stream_after=3))
    with watched_gateway(config, model, [state], [mcp]) as gw:
        with client(gw.gw, **{"X-Conversation-Id": "c"}) as sdk:
            stream = sdk.chat.completions.create(model="assistant", messages=USER, stream=True)
            received = ""
            for chunk in stream:  # the tool round, then the answer's first words
                received += "".join(choice.delta.content or "" for choice in chunk.choices)
                if received:
                    break
            stream.close()  # the client goes away while the upstream is still writing
        assert received == "one "
        assert len(model.script.requests) == 2 and model.watch.served == 2
        assert wait_until(lambda: model.watch.active == 0), "the upstream request was not cancelled"
        assert not model.script.release.is_set()  # it ended because the gateway dropped it, not because it finished
        assert wait_until(lambda: metric(gw.url, "toolgate_requests_total", route="assistant", status="499") == 1)

        model.script.push(Reply(tool_calls=[("count", {})]), Reply(content="welcome back"))
        assert ask(gw).choices[0].message.content == "welcome back"
        (session,) = state.opened
        assert model.tool_text(1) == f"session {session} call 1"
        assert model.tool_text(3) == f"session {session} call 2", "the next turn reuses the conversation's session"


# -- the Bridge -----------------------------------------------------------------------------------


class FlakyStore(SqliteStore):
    """A store whose audit inserts fail while `broken` is set."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.broken = threading.Event()
        self.broken.set()

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        if self.broken.is_set():
            raise OSError("disk on fire")
        await super().append_audit(records)


# R: F5
async def test_bridge_audit_store_failing_leaves_tool_calls_succeeding_counts_the_drops_and_the_writer_goes_on(
    tmp_path: Path,
) -> None:
    tools_log = CallLog()
    store = FlakyStore(tmp_path / "audit.db")
    with serve(tool_server(tools_log, delay=0.01)) as tools:
        config = BridgeConfig.model_validate(
            {"database": "bridge.db", "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp"}],
             "sessionIdleSeconds": 0.5}  # alice's upstream session (kept between her calls, F15) closes soon after
        )
        app = bridge_app(config, tmp_path, store=store)
        with serve(app.app) as bridge_server:
            baseline = loop_tasks(bridge_server)

            async def flushed() -> None:
                assert bridge_server.loop is not None
                done = asyncio.run_coroutine_threadsafe(app.service.audit.flushed(), bridge_server.loop)
                await asyncio.wait_for(asyncio.wrap_future(done), timeout=10)

            async def call(text: str) -> str:
                transport = streamable_http_client(f"{bridge_server.url}/mcp", http_client=mcp_http("alice-key"))
                async with Client(transport, mode="legacy") as alice:
                    result = await alice.call_tool("tools__echo", {"text": text})
                assert result.is_error is False
                return str(result.content[0].text)  # type: ignore[union-attr]

            assert [await call(str(i)) for i in range(3)] == ["0", "1", "2"]
            await flushed()
            dropped = app.registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"})
            assert dropped == 3
            store.broken.clear()  # the store recovers: the writer task survived and writes again
            assert await call("after") == "after"
            await flushed()
            assert app.registry.get_sample_value("toolgate_audit_written_total") == 1
            async with mcp_http("alice-key") as http:
                records = (await http.get(f"{bridge_server.url}/audit")).json()["data"]
            assert [(r["resource"], r["status"]) for r in records] == [("tools__echo", "success")]
            assert wait_until(lambda: loop_tasks(bridge_server) == baseline), f"tasks left: {loop_tasks(bridge_server) - baseline}"
        assert wait_until(lambda: open_connections(tools) == 0), "the Bridge left connections open to the tool server"
    assert tools_log.count("echo") == 4
