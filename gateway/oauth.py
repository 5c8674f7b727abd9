"""OAuth at the edge (F16): the gateway as an OAuth 2.1 resource server, per the MCP authorization
specification.

- Resources: `<public_url>/mcp`, `<public_url>/mcp/<bridgeId>`, `<public_url>/v1` and the gateway as
  a whole (`<public_url>`). Each has protected-resource metadata (RFC 9728) at
  `<public_url>/.well-known/oauth-protected-resource<path>`.
- A refused request gets `WWW-Authenticate: Bearer resource_metadata="<that URL>"` (with
  `error="invalid_token"` when a token was presented), so a client can discover where to sign in.
- An access token is a JWT of the configured issuer, signed by a key of its JWKS (discovered from
  the issuer's metadata, RFC 8414, or configured), whose `aud` names the resource being accessed or
  one that contains it (RFC 8707), unexpired, with the scopes the resource requires.

`Authenticator` (gateway/auth.py) uses `ResourceServer` for tokens; the routes here serve the metadata.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import quote

import httpx2
import jwt
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.config import OAuthSettings
from gateway.errors import InsufficientScope, Unauthorized, Unavailable

log = logging.getLogger("toolgate.oauth")

METADATA_PATH = "/.well-known/oauth-protected-resource"
MODEL_API = "/v1"
MODEL_API_PATHS = ("/chat/completions", "/responses")
"""Model API routes served without the `/v1` prefix too; they belong to the `/v1` resource."""
KEYS_REFRESH_SECONDS = 30.0
"""A token signed by a key we do not hold refetches the JWKS, at most once in this many seconds."""
KEYS_MAX_AGE_SECONDS = 3600.0
FETCH_TIMEOUT_SECONDS = 10.0


def resource_path(path: str) -> str:
    """The resource a request path belongs to: `/mcp`, `/mcp/<bridgeId>`, `/v1`, or `` (the gateway)."""
    if path == "/mcp" or path.startswith("/mcp/"):
        return path
    if path == MODEL_API or path.startswith(MODEL_API + "/") or any(path == p or path.startswith(p + "/") for p in MODEL_API_PATHS):
        return MODEL_API
    return ""


class InvalidToken(Exception):
    """A token that is not an acceptable access token; the message says why (never the token)."""


def verify_jwt(token: str, key: Any, *, algorithms: list[str], audience: str | list[str] | None, issuer: str | None,
               leeway: float = 0, require: tuple[str, ...] = ("exp", "aud", "iss")) -> dict[str, Any]:
    """The claims of `token` signed by `key`; raises `InvalidToken` naming what failed."""
    try:
        claims: dict[str, Any] = jwt.decode(
            token, key, algorithms=algorithms, audience=audience, issuer=issuer, leeway=leeway,
            options={"require": list(require)},
        )
        return claims
    except jwt.ExpiredSignatureError:
        raise InvalidToken("expired") from None
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        # a token whose `alg` names another key family (HS256 against a public key, RS256 or
        # ES256 against an HMAC secret) fails in key preparation, outside InvalidTokenError
        raise InvalidToken(type(exc).__name__) from None


class KeySet:
    """The issuer's signing keys: fetched on first need, refetched for an unknown `kid` (rotation)
    at most every `KEYS_REFRESH_SECONDS`, and when older than `KEYS_MAX_AGE_SECONDS`."""

    def __init__(self, issuer: str, jwks_url: str | None) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.http: httpx2.AsyncClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        self._fetched_at = float("-inf")
        self._error: str | None = None
        self._metadata: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def key_for(self, kid: str | None) -> Any:
        """The public key for `kid`; raises `InvalidToken` when the issuer has no such key, and
        `Unavailable` when its keys cannot be fetched at all."""
        key = self._find(kid)
        stale = time.monotonic() - self._fetched_at
        if self._keys is None or (key is None and stale >= KEYS_REFRESH_SECONDS) or stale >= KEYS_MAX_AGE_SECONDS:
            await self.refresh()
            key = self._find(kid)
        if key is None:
            raise InvalidToken("no key of the issuer's JWKS matches its 'kid'")
        return key

    def _find(self, kid: str | None) -> Any:
        keys = self._keys.keys if self._keys is not None else []
        return next((k.key for k in keys if kid is None or k.key_id == kid), None)

    async def refresh(self) -> None:
        """Fetch the JWKS (one fetch at a time, at most one every `KEYS_REFRESH_SECONDS`); keep the
        old keys when it fails. Without any keys, raises `Unavailable` saying why."""
        async with self._lock:
            if time.monotonic() - self._fetched_at >= KEYS_REFRESH_SECONDS:
                self._fetched_at = time.monotonic()
                try:
                    self._keys = jwt.PyJWKSet.from_dict(await self._get(self.jwks_url or await self._discover()))
                    self._error = None
                    log.info("oauth: %d signing key(s) of %s loaded", len(self._keys.keys), self.issuer)
                except (httpx2.HTTPError, ValueError, KeyError, TypeError, jwt.PyJWTError) as exc:
                    self._error = describe(exc)
                    log.warning("oauth: signing keys of %s not fetched: %s", self.issuer, self._error)
            if self._keys is None:
                raise Unavailable(
                    f"the authorization server's signing keys could not be fetched ({self._error}); "
                    "access tokens cannot be checked until it answers"
                )

    async def _discover(self) -> str:
        return str((await self.issuer_metadata())["jwks_uri"])

    async def issuer_metadata(self) -> dict[str, Any]:
        """The issuer's metadata (RFC 8414, then OpenID Connect discovery), fetched once; raises
        `ValueError` or `httpx2.HTTPError` when there is none or it names another issuer."""
        if self._metadata is not None:
            return self._metadata
        base = self.issuer.rstrip("/")
        for url in (f"{base}/.well-known/oauth-authorization-server", f"{base}/.well-known/openid-configuration"):
            try:
                metadata = await self._get(url)
            except httpx2.HTTPStatusError:
                continue
            if metadata.get("issuer") != self.issuer:
                raise ValueError(f"metadata at {url} names issuer {str(metadata.get('issuer'))[:200]!r}, not {self.issuer!r}")
            self._metadata = metadata
            return metadata
        raise ValueError(f"no authorization server metadata at {base}/.well-known/...")

    async def _get(self, url: str) -> dict[str, Any]:
        if self.http is None:
            raise ValueError("the gateway has not started")
        response = await self.http.get(url, timeout=FETCH_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = json.loads(response.content)
        if not isinstance(document, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return document


def describe(exc: BaseException) -> str:
    """What went wrong fetching from the issuer, without its answer's body."""
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"{exc.request.url} answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.RequestError):
        return f"{exc.request.url}: {type(exc).__name__}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


