"""Held tool calls a person may confirm (T4).

When the firewall holds a gateway tool call in a conversation the gateway can recognise again (a
conversation key, G4), the call is kept here under a one-time code. The answer shows the exact
tool and arguments and the text to send, `confirm K7QF-2MXD`; a later user turn of the same
conversation, from the same caller, whose text is only such confirmations runs the calls before
the model is called, and the model reads what they returned. A code is good once, for the
conversation and caller that got it, until it expires; anyone else's turn finds nothing.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.plugins import ToolCall

_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or retyped by a person
_CONFIRM = re.compile(r"confirm\s+([A-Za-z0-9]{4}-[A-Za-z0-9]{4})", re.IGNORECASE)
_ONLY_CONFIRMS = re.compile(r"^\s*(?:confirm\s+[A-Za-z0-9]{4}-[A-Za-z0-9]{4}[\s,.;]*)+$", re.IGNORECASE)
MAX_PENDING = 32
"""Per conversation and caller: a model that holds calls in a loop cannot grow the store."""


@dataclass(frozen=True)
class PendingCall:
    code: str
    call: ToolCall
    expires_at: float


def confirmation_codes(text: str) -> list[str]:
    """The codes of a user turn made only of `confirm <code>` phrases (upper-case), else none:
    a message that merely mentions a code confirms nothing."""
    if len(text) > 2000 or not _ONLY_CONFIRMS.match(text):
        return []
    return [code.upper() for code in _CONFIRM.findall(text)]


class PendingCalls:
    """Held calls by (conversation key, caller), each under a one-time code; in-process, like the
    conversation's MCP sessions (a load balancer keeps a conversation on one replica, S2)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        """`now`: the clock (tests pass their own to expire calls without waiting)."""
        self._calls: dict[tuple[str, str], dict[str, PendingCall]] = {}
        self._now = now

    def hold(self, conversation: str, caller: str, call: ToolCall, seconds: float) -> PendingCall:
        """Keep `call` for confirmation; returns it with its new code."""
        self._expire()
        bucket = self._calls.setdefault((conversation, caller), {})
        while len(bucket) >= MAX_PENDING:
            bucket.pop(next(iter(bucket)))
        code = "-".join("".join(secrets.choice(_ALPHABET) for _ in range(4)) for _ in range(2))
        pending = PendingCall(code, call, self._now() + seconds)
        bucket[code] = pending
        return pending

    def take(self, conversation: str, caller: str, code: str) -> PendingCall | None:
        """The call held under `code` for this conversation and caller, removed (one use), or
        None when there is none, it expired, or it belongs to someone else."""
        self._expire()
        bucket = self._calls.get((conversation, caller))
        pending = bucket.pop(code.upper(), None) if bucket else None
        if bucket is not None and not bucket:
            del self._calls[(conversation, caller)]
        return pending

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._calls.values())

    def _expire(self) -> None:
        now = self._now()
        for key in list(self._calls):
            bucket = self._calls[key]
            for code in [c for c, p in bucket.items() if p.expires_at <= now]:
                del bucket[code]
            if not bucket:
                del self._calls[key]
