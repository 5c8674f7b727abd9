"""OAuth at the edge (F16): the gateway as a resource server of a real authorization server
(npm oidc-provider on loopback), signed in to by the MCP Python SDK's own OAuth client."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from gateway.config import ConfigError, parse_config
from tests.support import canary
from tests.support.bridge_servers import CallLog, mcp_http, tool_server
from tests.support.gateway import running_gateway
from tests.support.http_server import ServerThread, serve
from tests.support.node_servers import free_port
from tests.support.oidc import OidcProvider, access_token, sign_in
from tests.support.upstream import ScriptedUpstream

CHAT = {"model": "assistant", "messages": [{"role": "user", "content": "hello"}]}
REDIRECT = "http://127.0.0.1:9/callback"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[OidcProvider]:
    with OidcProvider() as provider:
        yield provider


@pytest.fixture
def tools() -> Iterator[ServerThread]:
    with serve(tool_server(CallLog(), delay=0, required_header=(canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN))) as server:
        yield server


def oauth_config(upstream: ScriptedUpstream, tools: ServerThread, issuer_url: str, port: int, **oauth: Any) -> dict[str, Any]:
    """API keys and OAuth side by side; alice owns a connection to the tool server and bridge `demo`."""
    return {
        "auth": {
            "mode": "api_keys",
            "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "alice", "email": "alice@acme.test"}],
            "oauth": {"issuer": issuer_url, "public_url": f"http://127.0.0.1:{port}",
                      "scopes": {"mcp": ["toolgate"], "v1": ["toolgate"]}, **oauth},
        },
        "upstreams": [{"name": "scripted", "kind": "openai", "api_base": upstream.url + "/v1", "api_key": canary.UPSTREAM_KEY_REF}],
        "routes": [{"model": "assistant", "upstream": "scripted", "upstream_model": "scripted-model"}],
        "bridge": {
            "database": "bridge.db",
            "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp", **canary.connection_auth()}],
            "bridges": [{"id": "demo", "owner": "alice", "connections": ["tools"]}],
        },
    }


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def claims_of(token: str) -> dict[str, Any]:
    """The payload of a JWT, read without verifying it (what the test inspects of a real token)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def metadata_pointer(gateway: str, rpath: str) -> str:
    return f'resource_metadata="{gateway}/.well-known/oauth-protected-resource{rpath}"'


@pytest.mark.parametrize("rpath", ["/mcp", "/mcp/demo"])
async def test_the_sdk_oauth_client_discovers_signs_in_and_lists_tools_on_mcp(
    upstream: ScriptedUpstream, tools: ServerThread, issuer: OidcProvider, tmp_path: Path, rpath: str
) -> None:
    # R: F16, F1, F2, G3
    port = free_port()
    with running_gateway(oauth_config(upstream, tools, issuer.issuer, port), tmp_path, port=port) as gw:
        storage = MemoryStorage()
        browser = httpx2.AsyncClient(timeout=30)  # the person's browser: its own cookies at the issuer
        sent_to: list[str] = []

        async def redirect(url: str) -> None:
            sent_to.append(url)

        async def callback() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(**await sign_in(browser, sent_to[-1], "alice", REDIRECT))

        provider = OAuthClientProvider(
            f"{gw.url}{rpath}",
            OAuthClientMetadata(redirect_uris=[REDIRECT], client_name="toolgate test client", token_endpoint_auth_method="none",
                                grant_types=["authorization_code", "refresh_token"], response_types=["code"]),
            storage, redirect_handler=redirect, callback_handler=callback,
        )
        async with browser, httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with Client(streamable_http_client(f"{gw.url}{rpath}", http_client=http)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                echoed = await client.call_tool("tools__echo", {"text": "signed in"})
        assert storage.tokens is not None and storage.client is not None
        token = storage.tokens.access_token
        # the same token, presented by hand: good on its resource, not on /v1 (another one)
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}) as by_hand:
            chat = await by_hand.post(f"{gw.url}/v1/chat/completions", json=CHAT)
            # a token for /mcp holds for the bridges under it; a bridge's token only for that bridge
            other = await by_hand.post(f"{gw.url}{'/mcp/demo' if rpath == '/mcp' else '/mcp'}", json=INITIALIZE, headers=MCP_HEADERS)
    assert "tools__echo" in names  # alice's connection: the token's subject became alice (G3)
    assert echoed.content[0].text == "signed in"
    authorize = sent_to[0]
    assert authorize.startswith(issuer.issuer + "/auth?") and "code_challenge_method=S256" in authorize
    assert "resource=" + quote(gw.url + rpath, safe="") in authorize
    claims = claims_of(token)
    assert (claims["iss"], claims["aud"], claims["sub"], claims["email"]) == (issuer.issuer, gw.url + rpath, "alice", "alice@acme.test")
    assert "toolgate" in claims["scope"].split()
    assert storage.client.client_id and storage.client.client_id == claims["client_id"]  # registered dynamically
    assert chat.status_code == 401 and "InvalidAudienceError" in chat.json()["error"]["message"]
    assert metadata_pointer(gw.url, "/v1") in chat.headers["www-authenticate"]
    assert other.status_code == (200 if rpath == "/mcp" else 401)


