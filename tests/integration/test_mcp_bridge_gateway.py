"""mcp_bridge through the real gateway, the official `openai` client and a scripted model
(B1–B4, B11–B14, B19, G4)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gateway.app import create_app
from gateway.config import parse_config
from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import HttpSubprocess, McpServerState, http_app
from tests.support.plugins import Recorder
from tests.support.upstream import Reply, ScriptedUpstream

CANARY = canary.MCP_TOKEN
ALICE_KEY, BOB_KEY = canary.ALICE_KEY, canary.BOB_KEY
KEYS = {
    "mode": "api_keys",
    "api_keys": [
        {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme"},
        {"key": canary.BOB_KEY_REF, "user_id": "bob", "org_id": "acme"},
    ],
}


@pytest.fixture
def state() -> McpServerState:
    return McpServerState(require_credential=True)


@pytest.fixture
def mcp_server(state: McpServerState) -> Iterator[ServerThread]:
    with serve(http_app(state, legacy_only=True)) as server:
        yield server


def bridge(url: str, **fields: Any) -> dict[str, Any]:
    """An mcp_bridge node sending the canary credential (B4)."""
    return {"type": "mcp_bridge", "id": "docs", "endpoint": url, "timeoutSeconds": 5, **canary.mcp_auth(), **fields}


def tool_message(upstream: ScriptedUpstream, request: int) -> str:
    return upstream.requests[request]["messages"][-1]["content"]


def ask(gw: ServerThread, key: str = ALICE_KEY, conversation: str | None = None, text: str = "hello") -> Any:
    headers = {"X-Conversation-Id": conversation} if conversation else {}
    return client(gw, key, **headers).chat.completions.create(model="assistant", messages=[{"role": "user", "content": text}])


# R: B1, B14
def test_three_turns_of_one_conversation_share_one_session_and_another_conversation_gets_its_own(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")], auth=KEYS)
    with running_gateway(config) as gw:
        for conversation in ("c-1", "c-1", "c-1", "c-2"):
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="counted"))
            assert ask(gw, conversation=conversation).choices[0].message.content == "counted"
    first, second = state.opened
    seen = [tool_message(upstream, i) for i in (1, 3, 5, 7)]
    assert seen == [f"session {first} call 1", f"session {first} call 2", f"session {first} call 3", f"session {second} call 1"]
    offered = [t["function"]["name"] for t in upstream.requests[0]["tools"]]
    assert offered == ["count", "echo", "fail", "slow", "image", "secret_tool", "pid", "whoami"]


# R: B14, G4
def test_two_callers_sending_the_same_conversation_id_never_share_a_session(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")], auth=KEYS)
    with running_gateway(config) as gw:
        for key in (ALICE_KEY, BOB_KEY, ALICE_KEY):
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="ok"))
            ask(gw, key, conversation="shared-id")
    alice, bob = state.opened
    assert [tool_message(upstream, i) for i in (1, 3, 5)] == [
        f"session {alice} call 1",
        f"session {bob} call 1",
        f"session {alice} call 2",
    ]


# R: B15
def test_an_anonymous_request_opens_its_own_session_and_closes_it_when_it_ends(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    with running_gateway(simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")])) as gw:
        for _ in range(2):
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="ok"))
            client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
            assert state.live_sessions == []
    assert len(state.opened) == 2
    assert state.deleted == state.opened


# R: B2
def test_the_cap_counts_parallel_calls_and_ends_with_a_tool_less_answer(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp", maxConsecutiveToolCalls=3)], auth=KEYS)
    upstream.push(
        Reply(tool_calls=[("count", {}), ("count", {})]),
        Reply(tool_calls=[("count", {}), ("count", {})]),
        Reply(content="final answer"),
    )
    with running_gateway(config) as gw:
        response = client(gw, ALICE_KEY).chat.completions.with_raw_response.create(
            model="assistant", messages=[{"role": "user", "content": "go"}]
        )
    body = response.http_response.json()
    assert body["choices"][0]["message"]["content"] == "final answer"
    assert body["toolgate"] == {"tool_calls": 3, "rounds": 3, "tool_cap_reached": True}
    assert state.calls["count"] == 3
    assert upstream.requests[2]["tool_choice"] == "none"


# R: B3
def test_tools_outside_the_filter_are_never_offered_to_the_model(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp", toolFilter=["count", "echo"])], auth=KEYS)
    with running_gateway(config) as gw:
        ask(gw)
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["count", "echo"]


# R: B3, G7
def test_a_model_call_to_a_tool_outside_the_filter_is_answered_with_an_error_and_not_run(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp", toolFilter=["count", "echo"])], auth=KEYS)
    upstream.push(Reply(tool_calls=[("secret_tool", {}), ("count", {})]), Reply(content="answered without it"))
    with running_gateway(config) as gw:
        response = ask(gw)
    assert response.choices[0].message.content == "answered without it"
    assert response.choices[0].message.tool_calls is None  # not handed to the client either
    results = [m["content"] for m in upstream.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "the tool failed: no tool named 'secret_tool' is offered here"
    assert results[1].startswith("session ")
    assert "secret_tool" not in state.calls and state.calls["count"] == 1


# R: G7
def test_with_a_tool_plugin_only_the_clients_own_tools_go_back_to_the_client(
    upstream: ScriptedUpstream, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")], auth=KEYS)
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    upstream.push(Reply(tool_calls=[("made_up", {})]), Reply(tool_calls=[("lookup", {"q": 1})]))
    with running_gateway(config) as gw:
        response = client(gw, ALICE_KEY).chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}], tools=[lookup])
    assert [c.function.name for c in response.choices[0].message.tool_calls] == ["lookup"]
    assert response.choices[0].finish_reason == "tool_calls"
    assert tool_message(upstream, 1) == "the tool failed: no tool named 'made_up' is offered here"


# R: B13
def test_a_stopped_server_yields_the_tool_failed_and_a_normal_answer(upstream: ScriptedUpstream) -> None:
    server = HttpSubprocess("--legacy-only")
    try:
        config = simple_config(upstream.url, [bridge(server.url)], auth=KEYS)
        with running_gateway(config) as gw:
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="first"))
            ask(gw, conversation="c")
            server.stop()
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="answered with what I have"))
            response = ask(gw, conversation="c")
    finally:
        server.stop()
    assert response.choices[0].message.content == "answered with what I have"
    assert tool_message(upstream, 3) == "the tool failed: the MCP server could not be reached"


# R: B11, B13
def test_a_prefetch_result_blocked_by_an_inspector_refuses_the_request_naming_the_source(
    upstream: ScriptedUpstream, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp", prefetchTool="echo", prefetchArguments={"q": "{{last_user_message}}"})])
    app = create_app(parse_config(config, "test", Path(".")))
    chain = app.state.gateway.routes["assistant"].chain
    chain.plugins.append(Recorder("guard", [], block_word="forbidden"))
    with serve(app) as gw:
        with pytest.raises(openai.BadRequestError) as refused:
            ask(gw, "anything", text="say forbidden things")
    error = refused.value.response.json()["error"]
    assert error["code"] == "content_blocked"
    assert error["message"] == "request refused by guard: content from docs/echo matched test.word (score 1.00)"
    assert upstream.requests == []


# R: B19
def test_two_bridges_with_colliding_tool_names_are_made_distinct_and_routed_back(upstream: ScriptedUpstream) -> None:
    states = [McpServerState(require_credential=True), McpServerState(require_credential=True)]
    with serve(http_app(states[0], legacy_only=True)) as one, serve(http_app(states[1])) as two:
        plugins = [bridge(one.url + "/mcp", id="one", toolFilter=["count"]), bridge(two.url + "/mcp", id="two", toolFilter=["count", "echo"])]
        upstream.push(Reply(tool_calls=[("one__count", {}), ("two__count", {}), ("echo", {"x": 1})]), Reply(content="ok"))
        with running_gateway(simple_config(upstream.url, plugins, auth=KEYS)) as gw:
            ask(gw)
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["one__count", "two__count", "echo"]
    assert states[0].calls == {"count": 1}
    assert states[1].calls == {"count": 1, "echo": 1}
    assert [m["content"] for m in upstream.requests[1]["messages"][-3:]] == [
        f"session {states[0].opened[0]} call 1",
        "session stateless call 1",
        '{"x": 1}',
    ]


# R: B4, G8
def test_the_auth_secret_reaches_the_server_and_never_logs_responses_metrics_or_errors(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    plugin = bridge(mcp_server.url + "/mcp", prefetchTool="fail", resources="docs://index\nmissing", timeoutSeconds=1)
    texts: list[str] = []
    with running_gateway(simple_config(upstream.url, [plugin], auth=KEYS)) as gw:
        upstream.push(Reply(tool_calls=[("fail", {}), ("slow", {"delay": 3}), ("count", {})]), Reply(content="ok"))
        raw = client(gw, ALICE_KEY, **{"X-Conversation-Id": "c"}).chat.completions.with_raw_response.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}]
        )
        texts.append(raw.http_response.text)
        state.end_every_session = True
        upstream.push(Reply(content="ok"))
        texts.append(ask(gw, conversation="c").model_dump_json())
        texts.append(httpx2.get(gw.url + "/metrics").text)
    assert state.auth_headers and set(state.auth_headers) == {f"Bearer {CANARY}"}
    texts += [str(r) for r in upstream.requests] + [caplog.text] + [r.getMessage() for r in caplog.records]
    assert [m["content"] for m in upstream.requests[1]["messages"][-3:]] == [
        "the tool failed: boom",
        "the tool failed: no answer within 1s",
        f"session {state.opened[0]} call 1",
    ]
    # "missing" is resolved from the server's resource listing: whether that listing is still
    # cached or is fetched again on a session the server ends at once is a race between the
    # concurrent reads, and either answer is right.
    assert upstream.requests[2]["messages"][0]["content"] in {
        "hello\n\n## fail\nthe tool failed: the MCP session ended\n\n"
        "## Resource docs://index\nthe resource could not be read: the MCP session ended\n\n"
        f"## Resource missing\nthe resource could not be read: {reason}"
        for reason in ("the MCP server lists no resource with that name or URI", "the MCP session ended")
    }
    assert "tools" not in upstream.requests[2]
    for text in texts:
        assert CANARY not in text
    assert 'toolgate_mcp_tool_calls_total{server="docs",status="failed"}' in texts[2]


# R: B4
def test_a_server_echoing_the_credential_in_a_tool_result_never_gets_it_to_the_model_or_the_client(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    upstream.push(Reply(tool_calls=[("whoami", {})]), Reply(content="ok"))
    with running_gateway(simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")], auth=KEYS)) as gw:
        assert ask(gw).choices[0].message.content == "ok"
    assert state.calls["whoami"] == 1
    assert tool_message(upstream, 1) == "the tool failed: bad credential [redacted]"


# R: B14, G4
def test_without_a_conversation_id_the_turns_of_one_conversation_share_the_derived_key_session(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    config = simple_config(upstream.url, [bridge(mcp_server.url + "/mcp")], auth=KEYS)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first question"}]
    with running_gateway(config) as gw:
        for turn in range(3):
            upstream.push(Reply(tool_calls=[("count", {})]), Reply(content=f"answer {turn}"))
            answer = client(gw, ALICE_KEY).chat.completions.create(model="assistant", messages=messages)
            messages += [{"role": "assistant", "content": answer.choices[0].message.content}, {"role": "user", "content": f"next {turn}"}]
        upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="other"))
        ask(gw, text="a different first message")
    first, second = state.opened
    assert [tool_message(upstream, i) for i in (1, 3, 5, 7)] == [
        f"session {first} call 1",
        f"session {first} call 2",
        f"session {first} call 3",
        f"session {second} call 1",
    ]


# R: B1, B5
def test_a_streamed_answer_runs_the_mcp_tool_calls_and_the_prefetch_before_the_final_turn(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread
) -> None:
    plugin = bridge(mcp_server.url + "/mcp", prefetchTool="echo", prefetchArguments={"q": "{{last_user_message}}"}, prefetchLabel="Context")
    upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="streamed final words"))
    with running_gateway(simple_config(upstream.url, [plugin], auth=KEYS)) as gw:
        chunks = list(
            client(gw, ALICE_KEY, **{"X-Conversation-Id": "s"}).chat.completions.create(
                model="assistant", messages=[{"role": "user", "content": "stream please"}], stream=True
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == "streamed final words"
    assert upstream.requests[0]["messages"][0]["content"] == 'stream please\n\n## Context\n{"q": "stream please"}'
    assert tool_message(upstream, 1) == f"session {state.opened[0]} call 1"
    assert state.calls == {"echo": 1, "count": 1}
