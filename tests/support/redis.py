"""The machine's Redis (127.0.0.1:6379, what CI runs) for the limits' tests (O2).

`require()` gives its URL, or skips the test (fails it under `TOOLGATE_REQUIRE_REDIS=1`, set by
`.ci/run`). Each test counts under its own key prefix (`prefix()`) and deletes its keys after
(`clean(prefix)`), so tests never see each other's counters.
"""

from __future__ import annotations

import os
import secrets
import socket

import pytest
import redis

HOST, PORT = "127.0.0.1", 6379
URL = f"redis://{HOST}:{PORT}/0"


def require() -> str:
    """The running server's URL; else skip (or fail under TOOLGATE_REQUIRE_REDIS=1)."""
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            pass
    except OSError:
        message = f"needs Redis at {HOST}:{PORT}"
        if os.environ.get("TOOLGATE_REQUIRE_REDIS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return URL


def prefix() -> str:
    """A key prefix no other test uses."""
    return f"toolgate-test-{secrets.token_hex(6)}:"


def keys(prefix: str) -> list[str]:
    """The keys under `prefix` now."""
    with redis.Redis.from_url(URL) as client:
        return sorted(k.decode() for k in client.scan_iter(match=prefix + "*", count=1000))


def clean(prefix: str) -> None:
    """Delete every key under `prefix`."""
    with redis.Redis.from_url(URL) as client:
        found = list(client.scan_iter(match=prefix + "*", count=1000))
        if found:
            client.delete(*found)


def value(key: str) -> str | None:
    """The string at `key` now (None when there is none)."""
    with redis.Redis.from_url(URL) as client:
        found = client.get(key)
    return found.decode() if found is not None else None