async def test_tokens_for_v1_or_the_whole_gateway_and_api_keys_work_beside_each_other(
    upstream: ScriptedUpstream, tools: ServerThread, issuer: OidcProvider, tmp_path: Path
) -> None:
    # R: F16, G3
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    for_v1 = await access_token(issuer.issuer, f"{public}/v1", "bob")
    for_gateway = await access_token(issuer.issuer, public, "alice")
    with running_gateway(oauth_config(upstream, tools, issuer.issuer, port), tmp_path, port=port) as gw:
        async with httpx2.AsyncClient(timeout=30) as http:
            def bearer(token: str) -> dict[str, str]:
                return {"authorization": f"Bearer {token}"}
            v1_chat = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT, headers=bearer(for_v1))
            v1_models = await http.get(f"{gw.url}/v1/models", headers=bearer(for_v1))
            v1_on_mcp = await http.get(f"{gw.url}/mcp", headers=bearer(for_v1))
            whole_chat = await http.post(f"{gw.url}/chat/completions", json=CHAT, headers=bearer(for_gateway))
            key_chat = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT, headers=bearer(canary.ALICE_KEY))
            wrong_key = await http.get(f"{gw.url}/v1/models", headers=bearer("not-a-known-key"))
        async with Client(streamable_http_client(f"{gw.url}/mcp/demo", http_client=httpx2.AsyncClient(headers=bearer(for_gateway)))) as alice:
            on_bridge = {tool.name for tool in (await alice.list_tools()).tools}
        async with Client(streamable_http_client(f"{gw.url}/mcp/demo", http_client=mcp_http("alice-key"))) as keyed:
            by_key = {tool.name for tool in (await keyed.list_tools()).tools}
    assert v1_chat.status_code == 200 and v1_models.status_code == 200
    assert v1_on_mcp.status_code == 401 and "InvalidAudienceError" in v1_on_mcp.json()["error"]["message"]
    assert v1_on_mcp.json()["error"]["code"] == "invalid_token"  # R: F16 — a refused token (RFC 6750)
    assert wrong_key.status_code == 401 and wrong_key.json()["error"]["code"] == "invalid_api_key"  # a key's: unchanged
    assert whole_chat.status_code == 200 and key_chat.status_code == 200
    assert "tools__echo" in on_bridge and on_bridge == by_key
    assert len(upstream.requests) == 3


