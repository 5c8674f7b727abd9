"""`toolgate serve` as a new user runs it: a real process on the bundled demo config (G10, G9);
every served process's stderr is searched for the canary secret (B4)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import openai
import pytest

from tests.support import canary
from tests.support.faults import free_port
from tests.support.gateway import ready
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    stderr: str = ""
    """Everything the process wrote to stderr (its JSON logs), read once it has stopped."""


@contextmanager
def serving(*extra: str, config: str = "config/demo.yaml") -> Iterator[Served]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", config, "--port", str(port), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    served = Served(f"http://127.0.0.1:{port}", proc)
    try:
        assert wait_until(lambda: ready(served.url) or proc.poll() is not None, timeout=60), "gateway did not become ready"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield served
    finally:
        proc.terminate()
        proc.wait(30)
        served.stderr = proc.stderr.read() if proc.stderr else ""
        for line in served.stderr.splitlines():
            canary.RECORDER.scan("log", "stderr of `toolgate serve`", line)


def test_demo_config_serves_the_inspect_model_and_logs_json() -> None:
    # R: G10, G9
    with serving() as served:
        sdk = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
        models = [m.id for m in sdk.models.list().data]
        answer = sdk.chat.completions.create(model="inspect", messages=[{"role": "user", "content": "What is toolgate?"}],
                                             extra_headers={"x-request-id": "cli-test-1"})
    assert models == ["demo", "inspect"]
    assert "--- message" in (answer.choices[0].message.content or "")
    assert "What is toolgate?" in (answer.choices[0].message.content or "")
    logs = [json.loads(line) for line in served.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("request_id") == "cli-test-1" and line.get("status") == 200 for line in logs)


def test_the_demo_config_opens_the_console_without_a_key() -> None:
    # R: C1
    with serving() as served, httpx2.Client(base_url=served.url) as http:
        page = http.get("/console")
        token = re.search(r'name="signin_token" value="([^"]+)"', page.text)
        assert token is not None and "sign in without a key" in page.text
        signed_in = http.post("/console/signin", data={"signin_token": token.group(1), "api_key": ""})
        shell = http.get("/console")
        bridges = http.get("/bridges")
    assert signed_in.status_code == 303
    assert '<div id="root">' in shell.text and 'src="/console/assets/console.js"' in shell.text
    assert bridges.status_code == 200 and isinstance(bridges.json()["data"], list)


def test_serve_refuses_a_bad_config_with_its_problems(tmp_path: Path) -> None:
    # R: G8, G10
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: []\nroutes: []\n")
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(bad)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{bad}:1:1: upstreams: List should have at least 1 item after validation, not 0",
        f"{bad}:2:1: routes: List should have at least 1 item after validation, not 0",
    ]


def test_a_worker_process_app_logs_json_scrubbed_of_its_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G9, G6, B4
    import logging

    from gateway.app import app_from_env
    from gateway.logs import JsonFormatter

    secret = canary.UPSTREAM_KEY
    config = tmp_path / "toolgate.yaml"
    config.write_text("upstreams:\n  - name: u\n    kind: openai\n    api_base: http://127.0.0.1:9/v1\n"
                      f"    api_key: {canary.UPSTREAM_KEY_REF}\nroutes:\n  - model: m\n    upstream: u\n")
    monkeypatch.setenv("TOOLGATE_CONFIG", str(config))
    logger = logging.getLogger("toolgate")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        app_from_env()
        formatter = logger.handlers[0].formatter
        assert isinstance(formatter, JsonFormatter)
        line = formatter.format(logging.makeLogRecord({"name": "toolgate.x", "msg": f"key {secret}", "levelname": "WARNING"}))
        assert json.loads(line)["message"] == "key [redacted]"
    finally:
        logger.handlers[:], logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])


def test_a_served_process_never_writes_its_secrets_to_logs_responses_or_metrics(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: B4, G6, G8, G9
    state = McpServerState(require_credential=True)
    with serve(http_app(state, legacy_only=True)) as mcp:
        plugin = {"type": "mcp_bridge", "id": "docs", "endpoint": mcp.url + "/mcp", **canary.mcp_auth(), "timeoutSeconds": 5}
        config = tmp_path / "toolgate.yaml"
        config.write_text(json.dumps({  # YAML is a superset of JSON; secrets only as references
            "server": {"log_level": "debug", "metrics_public": True, "metrics_user_labels": True},  # /metrics searched below
            "auth": {"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme"}]},
            "upstreams": [{"name": "scripted", "kind": "openai", "api_base": upstream.url + "/v1", "api_key": canary.UPSTREAM_KEY_REF}],
            "routes": [{"model": "assistant", "upstream": "scripted", "plugins": [plugin]}],
        }))
        assert canary.CANARY not in config.read_text()
        upstream.push(Reply(tool_calls=[("whoami", {})]), Reply(content="ok"), Reply(status=500, error_message=f"bad key {canary.UPSTREAM_KEY}"))
        texts: dict[str, str] = {}
        with serving(config=str(config)) as served:
            sdk = openai.OpenAI(base_url=served.url + "/v1", api_key=canary.ALICE_KEY, max_retries=0)
            user = [{"role": "user", "content": "who am I?"}]
            texts["answer"] = sdk.chat.completions.with_raw_response.create(model="assistant", messages=user).http_response.text
            with pytest.raises(openai.APIStatusError) as failed:
                sdk.chat.completions.create(model="assistant", messages=user)
            texts["upstream error"] = failed.value.response.text
            with pytest.raises(openai.AuthenticationError) as denied:
                openai.OpenAI(base_url=served.url + "/v1", api_key=canary.BOB_KEY, max_retries=0).models.list()
            texts["401"] = denied.value.response.text
            texts["metrics"] = httpx2.get(served.url + "/metrics").text
    for what, text in texts.items():
        canary.RECORDER.scan("metrics" if what == "metrics" else "response", f"`toolgate serve` {what}", text)
    assert set(state.auth_headers) == {canary.MCP_CREDENTIAL}
    assert upstream.requests[1]["messages"][-1]["content"] == "the tool failed: bad credential [redacted]"
    assert failed.value.status_code == 502 and "[redacted]" in texts["upstream error"]
    logs = [json.loads(line) for line in served.stderr.splitlines() if line.startswith("{")]
    assert [line["status"] for line in logs if line.get("logger") == "toolgate.http" and "status" in line and "duration_ms" in line] == [200, 502, 401]
