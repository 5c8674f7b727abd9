"""Operations (G9): health, readiness, Prometheus metrics, JSON logs with a request id, no secrets."""

from __future__ import annotations

import io
import json
import logging

import httpx2
import openai
import pytest

from gateway.logs import JsonFormatter
from gateway.secrets import SecretSet
from tests.support.logs import captured_logs
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
CANARY_KEY = "sk-canary-upstream-key-7f3a9c"
CANARY_API = "tg-canary-api-key-51be2d"


@pytest.fixture
def json_logs():  # type: ignore[no-untyped-def]
    with captured_logs("toolgate") as stream:
        yield stream


def test_health_readiness_and_metrics(upstream: ScriptedUpstream) -> None:
    # R: G9
    with running_gateway(simple_config(upstream.url)) as gw:
        client(gw).chat.completions.create(model="assistant", messages=USER)
        health = httpx2.get(gw.url + "/healthz")
        ready = httpx2.get(gw.url + "/readyz")
        metrics = httpx2.get(gw.url + "/metrics").text
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "routes": 1}
    assert 'toolgate_requests_total{route="assistant",status="200"} 1.0' in metrics
    assert 'toolgate_upstream_calls_total{outcome="ok",upstream="scripted"} 1.0' in metrics
    assert 'toolgate_request_seconds_count{route="assistant"} 1.0' in metrics


def test_every_request_gets_a_request_id_in_its_header_and_log_line(upstream: ScriptedUpstream, json_logs: io.StringIO) -> None:
    # R: G9
    with running_gateway(simple_config(upstream.url)) as gw:
        given = httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER}, headers={"x-request-id": "req-42"})
        minted = httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER})
    assert given.headers["x-request-id"] == "req-42"
    assert len(minted.headers["x-request-id"]) == 32
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    access = [line for line in lines if line["logger"] == "toolgate.http"]
    assert [(a["request_id"], a["status"], a["message"]) for a in access] == [
        ("req-42", 200, "POST /v1/chat/completions 200"),
        (minted.headers["x-request-id"], 200, "POST /v1/chat/completions 200"),
    ]
    assert all({"time", "level", "duration_ms"} <= set(a) for a in access)


def test_secrets_never_reach_responses_logs_or_metrics(upstream: ScriptedUpstream, json_logs: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G6, B4
    monkeypatch.setenv("UP_KEY", CANARY_KEY)
    monkeypatch.setenv("API_KEY", CANARY_API)
    config = simple_config(upstream.url, auth={"mode": "api_keys", "api_keys": [{"key": "env:API_KEY", "user_id": "u"}]})
    config["upstreams"][0]["api_key"] = "env:UP_KEY"
    upstream.push(Reply(status=401), Reply(status=500, error_message=f"bad key {CANARY_KEY}"), Reply(content="fine"))
    bodies = []
    with running_gateway(config) as gw:
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as caught:
                client(gw, CANARY_API).chat.completions.create(model="assistant", messages=USER)
            bodies.append(caught.value.response.text)
        bodies.append(client(gw, CANARY_API).chat.completions.with_raw_response.create(model="assistant", messages=USER).http_response.text)
        with pytest.raises(openai.AuthenticationError) as denied:
            client(gw, CANARY_API + "x").chat.completions.create(model="assistant", messages=USER)
        bodies.append(denied.value.response.text)
        bodies.append(httpx2.get(gw.url + "/metrics").text)
    assert upstream.headers[0]["authorization"] == f"Bearer {CANARY_KEY}"  # the key is used upstream...
    assert "[redacted]" in bodies[1]  # ...an upstream echoing it is scrubbed...
    for text in bodies + [json_logs.getvalue()]:  # ...and it appears nowhere else
        assert CANARY_KEY not in text and CANARY_API not in text


def test_json_formatter_scrubs_known_secrets() -> None:
    # R: G9, G6
    secrets = SecretSet()
    secrets.add("hunter2-secret")
    record = logging.makeLogRecord({"name": "toolgate.x", "levelname": "INFO", "msg": "token %s", "args": ("hunter2-secret",)})
    line = json.loads(JsonFormatter(secrets).format(record))
    assert line["message"] == "token [redacted]"


def test_inspect_model_shows_what_the_model_would_receive(upstream: ScriptedUpstream) -> None:
    # R: G1, G2
    config = {"upstreams": [{"name": "inspect", "kind": "inspect"}], "routes": [{"model": "demo", "upstream": "inspect"}]}
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object"}}}
    with running_gateway(config) as gw:
        answer = client(gw).chat.completions.create(model="demo", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], tools=[tool])
        streamed = "".join(c.choices[0].delta.content or "" for c in client(gw).chat.completions.create(model="demo", messages=USER, stream=True) if c.choices)
    assert answer.choices[0].message.content == (
        "model: demo\n\n--- message 1: system ---\nBe brief.\n\n--- message 2: user ---\nhi\n\n"
        "--- tools offered: 1 ---\n- get_weather: Weather now\n"
    )
    assert streamed == "model: demo\n\n--- message 1: user ---\nhello\n\n--- tools offered: 0 ---\n"


