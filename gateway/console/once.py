"""Tokens a browser may use once (C1): the sign-in form's token and the authorization server's `state`.

    tokens = OnceTable[bool](lifetime_seconds=1800, capacity=10_000)
    token = tokens.issue(True)             # a fresh random token, remembered by its SHA-256
    tokens.take(token)                     # True the first time within the lifetime ...
    tokens.take(token)                     # ... None ever after: a replay is refused

Each token is kept on the server until it is taken or goes stale, so a form posted twice, or a
`state` presented twice, is refused the second time. The table is bounded: past `capacity` the
oldest token is forgotten (its sign-in must start again), so a flood of sign-in pages costs a
fixed amount of memory and never ends a session — only sign-ins not yet completed.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.auth import fingerprint

T = TypeVar("T")


class OnceTable(Generic[T]):
    """Random tokens, each bound to a value (not None) and taken at most once within `lifetime_seconds`."""

    def __init__(self, *, lifetime_seconds: float, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        if lifetime_seconds <= 0 or capacity < 1:
            raise ValueError("lifetime_seconds must be positive and capacity at least 1")
        self.lifetime_seconds = lifetime_seconds
        self.capacity = capacity
        self._clock = clock
        self._table: OrderedDict[str, tuple[float, T]] = OrderedDict()  # by SHA-256, oldest first

    def __len__(self) -> int:
        return len(self._table)

    def issue(self, value: T) -> str:
        """A fresh random token (256 bits) bound to `value`."""
        token = secrets.token_urlsafe(32)
        self.put(token, value)
        return token

    def put(self, token: str, value: T) -> None:
        """Remember `token` (made by the caller) with `value`; past `capacity` the oldest goes."""
        now = self._clock()
        self._forget_stale(now)
        while len(self._table) >= self.capacity:
            self._table.popitem(last=False)
        self._table[fingerprint(token)] = (now, value)

    def take(self, token: str | None) -> T | None:
        """The value of a token issued here, not taken before and not stale — it is taken now;
        None otherwise (so values are never None themselves)."""
        if not token or len(token) > 256:
            return None
        entry = self._table.pop(fingerprint(token), None)
        if entry is None or self._clock() - entry[0] > self.lifetime_seconds:
            return None
        return entry[1]

    def discard(self, token: str | None) -> None:
        """Forget `token` if it is held (a flow that ended another way)."""
        if token:
            self._table.pop(fingerprint(token), None)

    def _forget_stale(self, now: float) -> None:
        while self._table:
            issued, _ = next(iter(self._table.values()))
            if now - issued <= self.lifetime_seconds:
                return
            self._table.popitem(last=False)
