"""Console sign-in through the authorization server (C1): OpenID Connect authorization code + PKCE.

    GET /console/login     -> 303 to the issuer's authorization endpoint (PKCE S256, state, nonce)
    GET /console/callback  -> code exchanged at the token endpoint, the ID token checked (signature
                              by the issuer's JWKS, iss, aud = our client id, exp, nonce), claims
                              completed from userinfo -> a console session (gateway/console/session.py)

The state, nonce and code verifier of a sign-in in progress stay on the server, bound to the
browser that started it by a random cookie (`SameSite=Lax`, so it comes back on the issuer's
redirect); a callback from another browser, a replayed state or a stale one (10 minutes) is refused.
Identity claims are mapped as for access tokens (`auth.oauth`: user_claim, org_claim, ...).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx2
import jwt
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.auth import claims_identity
from gateway.config import ConsoleClient
from gateway.console.pages import PAGE_HEADERS, Console, SignInMethod
from gateway.console.once import OnceTable
from gateway.console.session import ConsoleFull, is_tls
from gateway.errors import GatewayError
from gateway.gateway import Gateway
from gateway.identity import Identity
from gateway.oauth import InvalidToken, ResourceServer, describe, verify_jwt
from gateway.secrets import resolve_secret

log = logging.getLogger("toolgate.console")

LOGIN_COOKIE = "toolgate_console_login"
PENDING_SECONDS = 600.0
MAX_PENDING = 10_000
FETCH_TIMEOUT_SECONDS = 10.0


class SignInFailed(Exception):
    """A sign-in that cannot complete; the message is shown on the sign-in page (no secret in it)."""


@dataclass
class PendingLogin:
    """A sign-in sent to the issuer and not yet back."""

    browser: str = field(repr=False)  # SHA-256 of the login cookie
    verifier: str = field(repr=False)
    nonce: str = field(repr=False)


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, code_challenge) for S256 (RFC 7636)."""
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class PendingLogins:
    """Sign-ins in progress, by their `state` (a `OnceTable`): each is taken once, within `PENDING_SECONDS`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._table = OnceTable[PendingLogin](lifetime_seconds=PENDING_SECONDS, capacity=MAX_PENDING, clock=clock)

    def add(self, state: str, login: PendingLogin) -> None:
        self._table.put(state, login)

    def discard(self, state: str | None) -> None:
        self._table.discard(state)

    def take(self, state: str, browser_cookie: str | None) -> PendingLogin:
        login = self._table.take(state)
        if login is None:
            raise SignInFailed("This sign-in is unknown or expired; please sign in again.")
        if not browser_cookie or not hmac.compare_digest(_digest(browser_cookie), login.browser):
            raise SignInFailed("This sign-in was started in another browser; please sign in again.")
        return login


class OidcSignIn:
    """The `/console/login` and `/console/callback` routes for one issuer and one client."""

    def __init__(self, console: Console, server: ResourceServer, client: ConsoleClient, client_secret: str | None) -> None:
        self.console = console
        self.server = server
        self.client = client
        self._secret = client_secret
        self.redirect_uri = server.public_url + "/console/callback"
        self.pending = PendingLogins()

    def routes(self) -> list[BaseRoute]:
        return [Route("/console/login", self.login, methods=["GET"]), Route("/console/callback", self.callback, methods=["GET"])]

    async def login(self, request: Request) -> Response:
        """Send the browser to the issuer with a fresh state, nonce and PKCE challenge."""
        try:
            metadata = await self._metadata()
        except SignInFailed as exc:
            return self.console.sign_in_failed(request, str(exc), 503)
        state, nonce, browser = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier, challenge = pkce_pair()
        self.pending.add(state, PendingLogin(_digest(browser), verifier, nonce))
        scopes = list(dict.fromkeys(["openid", *self.client.scopes]))
        query = urlencode({
            "response_type": "code", "client_id": self.client.client_id, "redirect_uri": self.redirect_uri,
            "scope": " ".join(scopes), "state": state, "nonce": nonce,
            "code_challenge": challenge, "code_challenge_method": "S256",
        })
        response = RedirectResponse(f"{metadata['authorization_endpoint']}?{query}", status_code=303, headers={"Cache-Control": "no-store"})
        # Lax, not Strict: it must come back with the issuer's (cross-site) redirect to the callback
        response.set_cookie(LOGIN_COOKIE, browser, max_age=int(PENDING_SECONDS), httponly=True, samesite="lax",
                            secure=is_tls(request), path="/console/callback")
        return response

    async def callback(self, request: Request) -> Response:
        """The issuer's answer: a code becomes a console session, anything else the sign-in page saying why."""
        params = request.query_params
        try:
            if params.get("error"):
                self.pending.discard(params.get("state"))
                raise SignInFailed(f"The authorization server refused the sign-in ({params['error'][:100]}).")
            state, code = params.get("state"), params.get("code")
            if not state or not code:
                raise SignInFailed("The authorization server's answer lacks its code or state.")
            login = self.pending.take(state, request.cookies.get(LOGIN_COOKIE))
            metadata = await self._metadata()
            iss = params.get("iss")
            if (iss is not None or metadata.get("authorization_response_iss_parameter_supported")) and iss != self.server.settings.issuer:
                raise SignInFailed("The answer came from another authorization server (RFC 9207 'iss').")
            identity = await self._identity(metadata, code, login)
        except SignInFailed as exc:
            log.info("console sign-in through the issuer refused: %s", exc)
            response = self.console.sign_in_failed(request, str(exc), 400)
            response.delete_cookie(LOGIN_COOKIE, path="/console/callback", httponly=True, samesite="lax", secure=is_tls(request))
            return response
        self.console.sessions.discard(request)  # a new sign-in replaces the browser's session (no fixation)
        try:
            session = self.console.sessions.create(identity)
        except ConsoleFull:
            log.warning("console sign-in through the issuer refused: the session table is full")
            return self.console.sign_in_failed(request, "The console is at its limit of signed-in sessions; please try again later.", 503)
        # a page, not a redirect: the session cookie is SameSite=Strict, and a redirect chain that
        # began at the issuer (another site) would not send it to /console yet
        response = HTMLResponse(_SIGNED_IN, headers=PAGE_HEADERS)
        self.console.sessions.set_cookie(response, session, request)
        response.delete_cookie(LOGIN_COOKIE, path="/console/callback", httponly=True, samesite="lax", secure=is_tls(request))
        log.info("console sign-in through the issuer: %s", identity.user_id)
        return response

    async def _identity(self, metadata: dict[str, Any], code: str, login: PendingLogin) -> Identity:
        tokens = await self._post_token(metadata, code, login.verifier)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SignInFailed("The authorization server sent no ID token.")
        settings = self.server.settings
        try:
            key = await self.server.keys.key_for(jwt.get_unverified_header(id_token).get("kid"))
            claims = verify_jwt(id_token, key, algorithms=settings.algorithms, audience=self.client.client_id,
                                issuer=settings.issuer, leeway=settings.leeway_seconds, require=("exp", "aud", "iss", "sub", "iat"))
        except (InvalidToken, jwt.PyJWTError, GatewayError) as exc:
            raise SignInFailed(f"The ID token was not accepted ({exc}).") from None
        if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), login.nonce.encode()):
            raise SignInFailed("The ID token was not accepted (nonce).")
        audience = claims.get("aud")
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.client.client_id:
            raise SignInFailed("The ID token was not accepted (issued to another party: azp).")  # OIDC Core §3.1.3.7
        access = tokens.get("access_token")
        if metadata.get("userinfo_endpoint") and isinstance(access, str):
            claims = {**await self._userinfo(str(metadata["userinfo_endpoint"]), access, claims["sub"]), **claims}
        return claims_identity(claims, settings, id_token)

    async def _post_token(self, metadata: dict[str, Any], code: str, verifier: str) -> dict[str, Any]:
        data = {"grant_type": "authorization_code", "code": code, "redirect_uri": self.redirect_uri, "code_verifier": verifier}
        headers = {"accept": "application/json"}
        if self._secret is None:
            data["client_id"] = self.client.client_id
        else:  # client_secret_basic (RFC 6749 §2.3.1: each part form-encoded first)
            pair = f"{quote(self.client.client_id, safe='')}:{quote(self._secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        try:
            response = await self._http().post(str(metadata["token_endpoint"]), data=data, headers=headers, timeout=FETCH_TIMEOUT_SECONDS)
        except httpx2.HTTPError as exc:
            raise SignInFailed(f"The authorization server could not be reached ({describe(exc)}).") from None
        body = _json_object(response)
        if response.status_code != 200:
            raise SignInFailed(f"The authorization server refused the code ({str(body.get('error', response.status_code))[:100]}).")
        return body

    async def _userinfo(self, url: str, access_token: str, sub: str) -> dict[str, Any]:
        try:
            response = await self._http().get(url, headers={"authorization": f"Bearer {access_token}"}, timeout=FETCH_TIMEOUT_SECONDS)
        except httpx2.HTTPError as exc:
            raise SignInFailed(f"The authorization server could not be reached ({describe(exc)}).") from None
        info = _json_object(response)
        if response.status_code != 200 or info.get("sub") != sub:  # OIDC Core §5.3.4: must be the same subject
            raise SignInFailed("The authorization server's user info did not match the signed-in user.")
        return info

    async def _metadata(self) -> dict[str, Any]:
        try:
            return await self.server.keys.issuer_metadata()
        except (httpx2.HTTPError, ValueError) as exc:
            raise SignInFailed(f"The authorization server could not be reached ({describe(exc)}).") from None

    def _http(self) -> httpx2.AsyncClient:
        http = self.server.keys.http
        if http is None:
            raise SignInFailed("The gateway is still starting; please try again.")
        return http


def _json_object(response: httpx2.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


_SIGNED_IN = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Signed in · toolgate console</title>
<meta http-equiv="refresh" content="0;url=/console"></head>
<body><p>Signed in. <a href="/console">Open the console</a>.</p></body></html>"""


def add_oidc_sign_in(console: Console, gateway: Gateway) -> None:
    """Offer sign-in through the issuer on the console (instead of the API-key form) when
    `auth.oauth.console` is configured; its client secret is resolved (and scrubbed) here."""
    server = gateway.auth.oauth
    if server is None or server.settings.console is None:
        return
    client = server.settings.console
    secret = resolve_secret(client.client_secret, gateway.config.base_dir, gateway.secrets) if client.client_secret else None
    sign_in = OidcSignIn(console, server, client, secret)
    host = server.settings.issuer.split("://", 1)[-1].split("/", 1)[0]
    console.add_sign_in(SignInMethod(f"Sign in with {host}", "/console/login"), sign_in.routes(), replaces_api_key=True)
