"""Operations (G9): health, readiness, Prometheus metrics, JSON logs with a request id, no secrets."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gateway.logs import JsonFormatter
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.logs import captured_logs
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
CANARY_KEY = canary.UPSTREAM_KEY
CANARY_API = canary.ALICE_KEY


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
    assert 'toolgate_upstream_calls_total{deployment="scripted/scripted-model",outcome="ok",upstream="scripted"} 1.0' in metrics
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


def test_secrets_never_reach_responses_logs_or_metrics(upstream: ScriptedUpstream, json_logs: io.StringIO) -> None:
    # R: G6, B4, G8
    config = simple_config(upstream.url, auth={"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "u"}]})
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


def test_litellm_upstream_kind_reaches_an_openai_compatible_base(upstream: ScriptedUpstream) -> None:
    # R: G5, B4
    config = {"upstreams": [{"name": "via-litellm", "kind": "litellm", "api_base": upstream.url + "/v1", "api_key": canary.UPSTREAM_KEY_REF}],
              "routes": [{"model": "assistant", "upstream": "via-litellm", "upstream_model": "openai/scripted-model"}]}
    upstream.push(Reply(content="through litellm"), Reply(status=429))
    with running_gateway(config) as gw:
        answer = client(gw).chat.completions.create(model="assistant", messages=USER)
        with pytest.raises(openai.RateLimitError) as limited:
            client(gw).chat.completions.create(model="assistant", messages=USER)
    assert answer.choices[0].message.content == "through litellm"
    assert upstream.requests[0]["model"] == "scripted-model"
    assert upstream.headers[0]["authorization"] == f"Bearer {canary.UPSTREAM_KEY}"
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


# -- the canary secret check itself (tests/support/canary.py): proof that it can fail ------------------


class LeakyPlugin:
    """A plugin that leaks the canary everywhere a real bug could: a metric label, a log line, the response."""

    id = "leaky"
    max_tool_calls = None

    async def start(self, env: Any) -> None:
        from prometheus_client import Counter

        Counter("leaky_keys", "labelled with a secret", ["key"], registry=env.metrics).labels(key=canary.UPSTREAM_KEY).inc()

    async def after_model(self, ctx: Any, request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        logging.getLogger("toolgate.leaky").info("upstream key is %s", canary.UPSTREAM_KEY)
        return {**response, "leak": canary.UPSTREAM_KEY}


def test_the_canary_check_finds_a_secret_in_logs_responses_streams_metrics_audit_records_and_model_requests(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    # R: B4
    import asyncio

    from gateway.app import create_app
    from gateway.bridge.records import AuditRecord
    from gateway.bridge.store_sqlite import SqliteStore
    from gateway.config import parse_config
    from gateway.plugins import Plugin
    from tests.support.http_server import serve

    leaky = type("Leaky", (LeakyPlugin, Plugin), {})()
    app = create_app(parse_config(simple_config(upstream.url), "test", tmp_path))
    app.state.gateway.routes["assistant"].chain.plugins = [leaky]

    async def audit() -> None:
        store = SqliteStore(tmp_path / "leaky.db")
        await store.open()
        record = AuditRecord(1.0, "mcp.tool_call", "alice", None, "gh__echo", "federation", False, {"owner": canary.UPSTREAM_KEY}, "success", 1.0)
        await store.append_audit([record])
        await store.close()

    with canary.RECORDER.expect_leaks() as found:
        with serve(app) as gw:
            client(gw).chat.completions.create(model="assistant", messages=[{"role": "user", "content": f"my key is {canary.UPSTREAM_KEY}"}])
        asyncio.run(audit())
        canary.scan_database(str(tmp_path / "leaky.db"))
    sources = {f.source for f in found}
    assert {"log", "response", "metrics", "model request", "audit", "audit store"} <= sources, found
    assert any(f.source == "log" and "toolgate.leaky" in f.where for f in found)
    assert any(f.source == "response" and f.where == "POST /v1/chat/completions -> 200" for f in found)
    assert all(canary.CANARY not in str(f) and "<canary: upstream key>" in f.excerpt for f in found)  # reports never print it


async def test_the_canary_check_finds_a_secret_split_across_the_chunks_of_a_stream() -> None:
    # R: B4
    from types import SimpleNamespace

    leak = ("data: " + canary.ALICE_KEY).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (leak[:12], leak[12:20], leak[20:]):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    app.state = SimpleNamespace(canary_bridge=True)  # type: ignore[attr-defined]
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    with canary.RECORDER.expect_leaks() as found:
        await canary.watch(app)({"type": "http", "method": "GET", "path": "/stream"}, None, send)
    assert [(f.source, f.where) for f in found] == [("response", "GET /stream -> 200")]
    assert b"".join(m.get("body", b"") for m in sent) == leak  # the stream itself is passed on unchanged


def test_the_canary_check_fails_a_secret_that_is_missing_wrong_or_sent_to_the_wrong_party(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R: B4, G8
    import asyncio

    from gateway.bridge.records import ConnectionRecord
    from gateway.bridge.upstream import Upstreams
    from tests.support.bridge_servers import CallLog, tool_server
    from tests.support.http_server import serve
    from tests.support.mcp_bridge import context, running_bridge
    from tests.support.mcp_servers import McpServerState, http_app

    monkeypatch.setenv("NOT_THE_CANARY", "sk-some-other-key-0123")
    config = simple_config(upstream.url)
    config["upstreams"][0]["api_key"] = "env:NOT_THE_CANARY"
    state = McpServerState(require_credential=True)

    async def unauthenticated_bridge(url: str) -> None:
        async with running_bridge(endpoint=url, authHeaderName=None) as (bridge, _):
            await bridge.call_tool(context(), "count", {})

    async def forwarded_api_key(url: str) -> None:
        upstreams = Upstreams(base_dir=Path("."), secrets=SecretSet(), list_ttl=30)
        try:
            await upstreams.call_tool(ConnectionRecord("c", "alice", url, "Authorization", canary.ALICE_KEY_REF, "config"), "echo", {"text": "x"})
        finally:
            await upstreams.close()

    with canary.RECORDER.expect_leaks() as found:
        with running_gateway(config) as gw:
            client(gw).chat.completions.create(model="assistant", messages=USER)
        with serve(http_app(state)) as mcp:
            asyncio.run(unauthenticated_bridge(mcp.url + "/mcp"))
        with serve(tool_server(CallLog(), delay=0)) as tools:
            asyncio.run(forwarded_api_key(tools.url + "/mcp"))
    problems = [f"{f.where}: {f.excerpt}" for f in found if f.source == "credential"]
    assert any(p.startswith("the scripted upstream: received the credential 'Bearer sk-some-other-key-0123'") for p in problems), problems
    assert any(p.startswith("a test MCP server (POST /mcp): received no credential") for p in problems), problems
    assert any(p.startswith("a Bridge tool server (echo): received a canary secret in header authorization: <canary: alice's API key>")
               for p in problems), problems


def test_a_test_that_leaks_the_canary_fails_naming_where_and_never_printing_it(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: B4
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makeconftest("from tests.conftest import *  # noqa: F403 - the suite's canary fixtures and hooks\n")
    pytester.makepyfile(
        test_inner="""
        import logging
        from tests.support import canary

        def test_leaky():
            logging.getLogger("toolgate.inner").info("the key: %s", canary.UPSTREAM_KEY)

        def test_clean():
            logging.getLogger("toolgate.inner").info("nothing secret here")

        def test_prints():
            print("a CLI printed", canary.BOB_KEY)
        """
    )
    # pytest itself would show the captured line or output, canary and all, under a failure
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:logging", "-p", "no:asyncio", "--show-capture=no")
    result.assert_outcomes(passed=2, failed=1, errors=1)  # test_leaky passes, then errors at its teardown
    output = result.stdout.str()
    assert "ERROR at teardown of test_leaky" in output
    assert "canary secret check (B4): the canary was printed (Captured stdout call)" in output
    assert "[log] logger toolgate.inner (INFO): " in output and "the key: <canary: upstream key>" in output
    assert "tgcanary-" not in output + result.stderr.str()