def test_litellm_upstream_kind_reaches_an_openai_compatible_base(upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G5
    monkeypatch.setenv("LL_KEY", "sk-litellm-test")
    config = {"upstreams": [{"name": "via-litellm", "kind": "litellm", "api_base": upstream.url + "/v1", "api_key": "env:LL_KEY"}],
              "routes": [{"model": "assistant", "upstream": "via-litellm", "upstream_model": "openai/scripted-model"}]}
    upstream.push(Reply(content="through litellm"), Reply(status=429))
    with running_gateway(config) as gw:
        answer = client(gw).chat.completions.create(model="assistant", messages=USER)
        with pytest.raises(openai.RateLimitError) as limited:
            client(gw).chat.completions.create(model="assistant", messages=USER)
    assert answer.choices[0].message.content == "through litellm"
    assert upstream.requests[0]["model"] == "scripted-model"
    assert upstream.headers[0]["authorization"] == "Bearer sk-litellm-test"
    assert "upstream 'via-litellm' is rate limiting" in limited.value.message


async def test_shutdown_stops_every_plugin_and_closes_the_client_even_when_one_fails_to_stop() -> None:
    # R: G9
    from gateway.config import parse_config
    from gateway.gateway import Gateway
    from gateway.plugins import Plugin

    stopped: list[str] = []

    class Stopper(Plugin):
        def __init__(self, plugin_id: str, fail: bool) -> None:
            self.id, self.fail = plugin_id, fail

        async def stop(self) -> None:
            stopped.append(self.id)
            if self.fail:
                raise RuntimeError("cannot stop")

    gateway = Gateway(parse_config({"upstreams": [{"name": "i", "kind": "inspect"}],
                                    "routes": [{"model": "a", "upstream": "i"}, {"model": "b", "upstream": "i"}]}))
    gateway.routes["a"].chain.plugins = [Stopper("first", fail=False), Stopper("second", fail=True)]
    gateway.routes["b"].chain.plugins = [Stopper("third", fail=False)]
    await gateway.stop()
    assert stopped == ["second", "first", "third"]
    assert gateway.http.is_closed


def test_a_failed_start_closes_what_was_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G9
    from fastapi.testclient import TestClient

    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.gateway import Gateway

    closed: list[bool] = []
    original_stop = Gateway.stop

    async def failing_start(self: Gateway) -> None:
        raise RuntimeError("plugin could not start")

    async def recording_stop(self: Gateway) -> None:
        await original_stop(self)
        closed.append(self.http.is_closed)

    monkeypatch.setattr(Gateway, "start", failing_start)
    monkeypatch.setattr(Gateway, "stop", recording_stop)
    app = create_app(parse_config({"upstreams": [{"name": "i", "kind": "inspect"}], "routes": [{"model": "a", "upstream": "i"}]}))
    with pytest.raises(RuntimeError, match="could not start"), TestClient(app):
        pass
    assert closed == [True]
