"""Property: whatever a client sends to /v1/responses or /v1/messages gets a 2xx or a 4xx in that
API's own error shape, never a 5xx; a stream always ends with its API's closing event (A1, A2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.plugins import EchoTools
from tests.support.upstream import Reply, ScriptedUpstream

JSON = {"content-type": "application/json"}  # any other body type gets 415 before the parser this fuzzes

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
texts = st.text(max_size=30)
ids = st.sampled_from(["call_1", "call_2", "toolu_1", "x"])

response_items = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "developer", "wizard"]),
                           "content": texts | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "input_image", "input_file"]),
                                                                             "text": texts}), max_size=2)},
                          optional={"type": st.just("message")}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": ids, "name": st.sampled_from(["get_weather", "search"]),
                           "arguments": st.sampled_from(['{"city": "Oslo"}', "{}", "not json"])}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": ids, "output": texts | json_values}),
    st.fixed_dictionaries({"type": st.sampled_from(["reasoning", "item_reference", "web_search_call", "mystery"])}),
    json_values,
)
responses_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["assistant", "missing"]), "input": texts | st.lists(response_items, min_size=1, max_size=4)},
    optional={
        "instructions": texts | json_values, "stream": st.booleans(), "max_output_tokens": st.integers(1, 100) | json_values,
        "tools": st.lists(st.sampled_from([
            {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}, {"type": "web_search"}, {"type": "function"}]), max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "name": "get_weather"}, {"type": "x"}, 3]),
        "store": st.booleans(), "previous_response_id": st.none() | texts, "text": json_values, "reasoning": json_values,
        "metadata": st.dictionaries(st.sampled_from(["conversation_id", "k"]), texts, max_size=2) | json_values,
    },
)

blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("image"), "source": st.sampled_from([
        {"type": "base64", "media_type": "image/png", "data": "AA=="}, {"type": "url", "url": "http://x/i.png"}, {}])}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": ids, "name": st.sampled_from(["get_weather", "search"]), "input": json_values}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": ids, "content": texts | json_values},
                          optional={"is_error": st.booleans()}),
    st.fixed_dictionaries({"type": st.sampled_from(["document", "thinking", "mystery"])}),
    json_values,
)
messages_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["assistant", "missing"]),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                                 "content": texts | st.lists(blocks, max_size=3)}), min_size=1, max_size=4) | json_values},
    optional={
        "max_tokens": st.integers(-1, 100) | json_values, "system": texts | json_values, "stream": st.booleans(),
        "tools": st.lists(st.sampled_from([{"name": "get_weather", "input_schema": {"type": "object"}},
                                           {"type": "web_search_20250305", "name": "web_search"}, {"name": "x"}]), max_size=2),
        "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"}, {"type": "x"}, "auto"]),
        "stop_sequences": st.lists(texts, max_size=2) | json_values, "metadata": json_values, "thinking": json_values,
    },
)


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    def model(body: dict[str, Any]) -> Reply:
        # A gateway tool first, then sometimes the client's tool, then an answer.
        last = body["messages"][-1]
        if last.get("role") != "tool":
            return Reply(content="thinking", tool_calls=[("search", {"q": "x"})])
        if any(t["function"]["name"] == "get_weather" for t in body.get("tools") or []) and "search" in str(last.get("content")):
            return Reply(tool_calls=[("get_weather", {"city": "Oslo"})])
        return Reply(content="done")

    scripted = ScriptedUpstream(default=model)  # type: ignore[arg-type]
    with serve(scripted.app) as upstream:
        with running_gateway(simple_config(upstream.url)) as gw:
            gw.app.state.gateway.routes["assistant"].chain.plugins.append(EchoTools("docs", ["search"]))
            yield gw.url


def _events(text: str) -> list[str]:
    return [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=responses_bodies | json_values)
def test_any_responses_body_gets_2xx_or_an_openai_4xx_and_streams_end_with_their_closing_event(gateway_url: str, body: Any) -> None:
    # R: A1, G6
    response = httpx2.post(gateway_url + "/v1/responses", content=json.dumps(body).encode(), timeout=20, headers=JSON)
    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "code", "param"}
    elif isinstance(body, dict) and body.get("stream"):
        assert _events(response.text)[-1] in ("response.completed", "response.incomplete"), response.text[-300:]
    else:
        assert response.json()["object"] == "response" and response.json()["status"] == "completed"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=messages_bodies | json_values)
def test_any_messages_body_gets_2xx_or_an_anthropic_4xx_and_streams_end_with_message_stop(gateway_url: str, body: Any) -> None:
    # R: A2, G6
    response = httpx2.post(gateway_url + "/v1/messages", content=json.dumps(body).encode(), timeout=20, headers=JSON)
    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()
        assert error["type"] == "error" and set(error["error"]) == {"type", "message"} and error["error"]["message"]
    elif isinstance(body, dict) and body.get("stream"):
        assert _events(response.text)[-1] == "message_stop", response.text[-300:]
    else:
        assert response.json()["type"] == "message" and response.json()["stop_reason"] in ("end_turn", "tool_use")
