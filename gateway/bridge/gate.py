"""Per-caller bounds on what the Bridge sends out: MCP operations in flight toward connections.

A caller can make the Bridge open sessions to servers it names (a listing opens one per connection,
each pipeline node one more). Against a tarpit server each of those holds a socket until its
timeout, so one caller could hold hundreds. The handlers mark every request with its caller
(`CallerGate.caller`), and every outbound operation waits for one of that caller's
`outboundPerCaller` slots (`outbound`), so one caller's sockets are bounded and nobody else waits.

    with gate.caller(caller_key):            # around a tools/list or tools/call
        ...
    await outbound(upstream_coroutine)       # where a session is opened (gateway/bridge/upstream.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Hashable, Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_slots: ContextVar[asyncio.Semaphore | None] = ContextVar("toolgate_bridge_outbound_slots", default=None)


class CallerGate:
    """One semaphore per caller with work in flight (dropped when the caller has none)."""

    def __init__(self, per_caller: int) -> None:
        self._per_caller = per_caller
        self._callers: dict[Hashable, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.contextmanager
    def caller(self, key: Hashable) -> Iterator[None]:
        """Outbound operations started inside this block count against `key`'s slots."""
        semaphore, users = self._callers.get(key, (None, 0))
        if semaphore is None:
            semaphore = asyncio.Semaphore(self._per_caller)
        self._callers[key] = (semaphore, users + 1)
        token = _slots.set(semaphore)
        try:
            yield
        finally:
            _slots.reset(token)
            semaphore, users = self._callers[key]
            if users <= 1:
                del self._callers[key]
            else:
                self._callers[key] = (semaphore, users - 1)

    def in_flight(self, key: Hashable) -> int:
        """How many of `key`'s slots are taken (for tests and metrics)."""
        entry = self._callers.get(key)
        return self._per_caller - entry[0]._value if entry is not None else 0  # noqa: SLF001


async def outbound(operation: Awaitable[T]) -> T:
    """Await `operation` in one of the current caller's slots (directly when no caller is set)."""
    semaphore = _slots.get()
    if semaphore is None:
        return await operation
    try:
        await semaphore.acquire()
    except BaseException:  # cancelled (timed out) while waiting: the operation never starts
        if inspect.iscoroutine(operation):
            operation.close()
        raise
    try:
        return await operation
    finally:
        semaphore.release()