class ResourceServer:
    """Metadata, challenges and access-token checks for the resources of one gateway."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self.public_url = settings.public_url.rstrip("/")
        self.keys = KeySet(settings.issuer, settings.jwks_url)

    def resource_url(self, rpath: str) -> str:
        return self.public_url + quote(rpath)

    def metadata_url(self, rpath: str) -> str:
        return self.public_url + METADATA_PATH + quote(rpath)

    def required_scopes(self, rpath: str) -> list[str]:
        scopes = self.settings.scopes
        if rpath.startswith("/mcp"):
            return scopes.mcp
        return scopes.v1 if rpath == MODEL_API else []

    def metadata(self, rpath: str) -> dict[str, Any]:
        """The protected-resource metadata document of `rpath` (RFC 9728 §2)."""
        scopes = self.settings.scopes
        supported = self.required_scopes(rpath) if rpath else list(dict.fromkeys(scopes.mcp + scopes.v1))
        return {
            "resource": self.resource_url(rpath),
            "authorization_servers": [self.settings.issuer],
            "scopes_supported": supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolgate",
        }

    def challenge(self, rpath: str, error: str | None = None, description: str | None = None) -> str:
        """A `WWW-Authenticate` value pointing at the metadata (RFC 9728 §5.1, RFC 6750 §3)."""
        parts = [f'resource_metadata="{self.metadata_url(rpath)}"']
        if error:
            parts.append(f'error="{error}"')
        if description:
            parts.append(f'error_description="{_quotable(description)}"')
        scopes = self.required_scopes(rpath)
        if scopes:
            parts.append(f'scope="{" ".join(scopes)}"')
        return "Bearer " + ", ".join(parts)

    def refused(self, message: str, path: str, *, presented: bool) -> Unauthorized:
        rpath = resource_path(path)
        error = "invalid_token" if presented else None
        return Unauthorized(message, challenge=self.challenge(rpath, error, message if presented else None))

    def invalid_token(self, message: str, path: str) -> Unauthorized:
        """The 401 of an access token this edge refuses: code `invalid_token` (RFC 6750 §3.1), not
        the API keys' `invalid_api_key`, so a client knows to get a new token."""
        refused = self.refused(message, path, presented=True)
        refused.code = "invalid_token"
        return refused

    def audiences(self, rpath: str) -> list[str]:
        """What a token's `aud` may name to be used on `rpath`: the resource or one containing it."""
        accepted = [self.public_url, self.public_url + "/"]
        parts = [p for p in rpath.split("/") if p]
        for i in range(1, len(parts) + 1):
            accepted.append(self.resource_url("/" + "/".join(parts[:i])))
        return accepted

    async def verify(self, token: str, path: str) -> dict[str, Any]:
        """The claims of an access token good for `path`; raises `Unauthorized` (401) or
        `InsufficientScope` (403), both pointing at the resource's metadata."""
        rpath = resource_path(path)
        settings = self.settings
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in settings.algorithms:  # `none`, HMAC or anything not configured
                raise InvalidToken(f"algorithm {str(header.get('alg'))[:20]!r} is not accepted")
            key = await self.keys.key_for(header.get("kid"))
            claims = verify_jwt(token, key, algorithms=settings.algorithms, audience=self.audiences(rpath),
                                issuer=settings.issuer, leeway=settings.leeway_seconds, require=("exp", "aud", "iss", "sub"))
        except jwt.PyJWTError as exc:
            raise self.invalid_token(f"invalid token: {type(exc).__name__}", path) from None
        except InvalidToken as exc:
            reason = str(exc)
            if reason == "InvalidAudienceError":
                reason += f" (not issued for {self.resource_url(rpath)})"
            raise self.invalid_token(f"invalid token: {reason}", path) from None
        missing = [s for s in self.required_scopes(rpath) if s not in _scopes(claims)]
        if missing:
            message = f"the access token lacks the scope(s) {' '.join(missing)} required here"
            raise InsufficientScope(message, challenge=self.challenge(rpath, "insufficient_scope", message))
        return claims

    def routes(self, *, mcp: bool) -> list[BaseRoute]:
        """The metadata documents (with `/mcp` ones when the Bridge serves MCP)."""

        def serve(rpath_of: Any) -> Any:
            async def endpoint(request: Request) -> Response:
                # public, and read by browser-based clients of other origins (preflight included)
                if request.method == "OPTIONS":
                    return Response(status_code=204, headers={**_CORS, "access-control-allow-methods": "GET",
                                                              "access-control-allow-headers": "*", "access-control-max-age": "86400"})
                return JSONResponse(self.metadata(rpath_of(request)), headers=_CORS)
            return endpoint

        paths: list[tuple[str, Any]] = [("", lambda r: ""), (MODEL_API, lambda r: MODEL_API)]
        if mcp:
            paths += [("/mcp", lambda r: "/mcp"), ("/mcp/{bridge_id}", lambda r: "/mcp/" + r.path_params["bridge_id"])]
        return [Route(METADATA_PATH + suffix, serve(rpath_of), methods=["GET", "OPTIONS"]) for suffix, rpath_of in paths]


_CORS = {"access-control-allow-origin": "*"}


def _scopes(claims: dict[str, Any]) -> set[str]:
    """Granted scopes: `scope` (RFC 9068, space-separated) or `scp` (a list, as some issuers send)."""
    scope, scp = claims.get("scope"), claims.get("scp")
    granted = set(scope.split()) if isinstance(scope, str) else set()
    if isinstance(scp, list):
        granted |= {s for s in scp if isinstance(s, str)}
    return granted


def _quotable(text: str) -> str:
    """Text safe inside a quoted-string of a header: printable ASCII without quotes or backslashes."""
    return "".join(c for c in text if 32 <= ord(c) < 127 and c not in '"\\')[:300]
