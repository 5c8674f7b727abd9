"""A real authorization server for the OAuth tests (F16, C1): npm `oidc-provider` (pinned in
tests/support/node/oidc, installed by `.ci/run`), on a free loopback port.

- `OidcProvider`: starts `server.mjs` with a signing key made here (so a test can also craft the
  tokens no issuer would hand out: expired, for another issuer, without a scope), two accounts
  (`alice`, `bob`) and open dynamic client registration.
- `sign_in(http, url, user, redirect_uri)`: what a person does in the browser, over httpx:
  follows the authorization redirect, fills the issuer's login form, and returns the query of the
  redirect back to the client (`code`, `state`, `iss`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.node_servers import NODE_DIR, free_port, require_node, start_node, stop_node

OIDC_DIR = NODE_DIR / "oidc"
SERVER = OIDC_DIR / "server.mjs"
ACCOUNTS = {
    "alice": {"password": "alice-pw", "email": "alice@acme.test", "name": "Alice", "org_id": "acme"},
    "bob": {"password": "bob-pw", "email": "bob@globex.test", "name": "Bob", "org_id": "globex"},
}


class OidcProvider:
    """oidc-provider in a child process; `issuer` is its URL."""

    def __init__(self, scopes: str = "toolgate", clients: list[dict[str, Any]] | None = None) -> None:
        self.node = require_node(OIDC_DIR / "node_modules" / "oidc-provider" / "package.json")
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self._env = {"OIDC_ACCOUNTS": json.dumps(ACCOUNTS), "OIDC_SCOPES": scopes, "OIDC_CLIENTS": json.dumps(clients or [])}
        self._new_key()
        self.process: Any = None
        self._ran = False

    def _new_key(self) -> None:
        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:16]
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private_key))
        self._env["OIDC_JWKS"] = json.dumps({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]})

    def rotate_key(self) -> None:
        """The issuer replaces its signing key (a new `kid`): restarted on the same port with only the new one."""
        self.stop()
        self._new_key()
        self.start()

    def start(self) -> "OidcProvider":
        for attempt in range(3):
            try:
                self.process = start_node([self.node, str(SERVER)], OIDC_DIR, self.port, "oidc-provider listening",
                                          "oidc-provider", env=self._env)
                self._ran = True
                return self
            except RuntimeError as exc:
                # another process took the free port first (the machine is shared): a new one, unless
                # this is a restart, which must keep the issuer's URL
                if "EADDRINUSE" not in str(exc) or self._ran or attempt == 2:
                    raise
                self.port = free_port()
                self.issuer = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_node(process)

    def __enter__(self) -> "OidcProvider":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def craft(self, audience: str, **claims: Any) -> str:
        """A token signed with the issuer's own key, for the cases its policy never produces
        (expired, another `iss`, missing scope); `claims` override the usual ones."""
        now = int(time.time())
        body = {"iss": self.issuer, "sub": "alice", "aud": audience, "iat": now, "exp": now + 300,
                "scope": "toolgate", "client_id": "crafted", **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.private_key, algorithm="RS256", headers={"kid": self.kid, "typ": "at+jwt"})


async def sign_in(http: httpx2.AsyncClient, url: str, user: str, redirect_uri: str, password: str | None = None) -> dict[str, str]:
    """Follow `url` (an authorization request) through the issuer's login form as `user`, up to
    the redirect to `redirect_uri`; returns that redirect's query parameters."""
    password = password if password is not None else ACCOUNTS[user]["password"]
    response = await http.get(url, follow_redirects=False)
    for _ in range(20):
        location = response.headers.get("location")
        if location is not None:
            target = urljoin(str(response.request.url), location)
            if target.startswith(redirect_uri):
                return {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            response = await http.get(target, follow_redirects=False)
            continue
        if response.status_code == 200 and 'name="password"' in response.text:
            action = urljoin(str(response.request.url), _form_action(response.text))
            response = await http.post(action, data={"login": user, "password": password}, follow_redirects=False)
            if response.status_code == 200 and 'id="error"' in response.text:
                raise PermissionError(f"the issuer refused the sign-in of {user}")
            continue
        raise AssertionError(f"unexpected answer from {response.request.url}: {response.status_code} {response.text[:300]}")
    raise AssertionError("the sign-in did not come back to the client within 20 steps")


def _form_action(page: str) -> str:
    start = page.index('action="') + len('action="')
    return page[start:page.index('"', start)]



async def access_token(issuer: str, resource: str, user: str, scope: str = "toolgate",
                       redirect_uri: str = "http://127.0.0.1:9/callback") -> str:
    """An access token of the issuer for `resource` (RFC 8707), got as any OAuth client gets one:
    dynamic registration, authorization code with PKCE (S256), `user` signing in, token request."""
    async with httpx2.AsyncClient(timeout=30) as http:
        metadata = (await http.get(issuer + "/.well-known/oauth-authorization-server")).json()
        registered = await http.post(metadata["registration_endpoint"], json={
            "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code"], "response_types": ["code"]})
        client_id = registered.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(16)
        query = urlencode({"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "scope": scope,
                           "state": state, "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource})
        back = await sign_in(http, f"{metadata['authorization_endpoint']}?{query}", user, redirect_uri)
        assert back.get("state") == state, back
        answer = await http.post(metadata["token_endpoint"], data={
            "grant_type": "authorization_code", "code": back["code"], "redirect_uri": redirect_uri,
            "client_id": client_id, "code_verifier": verifier, "resource": resource})
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])


CONSOLE_CLIENT = "toolgate-console"
CONSOLE_SECRET_ENV = "TOOLGATE_TEST_CONSOLE_SECRET"


def console_client(gateway_port: int, secret: str) -> dict[str, Any]:
    """The console's registration at the issuer (`OidcProvider(clients=[...])`): a confidential
    client whose redirect URI is the gateway's `/console/callback`."""
    return {"client_id": CONSOLE_CLIENT, "client_secret": secret, "grant_types": ["authorization_code"],
            "response_types": ["code"], "redirect_uris": [f"http://127.0.0.1:{gateway_port}/console/callback"],
            "token_endpoint_auth_method": "client_secret_basic"}


def oauth_section(issuer: str, gateway_port: int, **more: Any) -> dict[str, Any]:
    """`auth.oauth` for a gateway on `gateway_port` whose console signs in through `issuer` (the
    client secret by reference: `CONSOLE_SECRET_ENV` must hold it)."""
    return {"issuer": issuer, "public_url": f"http://127.0.0.1:{gateway_port}",
            "console": {"client_id": CONSOLE_CLIENT, "client_secret": f"env:{CONSOLE_SECRET_ENV}",
                        "scopes": ["openid", "email", "profile", "org"]}, **more}


def sign_in_in_browser(page: Any, gateway_url: str, issuer: OidcProvider, user: str) -> None:
    """In a Playwright page: the console's sign-in button, the issuer's login form, back to the console."""
    page.goto(gateway_url + "/console")
    page.click(f"a:has-text('Sign in with 127.0.0.1:{issuer.port}')")
    page.wait_for_url(issuer.issuer + "/interaction/**")
    page.fill("#login", user)
    page.fill("#password", ACCOUNTS[user]["password"])
    page.click("#submit")
    page.wait_for_url(gateway_url + "/console")
