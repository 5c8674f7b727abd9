"""Who may read `GET /metrics` (G9): nobody without a credential, unless the operator opens it.

The metrics say who uses the gateway and how much (requests per route, tool calls, and with
`server.metrics_user_labels` tokens per user), so by default a scrape must present one of:

- the metrics token, `server.metrics_token` (`env:NAME` or `file:PATH`), as `Authorization:
  Bearer <token>` — compared in constant time, the scraper's own credential, works with any
  `auth.mode`;
- with `server.metrics_auth: true`, any credential `auth` accepts (an API key for the scraper).

`server.metrics_public: true` serves them to anyone who reaches the port (the demo on loopback, a
scrape network the operator trusts). There are no operator roles in the gateway's identities, so
a user's key is either allowed to scrape (`metrics_auth`) or not.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from starlette.datastructures import Headers

from gateway.auth import Authenticator, authorization_of, bearer_token
from gateway.config import ServerSettings
from gateway.errors import Unauthorized
from gateway.secrets import SecretSet, resolve_secret


class MetricsAccess:
    """The check in front of `GET /metrics`, built once from `server` settings (the token resolved then)."""

    def __init__(self, settings: ServerSettings, auth: Authenticator, base_dir: Path, secrets: SecretSet) -> None:
        self.public = settings.metrics_public
        self._any_credential = settings.metrics_auth
        self._auth = auth
        token = resolve_secret(settings.metrics_token, base_dir, secrets) if settings.metrics_token else None
        self._token_digest = hashlib.sha256(token.encode("utf-8")).digest() if token else None

    async def check(self, headers: Headers, path: str = "/metrics") -> None:
        """Return when the request may read the metrics; raise `Unauthorized` (401) otherwise."""
        if self.public:
            return
        authorization = authorization_of(headers)
        if self._token_digest is not None:
            try:
                presented = bearer_token(authorization)
            except Unauthorized:  # an over-long token: refused below like any other
                presented = None
            if presented is not None and hmac.compare_digest(
                hashlib.sha256(presented.encode("utf-8")).digest(), self._token_digest
            ):
                return
        if self._any_credential:
            await self._auth.authenticate(authorization, path)
            return
        raise self._auth.refused(
            "GET /metrics needs a credential: send the metrics token (server.metrics_token) as"
            " 'Authorization: Bearer <token>', or ask the operator to open it (server.metrics_public)",
            path, presented=authorization is not None,
        )
