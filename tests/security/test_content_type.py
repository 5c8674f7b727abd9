"""A web page the user visits cannot drive a gateway on their machine (issue 32, finding 5; G6, G3).

A page may send a cross-origin POST with `text/plain` (or a form) without the browser asking first;
with `auth.mode: none` such a body, read as JSON, was answered 200. Every JSON endpoint now answers
415 in its API's own error shape, and a gateway without auth binds loopback only unless the operator
says otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.faults import free_port
from tests.support.gateway import ready, running_gateway, simple_config
from tests.support.http_server import ServerThread
from tests.support.upstream import ScriptedUpstream
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "hello"}]
CHAT = {"model": "assistant", "messages": USER}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
REFUSED = "Content-Type 'text/plain' is not accepted here: send the body as JSON with 'Content-Type: application/json'"


@pytest.fixture
def gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[ServerThread]:
    # auth off, as in the demo: the case where a page needs no credential at all
    config = simple_config(upstream.url, bridge={"database": str(tmp_path / "bridge.db")})
    with running_gateway(config, tmp_path) as server:
        yield server


def simple_post(url: str, body: object, content_type: str = "text/plain", **headers: str) -> httpx2.Response:
    """What a page's `fetch(url, {method: "POST", mode: "no-cors", body})` sends: no preflight."""
    return httpx2.post(url, content=json.dumps(body).encode(), headers={"content-type": content_type, **headers}, timeout=30)


OPENAI_415 = {"error": {"message": REFUSED, "type": "invalid_request_error", "code": "unsupported_media_type", "param": None}}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", CHAT),
    ("/chat/completions", CHAT),
    ("/v1/responses", {"model": "assistant", "input": "hello"}),
    ("/connections", {"id": "c1", "endpoint": "http://127.0.0.1:9/mcp"}),
    ("/bridges", {"id": "b1", "connections": []}),
])
def test_a_text_plain_json_body_gets_415_in_the_openai_envelope_and_nothing_runs(
    gateway: ServerThread, upstream: ScriptedUpstream, path: str, body: dict[str, object]
) -> None:
    # R: G6, G3, A1, F12
    response = simple_post(gateway.url + path, body)
    assert (response.status_code, response.json()) == (415, OPENAI_415)
    assert upstream.requests == []
    assert httpx2.get(gateway.url + "/connections").json() == {"data": []}
    assert httpx2.get(gateway.url + "/bridges").json() == {"data": []}


def test_the_messages_api_answers_415_in_its_own_error_shape(gateway: ServerThread, upstream: ScriptedUpstream) -> None:
    # R: G6, A2
    response = simple_post(gateway.url + "/v1/messages", {"model": "assistant", "max_tokens": 5, "messages": USER})
    assert response.status_code == 415
    assert response.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": REFUSED}}
    assert upstream.requests == []


def test_the_mcp_endpoint_answers_415_as_a_json_rpc_error_and_opens_no_session(gateway: ServerThread) -> None:
    # R: G6, F1
    response = simple_post(gateway.url + "/mcp", INITIALIZE, **MCP_HEADERS)
    assert response.status_code == 415
    assert response.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": REFUSED}}
    assert "mcp-session-id" not in response.headers


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""])
def test_form_and_untyped_bodies_are_refused_on_the_model_and_bridge_apis(
    gateway: ServerThread, upstream: ScriptedUpstream, content_type: str
) -> None:
    # R: G6
    for path, body in (("/v1/chat/completions", CHAT), ("/connections", {"id": "c2", "endpoint": "http://127.0.0.1:9/mcp"})):
        headers = {"content-type": content_type} if content_type else {}
        response = httpx2.post(gateway.url + path, content=json.dumps(body).encode(), headers=headers)
        assert response.status_code == 415, (path, response.text)
        assert response.json()["error"]["code"] == "unsupported_media_type"
    assert upstream.requests == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_bodies_with_parameters_or_any_case_are_served(gateway: ServerThread, upstream: ScriptedUpstream, content_type: str) -> None:
    # R: G1, G6
    chat = simple_post(gateway.url + "/v1/chat/completions", CHAT, content_type)
    assert (chat.status_code, chat.json()["choices"][0]["message"]["content"]) == (200, "Hello from the scripted model.")
    if content_type.islower():  # the MCP SDK itself compares the type case-sensitively
        mcp = simple_post(gateway.url + "/mcp", INITIALIZE, content_type, **MCP_HEADERS)
        assert mcp.status_code == 200 and "mcp-session-id" in mcp.headers


def test_the_consoles_form_posts_still_reach_the_console(gateway: ServerThread) -> None:
    # R: C1, G6 (the sign-in form is application/x-www-form-urlencoded; its handler checks its CSRF token)
    response = httpx2.post(gateway.url + "/console/signin", data={"key": ""}, headers={"origin": gateway.url})
    assert response.status_code != 415
    assert response.headers["content-type"].startswith("text/html")


def test_the_refusal_is_counted_like_any_request_refused_before_a_route(gateway: ServerThread) -> None:
    # R: A4
    simple_post(gateway.url + "/v1/chat/completions", CHAT)
    registry = gateway.app.state.gateway.metrics.registry  # what /metrics serves (read here: its access is not this test's)
    assert registry.get_sample_value("toolgate_requests_total", {"route": "none", "status": "415"}) == 1.0


# --- auth off: loopback only unless the operator says otherwise ----------------------------------------------


def write_config(tmp_path: Path, server: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(f"{server}upstreams: [{{name: u, kind: inspect}}]\nroutes: [{{model: m, upstream: u}}]\n")
    return path


def toolgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_serve_without_auth_on_every_interface_refuses_and_names_the_setting(tmp_path: Path) -> None:
    # R: G3, G8
    refused = toolgate("serve", "--config", str(write_config(tmp_path)), "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert refused.stderr.startswith("toolgate serve: --host '0.0.0.0' is not a loopback address and auth.mode is 'none'")
    assert "server.allow_remote_without_auth: true" in refused.stderr


def test_check_refuses_a_non_loopback_host_without_auth_unless_the_operator_allows_it(tmp_path: Path) -> None:
    # R: G3, G8, D4
    path = write_config(tmp_path, "server: {host: 0.0.0.0}\n")
    refused = toolgate("check", str(path))
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"{path}:1:10: server.host: '0.0.0.0' is not a loopback address and auth.mode is 'none'")
    allowed = toolgate("check", str(write_config(tmp_path, "server: {host: 0.0.0.0, allow_remote_without_auth: true}\n")))
    assert (allowed.returncode, allowed.stderr) == (0, "")


def test_serve_without_auth_says_at_start_up_that_auth_is_off_and_where_it_listens(tmp_path: Path) -> None:
    # R: G3, G9
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(write_config(tmp_path)), "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: ready(f"http://127.0.0.1:{port}") or proc.poll() is not None, timeout=60)
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    said = [line["message"] for line in logs if "auth is off" in line.get("message", "")]
    assert said == [f"auth is off (auth.mode: none): every caller is served anonymously; listening on 127.0.0.1:{port} (loopback only)"]
