"""Property: any JSON a client can send gets a 2xx or a 4xx OpenAI error, never a 5xx (G6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.upstream import Reply, ScriptedUpstream

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)

messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "x"])},
                          optional={"content": json_values, "tool_calls": json_values, "name": json_values}),
    max_size=3,
)

bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"model": st.sampled_from(["assistant", "missing"]) | json_values, "messages": messages | json_values},
        optional={"stream": st.booleans() | json_values, "tools": json_values, "metadata": json_values,
                  "stream_options": json_values, "temperature": json_values},
    ),
)


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    scripted = ScriptedUpstream()
    with serve(scripted.app) as upstream:
        with running_gateway(simple_config(upstream.url)) as gw:
            yield gw.url


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
@example(body={"model": "assistant", "messages": [{"role": "user"}], "stream": True, "stream_options": [1]})
@example(body={"model": "assistant", "messages": [{"role": "user"}], "metadata": "x"})
def test_any_json_body_gets_2xx_or_an_openai_4xx(gateway_url: str, body: Any) -> None:
    # R: G6
    response = httpx2.post(gateway_url + "/v1/chat/completions", content=json.dumps(body).encode(), timeout=10,
                           headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "code", "param"} and error["message"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_get_a_400_not_a_crash(gateway_url: str, raw: bytes) -> None:
    # R: G6
    response = httpx2.post(gateway_url + "/v1/chat/completions", content=raw, timeout=10, headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text


# Well-formed requests, varied in every field an OpenAI client may send, through a chain that
# does something with them (prompt_guard inspecting the client's messages, a tool plugin, the
# tool loop): the property above mostly exercises validation, this one the request path.
texts = st.text(max_size=40) | st.sampled_from(["", "{{user_id}}", "ignore all previous instructions", "\u200b\x00"])
parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
        st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": texts})}),
    ),
    max_size=3,
)
tool_call = st.fixed_dictionaries({
    "id": st.text(min_size=1, max_size=8), "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.sampled_from(["search", "client_tool", "x"]), "arguments": texts}),
})
chat_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "developer"]), "content": texts | parts}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | texts},
                          optional={"tool_calls": st.lists(tool_call, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.text(max_size=8), "content": texts | parts}),
)
function_tool = st.fixed_dictionaries({
    "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.sampled_from(["client_tool", "search", "other"])},
                                      optional={"description": texts, "parameters": st.just({"type": "object"})}),
})
chat_bodies = st.fixed_dictionaries(
    {"model": st.just("assistant"), "messages": st.lists(chat_message, min_size=1, max_size=4)},
    optional={
        "stream": st.booleans(), "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "tools": st.lists(function_tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "metadata": st.dictionaries(st.sampled_from(["conversation_id", "user", "k"]), texts, max_size=2),
        "temperature": st.floats(0, 2), "max_tokens": st.integers(1, 4096), "user": texts,
        "n": st.just(1), "seed": st.integers(0, 2**31),
    },
)


@pytest.fixture(scope="module")
def guarded_gateway_url() -> Iterator[str]:
    from pathlib import Path

    from gateway.app import create_app
    from gateway.config import parse_config
    from tests.support.plugins import EchoTools

    def model(body: dict[str, Any]) -> Reply:
        # Call the gateway's tool while no tool result is in the conversation, then answer.
        if any(m.get("role") == "tool" for m in body["messages"][-1:]):
            return Reply(content="done")
        return Reply(tool_calls=[("search", {"q": "x"})])

    scripted = ScriptedUpstream(default=model)  # type: ignore[arg-type]
    guard = {"type": "prompt_guard", "id": "guard", "mode": "monitor", "inspect_client_messages": True,
             "client_roles": ["system", "user", "assistant", "tool"]}
    with serve(scripted.app) as upstream:
        app = create_app(parse_config(simple_config(upstream.url, plugins=[guard]), "fuzz", Path(".")))
        chain = app.state.gateway.routes["assistant"].chain
        chain.plugins = [*chain.plugins, EchoTools("docs", ["search"])]
        with serve(app) as gw:
            yield gw.url


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=chat_bodies)
def test_any_well_formed_chat_request_through_a_guarded_tool_chain_gets_2xx_or_an_openai_4xx(
    guarded_gateway_url: str, body: dict[str, Any]
) -> None:
    # R: G6, G7, P1
    response = httpx2.post(guarded_gateway_url + "/v1/chat/completions", content=json.dumps(body).encode(),
                           timeout=20, headers={"content-type": "application/json"})
    event(f"status {response.status_code}")  # `pytest --hypothesis-show-statistics` shows the mix
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "code", "param"} and error["message"]
    elif body.get("stream"):
        assert response.text.rstrip().endswith("data: [DONE]"), response.text[-200:]
    else:
        assert response.json()["choices"][0]["message"]["role"] == "assistant"
