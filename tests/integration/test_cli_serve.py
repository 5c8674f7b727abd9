"""`toolgate serve` as a new user runs it: a real process on the bundled demo config (G10, G9)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import openai
import pytest

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        return httpx2.get(url + "/readyz", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


@contextmanager
def serving(*extra: str, config: str = "config/demo.yaml") -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", config, "--port", str(port), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _ready(url) or proc.poll() is not None, timeout=60), "gateway did not become ready"
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(30)


def test_demo_config_serves_the_inspect_model_and_logs_json() -> None:
    # R: G10, G9
    with serving() as (url, proc):
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        models = [m.id for m in sdk.models.list().data]
        answer = sdk.chat.completions.create(model=models[0], messages=[{"role": "user", "content": "What is toolgate?"}],
                                             extra_headers={"x-request-id": "cli-test-1"})
    assert "--- message" in (answer.choices[0].message.content or "")
    assert "What is toolgate?" in (answer.choices[0].message.content or "")
    logs = [json.loads(line) for line in (proc.stderr.read() if proc.stderr else "").splitlines() if line.startswith("{")]
    assert any(line.get("request_id") == "cli-test-1" and line.get("status") == 200 for line in logs)


def test_several_worker_processes_serve_one_port() -> None:
    # R: G10
    with serving("--workers", "2") as (url, proc):
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        model = sdk.models.list().data[0].id
        answers = [sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": f"n{i}"}]) for i in range(6)]
    assert all(f"n{i}" in (a.choices[0].message.content or "") for i, a in enumerate(answers))


def test_serve_refuses_a_bad_config_with_its_problems(tmp_path: Path) -> None:
    # R: G8, G10
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: []\nroutes: []\n")
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(bad)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{bad}: upstreams: List should have at least 1 item after validation, not 0",
        f"{bad}: routes: List should have at least 1 item after validation, not 0",
    ]


def test_a_worker_process_app_logs_json_scrubbed_of_its_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G9, G6
    import logging

    from gateway.app import app_from_env
    from gateway.logs import JsonFormatter

    secret = "sk-worker-canary-9d1e77"
    monkeypatch.setenv("WORKER_KEY", secret)
    config = tmp_path / "toolgate.yaml"
    config.write_text("upstreams:\n  - name: u\n    kind: openai\n    api_base: http://127.0.0.1:9/v1\n    api_key: env:WORKER_KEY\n"
                      "routes:\n  - model: m\n    upstream: u\n")
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
