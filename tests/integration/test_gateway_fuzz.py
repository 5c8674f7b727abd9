"""Property: any JSON a client can send gets a 2xx or a 4xx OpenAI error, never a 5xx (G6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.upstream import ScriptedUpstream

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
    response = httpx2.post(gateway_url + "/v1/chat/completions", content=raw, timeout=10)
    assert response.status_code < 500, response.text
