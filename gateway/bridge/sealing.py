"""Credentials written once through the REST API (C2): sealed before they are stored, never shown.

A connection made in the YAML names its credential by reference (`env:NAME`, `file:PATH`): the
operator's secrets. A user adding a connection through the API (or the console) cannot be given
references — `env:OPENAI_API_KEY` pointed at the user's own server would hand them the operator's
key — so the user writes the value itself, once. It is sealed (Fernet: AES-128-CBC + HMAC-SHA256)
with a key derived from `bridge.secretKey` (itself a reference), stored as `sealed:<token>`, opened
only to make the connection's requests, and scrubbed from everything that leaves the process like
every other resolved secret. No route ever returns it; without `bridge.secretKey` the API takes none.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken

from gateway.secrets import SecretSet

SEALED_PREFIX = "sealed:"


def is_sealed(stored: str | None) -> bool:
    """True for a credential written through the API (as opposed to an operator's reference)."""
    return stored is not None and stored.startswith(SEALED_PREFIX)


class SealError(Exception):
    """A sealed credential that this key cannot open (the key changed, or the value was altered)."""


class Sealer:
    """Seals and opens written-once credentials with one key; every value it sees is scrubbed."""

    def __init__(self, key: str, secrets: SecretSet) -> None:
        if len(key) < 16:
            raise ValueError("bridge.secretKey must be at least 16 characters (e.g. 32 random bytes, base64)")
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(key.encode("utf-8")).digest()))
        self._secrets = secrets

    def seal(self, value: str) -> str:
        """The stored form of `value` (`sealed:<token>`)."""
        self._secrets.add(value)
        return SEALED_PREFIX + self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def open(self, stored: str) -> str:
        """The value of a sealed credential; raises `SealError` if it cannot be opened."""
        try:
            value = self._fernet.decrypt(stored.removeprefix(SEALED_PREFIX).encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            raise SealError("the sealed credential cannot be opened with bridge.secretKey") from None
        self._secrets.add(value)
        return value
