"""Limits at the edge (issue 15, finding 7; G3, G6): JWT audience and issuer, one credential,
token and header sizes, JSON nesting depth on every endpoint, slow bodies. Hostile input gets a
4xx that says what is wrong, never a 500."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import jwt
import pytest

from gateway.auth import Authenticator
from gateway.config import AuthConfig, ConfigError, parse_config
from gateway.errors import Unauthorized
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import ServerThread
from tests.support.upstream import ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
BOUND = {"audience": "toolgate", "issuer": "https://idp.test"}


@pytest.mark.parametrize("missing", ["audience", "issuer"])
def test_jwt_mode_without_audience_or_issuer_does_not_start(missing: str) -> None:
    # R: G3, G8 (issue 15: with audience unset any `aud` was accepted, the issuer never checked)
    settings = {"secret": canary.JWT_SECRET_REF, **BOUND}
    del settings[missing]
    data = simple_config("http://127.0.0.1:1", auth={"mode": "jwt", "jwt": settings})
    with pytest.raises(ConfigError) as refused:
        parse_config(data, "gateway.yaml")
    assert refused.value.problems == [
        "gateway.yaml: auth: mode 'jwt' needs 'jwt.audience' and 'jwt.issuer' (the token's 'aud' and 'iss' must match them)"
    ]


def test_a_jwt_for_another_issuer_or_audience_or_without_them_is_refused() -> None:
    # R: G3
    auth = Authenticator(AuthConfig(mode="jwt", jwt={"secret": canary.JWT_SECRET_REF, **BOUND}), Path("."), SecretSet())
    claims = {"sub": "u1", "aud": "toolgate", "iss": "https://idp.test", "exp": int(time.time()) + 60}
    assert asyncio.run(auth.authenticate(f"Bearer {jwt.encode(claims, canary.JWT_SECRET, algorithm='HS256')}")).user_id == "u1"
    for changed, reason in (({"iss": "https://evil.test"}, "InvalidIssuerError"), ({"aud": "other"}, "InvalidAudienceError"),
                            ({"iss": None}, "MissingRequiredClaimError"), ({"aud": None}, "MissingRequiredClaimError")):
        token = jwt.encode({k: v for k, v in {**claims, **changed}.items() if v is not None}, canary.JWT_SECRET, algorithm="HS256")
        with pytest.raises(Unauthorized, match=reason):
            asyncio.run(auth.authenticate(f"Bearer {token}"))


@pytest.fixture
def gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[ServerThread]:
    auth = {"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme"}]}
    config = simple_config(upstream.url, auth=auth, bridge={"database": str(tmp_path / "bridge.db")},
                           server={"body_timeout_seconds": 1})
    with running_gateway(config, tmp_path) as server:
        yield server


ALICE = {"authorization": f"Bearer {canary.ALICE_KEY}"}
ENDPOINTS = [("POST", "/v1/chat/completions"), ("POST", "/v1/responses"), ("POST", "/v1/messages"), ("GET", "/v1/models"), ("POST", "/connections"), ("POST", "/bridges"),
             ("GET", "/bridges"), ("POST", "/mcp")]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_two_authorization_headers_are_refused_everywhere(gateway: ServerThread, method: str, path: str) -> None:
    # R: G3 (issue 15: two headers were accepted, the first one winning)
    headers = [("authorization", f"Bearer {canary.ALICE_KEY}"), ("authorization", "Bearer someone-else")]
    response = httpx2.request(method, gateway.url + path, headers=headers, json={})
    assert response.status_code == 401
    assert "exactly one Authorization header" in response.text


def test_two_api_key_headers_are_refused_on_the_messages_api(gateway: ServerThread) -> None:
    # R: G3, A2
    headers = [("x-api-key", canary.ALICE_KEY), ("x-api-key", "someone-else")]
    response = httpx2.post(gateway.url + "/v1/messages", headers=headers, json={})
    assert response.status_code == 401
    assert "exactly one x-api-key header" in response.text


def test_an_oversized_token_gets_401_and_oversized_headers_431(gateway: ServerThread) -> None:
    # R: G3, G6 (issue 15: a 200 KB JWT was accepted)
    long_token = httpx2.post(gateway.url + "/v1/chat/completions", headers={"authorization": "Bearer " + "a" * 20_000},
                             json={"model": "assistant", "messages": USER})
    huge = httpx2.post(gateway.url + "/v1/chat/completions", headers={"authorization": "Bearer " + "a" * 200_000},
                       json={"model": "assistant", "messages": USER})
    assert (long_token.status_code, long_token.json()["error"]["message"]) == (
        401, "credential refused: a bearer token is at most 8192 characters")
    assert (huge.status_code, huge.json()["error"]["code"]) == (431, "headers_too_large")


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/chat/completions", b'{"model": "assistant", "messages": ' + nested(100_000) + b"}"),
    ("POST", "/v1/responses", b'{"model": "assistant", "input": ' + nested(100_000) + b"}"),
    ("POST", "/v1/messages", b'{"model": "assistant", "max_tokens": 5, "messages": ' + nested(100_000) + b"}"),
    ("POST", "/connections", nested(100_000)),
    ("POST", "/bridges", b'{"id": "b", "connections": ' + nested(100_000) + b"}"),
    ("PUT", "/bridges/none/graph", nested(100_000)),
    ("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ' + nested(100_000) + b"}"),
    ("POST", "/v1/chat/completions", b'{"model": "assistant", "messages": [{"role": "user", "content": "x", "extra": '
     + nested(500) + b"}]}"),
])
def test_json_nested_deeper_than_the_limit_is_a_400_on_every_endpoint(
    gateway: ServerThread, method: str, path: str, body: bytes
) -> None:
    # R: G6 (issue 15: 100k levels gave a 500, RecursionError)
    response = httpx2.request(method, gateway.url + path, headers={**ALICE, "content-type": "application/json"}, content=body)
    if path == "/bridges/none/graph":
        assert response.status_code == 404  # the bridge is looked up first; the body is never read
        return
    assert response.status_code == 400
    if path == "/mcp":  # the MCP SDK's own parser answers with a JSON-RPC parse error
        assert response.json()["error"]["code"] == -32700
        return
    assert response.json()["error"]["message"].endswith("is nested deeper than 128 levels")


def test_json_strings_full_of_brackets_are_not_nesting(gateway: ServerThread, upstream: ScriptedUpstream) -> None:
    # R: G1, G6
    text = "[[[{{{" * 200
    response = httpx2.post(gateway.url + "/v1/chat/completions", headers=ALICE,
                           json={"model": "assistant", "messages": [{"role": "user", "content": text}]})
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/connections", "/mcp"])
def test_a_body_that_stops_arriving_gets_408(gateway: ServerThread, path: str) -> None:
    # R: G6 (issue 15: slow bodies had no read timeout; server.body_timeout_seconds is 1 here)
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {canary.ALICE_KEY}\r\n"
            "content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\": ")
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(head.encode())  # the rest of the body never comes
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status, body = answer.split(b"\r\n", 1)[0], answer.split(b"\r\n\r\n", 1)[1]
    assert status == b"HTTP/1.1 408 Request Timeout"
    assert json.loads(body)["error"]["code"] == "request_timeout"


def _length(response: bytes) -> int:
    for line in response.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0