async def test_protected_resource_metadata_names_each_resource_and_the_issuer(
    upstream: ScriptedUpstream, tools: ServerThread, issuer: OidcProvider, tmp_path: Path
) -> None:
    # R: F16
    port = free_port()
    with running_gateway(oauth_config(upstream, tools, issuer.issuer, port), tmp_path, port=port) as gw:
        async with httpx2.AsyncClient() as http:
            documents = {rpath: await http.get(f"{gw.url}/.well-known/oauth-protected-resource{rpath}")
                         for rpath in ("", "/mcp", "/mcp/demo", "/v1")}
            preflight = await http.options(f"{gw.url}/.well-known/oauth-protected-resource/mcp", headers={
                "origin": "https://app.example", "access-control-request-method": "GET",
                "access-control-request-headers": "mcp-protocol-version"})
            bare = await http.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            bare_bridge = await http.get(f"{gw.url}/mcp/demo")
            bare_chat = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT)
    for rpath, response in documents.items():
        assert response.status_code == 200 and response.headers["access-control-allow-origin"] == "*"
        assert response.json() == {
            "resource": gw.url + rpath, "authorization_servers": [issuer.issuer], "scopes_supported": ["toolgate"],
            "bearer_methods_supported": ["header"], "resource_name": "toolgate",
        }
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == "*"
    assert bare.status_code == 401
    assert bare.headers["www-authenticate"] == f'Bearer {metadata_pointer(gw.url, "/mcp")}, scope="toolgate"'
    assert bare_bridge.headers["www-authenticate"] == f'Bearer {metadata_pointer(gw.url, "/mcp/demo")}, scope="toolgate"'
    assert bare_chat.status_code == 401 and metadata_pointer(gw.url, "/v1") in bare_chat.headers["www-authenticate"]
    assert bare_chat.json()["error"]["type"] == "authentication_error"


def unsigned(claims: dict[str, Any], alg: str) -> str:
    part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{part({'alg': alg, 'typ': 'at+jwt'})}.{part(claims)}."


async def test_expired_foreign_unsigned_and_none_tokens_get_401_with_the_metadata_pointer(
    upstream: ScriptedUpstream, tools: ServerThread, issuer: OidcProvider, tmp_path: Path
) -> None:
    # R: F16, G3
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    elsewhere = await access_token(issuer.issuer, "http://127.0.0.1:9/another-server", "alice")  # real, for another resource
    mcp = f"{public}/mcp"
    good = issuer.craft(mcp)
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    bad = {
        "expired": (issuer.craft(mcp, exp=now - 600, iat=now - 1200), "expired"),
        "another audience": (elsewhere, "InvalidAudienceError"),
        "another issuer": (issuer.craft(mcp, iss="http://127.0.0.1:9/evil"), "InvalidIssuerError"),
        "no audience": (issuer.craft(mcp, aud=None), "MissingRequiredClaimError"),
        "unsigned": (unsigned(claims_of(good), "RS256"), "InvalidSignatureError"),
        "alg none": (unsigned(claims_of(good), "none"), "algorithm 'none' is not accepted"),
        "HS256 with the public key": (jwt.encode(claims_of(good), "x" * 32, algorithm="HS256"), "algorithm 'HS256' is not accepted"),
        "another key": (jwt.encode(claims_of(good), other_key, algorithm="RS256", headers={"kid": issuer.kid}), "InvalidSignatureError"),
        "junk": ("not.a.token", "DecodeError"),
    }
    with running_gateway(oauth_config(upstream, tools, issuer.issuer, port), tmp_path, port=port) as gw:
        async with httpx2.AsyncClient() as http:
            def get(token: str) -> Any:
                return http.get(f"{gw.url}/mcp", headers={"authorization": f"Bearer {token}"})
            accepted = await http.post(f"{gw.url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "authorization": f"Bearer {good}"})
            answers = {name: await get(token) for name, (token, _) in bad.items()}
            no_scope = await get(issuer.craft(mcp, scope="openid"))
            on_v1 = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT,
                                    headers={"authorization": f"Bearer {issuer.craft(public + '/v1', exp=now - 600)}"})
    assert accepted.status_code == 200 and "serverInfo" in accepted.text
    for name, (_, reason) in bad.items():
        answer = answers[name]
        challenge = answer.headers["www-authenticate"]
        assert answer.status_code == 401, name
        assert reason in answer.json()["error"]["message"], (name, answer.json())
        assert answer.json()["error"]["code"] == "invalid_token", name  # R: F16 (RFC 6750), not invalid_api_key
        assert challenge.startswith(f"Bearer {metadata_pointer(gw.url, '/mcp')}, error=\"invalid_token\""), (name, challenge)
    assert no_scope.status_code == 403 and no_scope.json()["error"]["code"] == "insufficient_scope"
    assert 'error="insufficient_scope"' in no_scope.headers["www-authenticate"] and 'scope="toolgate"' in no_scope.headers["www-authenticate"]
    assert on_v1.status_code == 401 and on_v1.json()["error"]["message"] == "invalid token: expired"
    assert on_v1.json()["error"]["code"] == "invalid_token"
    assert f'{metadata_pointer(gw.url, "/v1")}, error="invalid_token"' in on_v1.headers["www-authenticate"]
    assert len(upstream.requests) == 0


