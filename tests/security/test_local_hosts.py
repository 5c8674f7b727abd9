"""With auth off, a web page cannot drive the gateway through DNS rebinding (issue 32, finding 5).

The Content-Type rule stops cross-origin pages; a page whose name is rebound to 127.0.0.1 is
same-origin to the browser, and sends real JSON. It names its own host in `Host` and `Origin`, so
with `auth.mode: none` every route answers only requests addressed to a loopback name from no page
or a loopback page. A real `toolgate serve` process on loopback; the scripted upstream counts
what reached it.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from gateway.api.local_hosts import host_name
from tests.support.gateway import running_gateway, simple_config
from tests.support.upstream import ScriptedUpstream

CHAT = {"model": "assistant", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", CHAT),
    ("/v1/responses", {"model": "assistant", "input": "hi"}),
    ("/v1/messages", {"model": "assistant", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
    ("/connections", {"id": "gh", "endpoint": "https://mcp.example.com/mcp"}),
])
def test_with_auth_off_a_rebound_page_reaches_no_route(
    upstream: ScriptedUpstream, tmp_path: Path, path: str, body: dict[str, object],
) -> None:
    # R: G3, G6, F2
    config = simple_config(upstream.url, bridge={"enabled": True, "database": str(tmp_path / "bridge.db")})
    with running_gateway(config, tmp_path) as gw:
        rebound = httpx2.post(gw.url + path, json=body, headers={"host": f"attacker.example:{gw.port}",
                                                                  "origin": f"http://attacker.example:{gw.port}"})
        foreign_page = httpx2.post(gw.url + path, json=body, headers={"origin": "http://attacker.example"})
        null_page = httpx2.post(gw.url + path, json=body, headers={"origin": "null"})
        models = httpx2.get(gw.url + "/v1/models", headers={"host": "attacker.example"})
        listed = httpx2.get(gw.url + "/connections", headers={"host": "attacker.example"})
    assert rebound.status_code == 421, rebound.text
    assert "answers only requests addressed to localhost, 127.0.0.1 or [::1]" in rebound.text
    assert (foreign_page.status_code, null_page.status_code) == (403, 403)
    assert "serves pages of this machine only" in foreign_page.text
    assert (models.status_code, listed.status_code) == (421, 421)
    assert upstream.requests == []


def test_with_auth_off_this_machines_clients_and_pages_are_served(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: G1, G3
    config = simple_config(upstream.url)
    with running_gateway(config, tmp_path) as gw:
        plain = httpx2.post(gw.url + "/v1/chat/completions", json=CHAT)
        named = httpx2.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"host": f"localhost:{gw.port}"})
        page = httpx2.post(gw.url + "/v1/chat/completions", json=CHAT,
                           headers={"origin": f"http://localhost:{gw.port}"})
        v6 = httpx2.get(gw.url + "/v1/models", headers={"host": "[::1]", "origin": "http://[::1]:3000"})
    assert [r.status_code for r in (plain, named, page, v6)] == [200, 200, 200, 200]
    assert len(upstream.requests) == 3


def test_with_authentication_on_any_host_is_served(upstream: ScriptedUpstream, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # R: G3 -- a credential is what a page cannot have; the host rule is auth-off's alone
    monkeypatch.setenv("TOOLGATE_TEST_LOCAL_HOSTS_KEY", "sk-local-hosts-test-key-1")
    config = simple_config(upstream.url)
    config["auth"] = {"mode": "api_keys", "api_keys": [{"key": "env:TOOLGATE_TEST_LOCAL_HOSTS_KEY", "user_id": "u"}]}
    with running_gateway(config, tmp_path) as gw:
        answer = httpx2.post(gw.url + "/v1/chat/completions", json=CHAT,
                             headers={"host": "gateway.example.com", "authorization": "Bearer sk-local-hosts-test-key-1"})
    assert answer.status_code == 200, answer.text


def test_the_host_name_is_read_without_its_port() -> None:
    # R: G3
    assert [host_name(h) for h in ("localhost:8080", "127.0.0.1", "[::1]:8080", "[::1]", "evil.example:80")] == [
        "localhost", "127.0.0.1", "::1", "::1", "evil.example"]
