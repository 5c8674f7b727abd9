"""Authentication at the edge (G3): a bearer token (API key, JWT, or OAuth access token: F16)
becomes an `Identity`, or a 401."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from pathlib import Path
from typing import Any

import httpx2
import jwt
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from gateway.config import AuthConfig, ClaimMap, JwtSettings
from gateway.errors import Unauthorized, Unavailable
from gateway.identity import Identity
from gateway.oauth import InvalidToken, KeySet, ResourceServer, verify_jwt
from gateway.secrets import SecretSet, resolve_secret


def fingerprint(token: str) -> str:
    """SHA-256 hex of a token: safe to keep, compare and hash into keys."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


MAX_TOKEN_CHARS = 8192
"""Longest bearer token read (a JWT with the usual claims is well under 2 KB); beyond: 401."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None. Raises `Unauthorized` for
    a token over `MAX_TOKEN_CHARS` (it is never parsed or hashed)."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized(f"credential refused: a bearer token is at most {MAX_TOKEN_CHARS} characters")
    return token.strip()


CREDENTIAL_HEADERS = ("authorization", "x-api-key")
"""Headers a client API may carry its credential in (`x-api-key`: the Messages API)."""


def authorization_of(headers: Headers) -> str | None:
    """The one `Authorization` header of a request (None without one). Two or more of it, or of
    `x-api-key`, are refused (401): proxies and frameworks disagree on which one counts, so none does."""
    for name in CREDENTIAL_HEADERS:
        if len(headers.getlist(name)) > 1:
            raise Unauthorized(f"credential refused: send exactly one {'Authorization' if name == 'authorization' else name} header")
    values = headers.getlist("authorization")
    return values[0] if values else None


FORWARDED = "forwarded"
"""The client address of every request that carries X-Forwarded-For (see `client_address`)."""


def client_address(connection: HTTPConnection) -> str | None:
    """The address a request came from, for telling callers apart when nothing else can (auth off).
    A request with `X-Forwarded-For` counts as the one address `FORWARDED`: uvicorn takes the
    client's address from that header when the peer is a trusted proxy (loopback by default), so
    any local client could otherwise name a new address with every request."""
    if "x-forwarded-for" in connection.headers:
        return FORWARDED
    return connection.client.host if connection.client is not None else None


class Authenticator:
    """Resolves a presented token to an `Identity` according to `auth.mode`; with `auth.oauth`,
    access tokens of the authorization server too (F16), beside API keys."""

    def __init__(self, config: AuthConfig, base_dir: Path, secrets: SecretSet) -> None:
        self.mode = config.mode
        self._keys: dict[str, Identity] = {}
        self._jwt: JwtSettings | None = config.jwt
        self._jwt_key: Any = None
        self._jwt_keys: KeySet | None = None  # with `jwt.jwks_url`: the same key set as OAuth's (rotation included)
        self.oauth = ResourceServer(config.oauth) if config.oauth is not None else None
        for entry in config.api_keys:
            digest = entry.key_sha256 or fingerprint(resolve_secret(entry.key or "", base_dir, secrets))
            self._keys[digest] = Identity(entry.user_id, entry.org_id, entry.display_name, entry.email, digest)
        if config.mode == "jwt" and self._jwt is not None:
            if self._jwt.secret:
                self._jwt_key = resolve_secret(self._jwt.secret, base_dir, secrets)
            elif self._jwt.public_key:
                self._jwt_key = resolve_secret(self._jwt.public_key, base_dir, secrets)
            elif self._jwt.jwks_url and self._jwt.issuer:
                self._jwt_keys = KeySet(self._jwt.issuer, self._jwt.jwks_url)

    async def start(self, http: httpx2.AsyncClient) -> None:
        """Fetch the JWKS of `jwt.jwks_url` (start-up fails without it); with `oauth`, try the
        issuer's keys (an issuer not answering yet is retried when a token comes)."""
        if self._jwt_keys is not None:
            self._jwt_keys.http = http
            await self._jwt_keys.refresh()  # raises Unavailable: start-up fails saying why
        if self.oauth is not None:
            self.oauth.keys.http = http
            with contextlib.suppress(Unavailable):  # logged; requests meanwhile get 503 saying why
                await self.oauth.keys.refresh()

    def refused(self, message: str, path: str = "/", *, presented: bool = False) -> Unauthorized:
        """A 401 for `path`; with OAuth on, its challenge points at the resource's metadata."""
        if self.oauth is not None:
            return self.oauth.refused(message, path, presented=presented)
        return Unauthorized(message)

    async def authenticate(self, authorization: str | None, path: str = "/", client: str | None = None) -> Identity:
        """The identity of the caller of `path`; raises `Unauthorized` (401) without a valid credential.
        With `auth.mode: none` anyone may send any bearer string, so the identity also carries
        `client` (the request's address), by which per-caller limits then count (G4, F2)."""
        if self.mode == "none":
            token = bearer_token(authorization)
            return Identity(credential_fp=fingerprint(token) if token else None, client_address=client)
        try:
            token = bearer_token(authorization)
        except Unauthorized as exc:
            raise self.refused(exc.message, path, presented=True) from None
        if token is None:
            raise self.refused("missing credential: send 'Authorization: Bearer <token>'", path)
        if self.mode == "jwt":
            return await self._by_jwt(token)
        if self.mode == "api_keys":
            identity = self._by_key(token)
            if identity is not None:
                return identity
            if self.oauth is None or token.count(".") != 2:  # not a key, and not shaped like a JWT
                raise self.refused("invalid API key", path, presented=True)
        assert self.oauth is not None
        claims = await self.oauth.verify(token, path)
        return claims_identity(claims, self.oauth.settings, token)

    def _by_key(self, token: str) -> Identity | None:
        digest = fingerprint(token)
        for known, identity in self._keys.items():
            if hmac.compare_digest(known, digest):
                return identity
        return None

    async def _by_jwt(self, token: str) -> Identity:
        settings = self._jwt
        assert settings is not None
        try:
            key = self._jwt_key
            if self._jwt_keys is not None:
                key = await self._jwt_keys.key_for(jwt.get_unverified_header(token).get("kid"))
            claims = verify_jwt(token, key, algorithms=settings.algorithms, audience=settings.audience, issuer=settings.issuer)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid token: {type(exc).__name__}") from None
        except InvalidToken as exc:
            raise Unauthorized(f"invalid token: {exc}") from None
        return claims_identity(claims, settings, token)


def claims_identity(claims: dict[str, Any], names: ClaimMap, token: str) -> Identity:
    """The identity a verified token's claims name (which claim is which: `names`)."""

    def claim(name: str) -> str | None:
        value = claims.get(name)
        return str(value) if value is not None else None

    exp = claims.get("exp")
    return Identity(
        user_id=claim(names.user_claim),
        org_id=claim(names.org_claim),
        display_name=claim(names.name_claim),
        email=claim(names.email_claim),
        credential_fp=fingerprint(token),
        expires_at=float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None,
    )
