"""What operators see (A4): tokens per route and user in /metrics, refusals counted, the access
log line, and /metrics behind a credential."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.logs import captured_logs
from tests.support.plugins import EchoTools
from tests.support.upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
KEYS = {"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme"},
                                          {"key": canary.BOB_KEY_REF, "user_id": "bob", "org_id": "acme"}]}


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    with captured_logs("toolgate") as stream:
        yield stream


def metric_lines(gw: Any, prefix: str, key: str = canary.ALICE_KEY) -> list[str]:
    text = httpx2.get(gw.url + "/metrics", headers={"authorization": f"Bearer {key}"}).text
    return sorted(line for line in text.splitlines() if line.startswith(prefix))


def test_prompt_and_completion_tokens_are_counted_per_route_and_user_for_every_api(upstream: ScriptedUpstream) -> None:
    # R: A4, G9
    upstream.push(Reply(content="a", usage=(10, 5)), Reply(content="b", usage=(20, 7)), Reply(content="c d", usage=(3, 2)))
    config = simple_config(upstream.url, auth=KEYS, server={"metrics_public": True, "metrics_user_labels": True})
    with running_gateway(config) as gw:
        client(gw, canary.ALICE_KEY).chat.completions.create(model="assistant", messages=USER)  # type: ignore[arg-type]
        client(gw, canary.BOB_KEY).responses.create(model="assistant", input="hi")
        claude = anthropic.Anthropic(base_url=gw.url, api_key=canary.ALICE_KEY, max_retries=0)
        with claude.messages.stream(model="assistant", max_tokens=8, messages=USER) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
        lines = metric_lines(gw, "toolgate_tokens_total")
    assert lines == [
        'toolgate_tokens_total{kind="completion",route="assistant",user="alice"} 7.0',
        'toolgate_tokens_total{kind="completion",route="assistant",user="bob"} 7.0',
        'toolgate_tokens_total{kind="prompt",route="assistant",user="alice"} 13.0',
        'toolgate_tokens_total{kind="prompt",route="assistant",user="bob"} 20.0',
    ]


def test_requests_refused_before_a_route_are_counted_without_the_clients_model_name(upstream: ScriptedUpstream) -> None:
    # R: A4, G9
    config = simple_config(upstream.url, auth=KEYS, server={"max_body_bytes": 2048})
    alice = {"authorization": f"Bearer {canary.ALICE_KEY}", "content-type": "application/json"}
    with running_gateway(config) as gw:
        statuses = [
            httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER}).status_code,
            httpx2.post(gw.url + "/v1/chat/completions", content=b"{oops", headers=alice).status_code,
            httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": [{"role": "wizard", "content": "x"}]},
                        headers=alice).status_code,
            httpx2.post(gw.url + "/v1/responses", json={"model": "who-knows", "input": "x"}, headers=alice).status_code,
            httpx2.post(gw.url + "/v1/messages", json={"model": "assistant", "messages": USER}, headers={"x-api-key": canary.ALICE_KEY}).status_code,
            httpx2.post(gw.url + "/v1/chat/completions", content=b"x" * 4096, headers=alice).status_code,
        ]
        lines = metric_lines(gw, "toolgate_requests_total")
    assert statuses == [401, 400, 400, 404, 400, 413]
    assert lines == [
        'toolgate_requests_total{route="none",status="400"} 3.0',
        'toolgate_requests_total{route="none",status="401"} 1.0',
        'toolgate_requests_total{route="none",status="404"} 1.0',
        'toolgate_requests_total{route="none",status="413"} 1.0',
    ]


def test_the_access_log_line_carries_route_user_status_tokens_tool_calls_and_duration(
    upstream: ScriptedUpstream, json_logs: io.StringIO
) -> None:
    # R: A4, G9
    upstream.push(Reply(tool_calls=[("search", {"q": "x"})], usage=(4, 1)), Reply(content="found", usage=(6, 2)))
    with running_gateway(simple_config(upstream.url, auth=KEYS)) as gw:
        gw.app.state.gateway.routes["assistant"].chain.plugins.append(EchoTools("docs", ["search"]))
        client(gw, canary.BOB_KEY).chat.completions.create(model="assistant", messages=USER)  # type: ignore[arg-type]
        httpx2.post(gw.url + "/v1/messages", json={"model": "assistant", "max_tokens": 8, "messages": USER})
    access = [json.loads(line) for line in json_logs.getvalue().splitlines() if '"toolgate.http"' in line]
    served, refused = access
    assert {k: served[k] for k in ("api", "route", "user", "status", "prompt_tokens", "completion_tokens", "tool_calls")} == {
        "api": "chat", "route": "assistant", "user": "bob", "status": 200, "prompt_tokens": 10, "completion_tokens": 3, "tool_calls": 1,
    }
    assert isinstance(served["duration_ms"], float) and served["message"] == "POST /v1/chat/completions 200"
    assert (refused["api"], refused["route"], refused["user"], refused["status"]) == ("messages", "none", None, 401)


def test_metrics_can_accept_any_credential_auth_accepts(upstream: ScriptedUpstream) -> None:
    # R: A4, G9
    with running_gateway(simple_config(upstream.url, auth=KEYS, server={"metrics_auth": True})) as gw:
        anonymous = httpx2.get(gw.url + "/metrics")
        scraper = httpx2.get(gw.url + "/metrics", headers={"authorization": f"Bearer {canary.ALICE_KEY}"})
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"
    assert scraper.status_code == 200 and "toolgate_requests" in scraper.text
    # without metrics_auth a user's key is no scraper's credential: tests/security/test_metrics_access.py
