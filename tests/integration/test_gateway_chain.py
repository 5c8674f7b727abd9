"""The plugin chain through the real app (G2, B19, G7) with in-process test plugins."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from gateway.app import create_app
from gateway.config import parse_config
from gateway.plugins import Plugin
from tests.support.gateway import client, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.plugins import EchoTools, Recorder
from tests.support.upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]


@contextmanager
def gateway_with(upstream: ScriptedUpstream, plugins: list[Plugin], **route: Any) -> Iterator[ServerThread]:
    app = create_app(parse_config(simple_config(upstream.url), "test", Path(".")))
    chain = app.state.gateway.routes["assistant"].chain
    chain.plugins = plugins
    caps = [p.max_tool_calls for p in plugins if p.max_tool_calls is not None]
    chain.max_tool_calls = min(caps) if caps else 10
    with serve(app) as server:
        yield server


def test_hooks_run_in_yaml_order_and_inspectors_see_every_tool_result(upstream: ScriptedUpstream) -> None:
    # R: G2, P1
    log: list[str] = []
    tools = EchoTools("docs", ["search"])
    upstream.push(Reply(tool_calls=[("search", {"q": "x"})]), Reply(content="done"))
    with gateway_with(upstream, [Recorder("first", log), tools, Recorder("second", log)]) as gw:
        response = client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hello"}])
    assert response.choices[0].message.content == "done"
    assert log == ["before:first", "before:second", "inspect:first:search", "inspect:second:search",
                   "after:first", "after:second", "end:first", "end:second"]
    assert upstream.requests[0]["messages"][0]["content"] == "hello [first] [second]"
    assert upstream.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": "docs.search: {'q': 'x'}"}


def test_colliding_tool_names_are_prefixed_and_routed_back(upstream: ScriptedUpstream) -> None:
    # R: B19
    docs, wiki = EchoTools("docs", ["search", "get_page"]), EchoTools("wiki", ["search"])
    upstream.push(Reply(tool_calls=[("docs__search", {"q": "a"}), ("wiki__search", {"q": "b"}), ("get_page", {})]), Reply(content="ok"))
    client_tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with gateway_with(upstream, [docs, wiki]) as gw:
        client(gw).chat.completions.create(model="assistant", messages=USER, tools=[client_tool])
    offered = [t["function"]["name"] for t in upstream.requests[0]["tools"]]
    assert offered == ["get_weather", "docs__search", "get_page", "wiki__search"]
    assert docs.calls == [("search", {"q": "a"}), ("get_page", {})]
    assert wiki.calls == [("search", {"q": "b"})]


def test_gateway_tool_named_like_a_client_tool_is_made_distinct(upstream: ScriptedUpstream) -> None:
    # R: B19, G7
    docs = EchoTools("docs", ["search"])
    upstream.push(Reply(tool_calls=[("search", {"city": "Paris"})]))
    client_tool = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    with gateway_with(upstream, [docs]) as gw:
        response = client(gw).chat.completions.create(model="assistant", messages=USER, tools=[client_tool])
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["search", "docs__search"]
    assert response.choices[0].finish_reason == "tool_calls"
    assert response.choices[0].message.tool_calls[0].function.name == "search"
    assert docs.calls == []


def test_streaming_with_gateway_tools_shows_only_the_final_turn(upstream: ScriptedUpstream) -> None:
    # R: G1, B1
    docs = EchoTools("docs", ["search"])
    upstream.push(Reply(tool_calls=[("search", {"q": "x"})]), Reply(content="final words"))
    with gateway_with(upstream, [docs]) as gw:
        chunks = list(client(gw).chat.completions.create(model="assistant", messages=USER, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() == "final words"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.total_tokens == 30
    assert docs.calls == [("search", {"q": "x"})]


def test_the_cap_is_reported_in_the_response(upstream: ScriptedUpstream) -> None:
    # R: B2
    docs = EchoTools("docs", ["search"], cap=1)
    upstream.push(Reply(tool_calls=[("search", {}), ("search", {})]), Reply(content="best effort"))
    with gateway_with(upstream, [docs]) as gw:
        raw = client(gw).chat.completions.with_raw_response.create(model="assistant", messages=USER)
    body = raw.http_response.json()
    assert body["toolgate"] == {"tool_calls": 1, "rounds": 2, "tool_cap_reached": True}
    assert body["choices"][0]["message"]["content"] == "best effort"
    assert upstream.requests[1]["tool_choice"] == "none"


def test_a_blocked_tool_result_refuses_the_request(upstream: ScriptedUpstream) -> None:
    # R: B13, P2
    log: list[str] = []
    upstream.push(Reply(tool_calls=[("search", {"q": "EVIL"})]), Reply(content="never"))
    with gateway_with(upstream, [Recorder("guard", log, block_word="EVIL"), EchoTools("docs", ["search"])]) as gw:
        try:
            client(gw).chat.completions.create(model="assistant", messages=USER)
            raise AssertionError("expected a refusal")
        except openai.BadRequestError as exc:
            error = exc.body
    assert error["code"] == "content_blocked"
    assert error["message"] == "request refused by guard: content from docs/search matched test.word (score 1.00)"
    assert "EVIL" not in error["message"]
    assert len(upstream.requests) == 1
    assert log[-1] == "end:guard"


class Broken(Plugin):
    id = "broken"

    async def before_model(self, ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("bug with internal detail /etc/secret-path")


def test_a_plugin_bug_gives_a_500_envelope_with_the_request_id_and_no_traceback(upstream: ScriptedUpstream) -> None:
    # R: G6, G9
    import httpx2

    with gateway_with(upstream, [Broken()]) as gw:
        response = httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER}, headers={"x-request-id": "bug-1"})
        after = httpx2.get(gw.url + "/healthz")
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "internal error (request id bug-1)", "type": "server_error", "code": "internal_error", "param": None}}
    assert response.headers["x-request-id"] == "bug-1"
    assert after.status_code == 200  # the gateway keeps serving


class FailsToEnd(Plugin):
    id = "fails-to-end"

    async def end_request(self, ctx: Any) -> None:
        raise RuntimeError("could not release")


def test_every_plugin_ends_the_request_even_when_one_fails_to(upstream: ScriptedUpstream) -> None:
    # R: G2, B15
    log: list[str] = []
    with gateway_with(upstream, [FailsToEnd(), Recorder("after", log)]) as gw:
        response = client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": "x"}])
    assert response.choices[0].message.content == "Hello from the scripted model."
    assert log[-1] == "end:after"