async def test_an_issuer_that_does_not_answer_gives_503_saying_why_and_the_gateway_stays_up(
    upstream: ScriptedUpstream, tools: ServerThread, issuer: OidcProvider, tmp_path: Path
) -> None:
    # R: F16
    port = free_port()
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with running_gateway(oauth_config(upstream, tools, gone, port), tmp_path, port=port) as gw:
        async with httpx2.AsyncClient() as http:
            token = issuer.craft(f"{gw.url}/mcp", iss=gone)
            first = await http.get(f"{gw.url}/mcp", headers={"authorization": f"Bearer {token}"})
            again = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {token}"})
            keyed = await http.post(f"{gw.url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {canary.ALICE_KEY}"})
            health = await http.get(f"{gw.url}/healthz")
    for answer in (first, again):
        assert answer.status_code == 503
        message = answer.json()["error"]["message"]
        assert "signing keys could not be fetched" in message and f"{gone}/.well-known/" in message
    assert keyed.status_code == 200 and health.status_code == 200


@pytest.mark.parametrize(("auth", "problem"), [
    ({"mode": "none"}, "an 'oauth' section works with mode 'oauth' (access tokens) or 'api_keys' (keys and access tokens)"),
    ({"mode": "oauth", "oauth": None}, "mode 'oauth' needs an 'oauth' section (issuer, public_url)"),
    ({"mode": "oauth", "algorithms": ["HS256", "RS256"]}, "algorithms ['HS256'] are not public-key signatures"),
    ({"mode": "oauth", "public_url": "https://gw.example.com/prefix"}, "auth.oauth.public_url: must be this gateway's origin as clients reach it (scheme://host[:port]), without a path"),
])
def test_an_oauth_section_that_cannot_protect_anything_is_refused_at_load(auth: dict[str, Any], problem: str) -> None:
    # R: F16, G8
    settings = {"issuer": "https://idp.example.com", "public_url": "https://gw.example.com"}
    mode = auth.pop("mode")
    oauth = None if "oauth" in auth else {**settings, **auth}
    config = {"auth": {"mode": mode, "oauth": oauth}, "upstreams": [{"name": "e", "kind": "inspect"}], "routes": [{"model": "m", "upstream": "e"}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(config, "gw.yaml")
    assert any(problem in line for line in caught.value.problems), caught.value.problems


async def test_a_rotated_signing_key_is_fetched_when_a_token_names_it(
    upstream: ScriptedUpstream, tools: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R: F16
    port = free_port()
    mcp = f"http://127.0.0.1:{port}/mcp"
    with OidcProvider() as rotating, running_gateway(oauth_config(upstream, tools, rotating.issuer, port), tmp_path, port=port) as gw:
        old = await access_token(rotating.issuer, mcp, "alice")
        async with httpx2.AsyncClient(headers=MCP_HEADERS) as http:
            def initialize(token: str) -> Any:
                return http.post(f"{gw.url}/mcp", json=INITIALIZE, headers={"authorization": f"Bearer {token}"})
            before = await initialize(old)
            rotating.rotate_key()
            new = await access_token(rotating.issuer, mcp, "alice")
            monkeypatch.setattr("gateway.oauth.KEYS_REFRESH_SECONDS", 0.0)  # the refetch's rate limit, not waited out here
            after = await initialize(new)
            retired = await initialize(old)
    assert jwt.get_unverified_header(old)["kid"] != jwt.get_unverified_header(new)["kid"]
    assert before.status_code == 200 and after.status_code == 200
    assert retired.status_code == 401 and "no key of the issuer's JWKS matches" in retired.json()["error"]["message"]
