"""The session pool (B14–B17, F15): one session per slot of one server, closed when idle.

A slot is named by its owner's policy: mcp_bridge uses the conversation key, or for requests
without one a token unique to the request (never the client-chosen request id), released when the
request ends (B15); the Bridge uses the caller. The idle reaper closes whatever is left. A session the server ended is replaced and the
call retried once (B16). The callers of one slot share a single opening attempt, so a server that
never answers costs a request one set-up timeout, not one per concurrent call (B17, B18).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from gateway.mcp.connection import ClientFactory, McpConnection, Operation
from gateway.mcp.errors import SessionLost, describe, session_ended
from gateway.mcp.metrics import PoolMetrics

log = logging.getLogger("toolgate.mcp")

T = TypeVar("T")

CLOSE_SECONDS = 10.0
"""Longest wait for a session's graceful close (DELETE, process exit) before it is cancelled."""


class SessionPool:
    """Sessions by slot (conversation key, or a request's own token), and an idle reaper."""

    def __init__(
        self,
        factory: ClientFactory,
        *,
        server: str,
        timeout: float,
        idle_seconds: float,
        metrics: PoolMetrics,
        factory_for: Callable[[str], ClientFactory] | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> None:
        """`factory_for(slot)`, when given, makes each slot's sessions (per-slot callbacks); else
        `factory`. A slot for which `keep(slot)` holds is not closed when idle (it has subscriptions)."""
        self._factory = factory
        self._factory_for = factory_for
        self._keep = keep
        self._server = server
        self._timeout = timeout
        self._idle = idle_seconds
        self._metrics = metrics
        self._sessions: dict[str, McpConnection] = {}
        self._opening: dict[str, asyncio.Task[McpConnection]] = {}
        """At most one opening attempt per slot; it exists only while the attempt runs."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        """The next idle check: a timer, not a waiting task, so an empty pool holds no task at all."""
        self._reaping: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Arm the idle reaper (it runs when a session may have expired)."""
        self._loop = asyncio.get_running_loop()
        self._schedule()

    @staticmethod
    def slot_key(slot: str) -> str | None:
        """The key a slot was named by (None for a request's own slot)."""
        return slot[2:] if slot.startswith("k:") else None

    @staticmethod
    def _slot(key: str | None, request_token: str) -> str:
        return f"k:{key}" if key is not None else f"r:{request_token}"

    async def acquire(self, key: str | None, request_token: str) -> McpConnection:
        """The live session of this conversation (or request), opened on first use."""
        slot = self._slot(key, request_token)
        connection = self._sessions.get(slot)
        if connection is not None and not connection.closed:
            return connection
        return await self._reopen(slot, connection)

    async def _reopen(self, slot: str, dead: McpConnection | None) -> McpConnection:
        """Join the slot's opening attempt, or start one that replaces `dead` (when still in place)."""
        opening = self._opening.get(slot)
        if opening is None:
            current = self._sessions.get(slot)
            if current is not None and current is not dead and not current.closed:
                return current  # another caller replaced it already
            if self._closing:
                raise SessionLost("the MCP bridge is stopping")
            opening = asyncio.get_running_loop().create_task(self._open(slot), name=f"mcp-open:{self._server}")
            self._opening[slot] = opening
            opening.add_done_callback(partial(self._opened, slot))
        # A caller that goes away does not cancel the attempt the others wait for.
        await asyncio.wait({opening})
        if opening.cancelled():  # abandoned by `release_request` or `close`
            raise SessionLost("the MCP session was abandoned before it opened")
        return opening.result()

    def _opened(self, slot: str, task: asyncio.Task[McpConnection]) -> None:
        if self._opening.get(slot) is task:
            del self._opening[slot]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter re-raises it itself

    async def _open(self, slot: str) -> McpConnection:
        old = self._sessions.pop(slot, None)
        if old is not None:  # ended by the server or its transport since the last call (B16)
            self._metrics.replaced.inc()
            await self._discard(old)
        factory = self._factory_for(slot) if self._factory_for is not None else self._factory
        connection = McpConnection(factory, f"{self._server}/{slot[:14]}")
        await connection.open(self._timeout)
        self._metrics.opened.inc()
        self._metrics.open.inc()
        self._sessions[slot] = connection
        self._schedule()
        return connection

    async def run(self, key: str | None, request_token: str, operation: Operation[T]) -> T:
        """Run `operation` on this conversation's session; replace an ended session and retry once."""
        connection = await self.acquire(key, request_token)
        try:
            return await connection.run(operation, self._timeout)
        except Exception as exc:
            if not session_ended(exc):
                raise
            log.info("mcp session of %s ended by the server (%s); replacing it", self._server, describe(exc))
        connection = await self._reopen(self._slot(key, request_token), connection)
        return await connection.run(operation, self._timeout)

    async def _discard(self, connection: McpConnection) -> None:
        """Close a connection and count it, once."""
        if connection.discarded:
            return
        connection.discarded = True
        self._metrics.closed.inc()
        self._metrics.open.dec()
        await connection.close(min(self._timeout, CLOSE_SECONDS))

    async def release_request(self, request_token: str) -> None:
        """Close the unpooled session of a request that ended, or stop it being opened (B15)."""
        slot = self._slot(None, request_token)
        opening = self._opening.pop(slot, None)
        if opening is not None:
            opening.cancel()
            await asyncio.wait({opening})
        connection = self._sessions.pop(slot, None)
        if connection is not None:
            await self._discard(connection)

    def expired(self) -> list[tuple[str, McpConnection]]:
        """Sessions idle for `sessionIdleSeconds` with no call in flight."""
        now = time.monotonic()
        return [(slot, c) for slot, c in self._sessions.items() if not self._busy(slot, c) and now - c.last_used >= self._idle]

    def _busy(self, slot: str, connection: McpConnection) -> bool:
        """A call in flight, or kept open by its owner (`keep`)."""
        return connection.active > 0 or (self._keep is not None and self._keep(slot))

    async def reap(self) -> int:
        """Close every expired session now; returns how many were closed."""
        victims = self.expired()
        for slot, connection in victims:
            if self._sessions.get(slot) is connection:
                del self._sessions[slot]
        await asyncio.gather(*(self._discard(c) for _, c in victims))
        return len(victims)

    def _next_expiry(self) -> float | None:
        if not self._sessions:
            return None
        now = time.monotonic()
        # A session with a call in flight (or kept open) is looked at again one lifetime from now.
        return min((now if self._busy(s, c) else c.last_used) for s, c in self._sessions.items()) + self._idle - now

    def _schedule(self) -> None:
        """(Re)arm the timer for the earliest possible expiry; none while the pool is empty."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        delay = self._next_expiry()
        if self._loop is None or self._closing or delay is None:
            return
        self._timer = self._loop.call_later(max(delay, 0.01), self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._reaping is None or self._reaping.done():
            assert self._loop is not None
            self._reaping = self._loop.create_task(self._reap(), name=f"mcp-reap:{self._server}")

    async def _reap(self) -> None:
        try:
            await self.reap()
        except Exception as exc:  # a reaper that dies would leak every later session
            log.warning("mcp idle reaper of %s: %s", self._server, describe(exc))
        finally:
            self._schedule()

    @property
    def size(self) -> int:
        """Open sessions, pooled and unpooled."""
        return len(self._sessions)

    async def close(self) -> None:
        """Stop the reaper, abandon sessions being opened, close every session (with DELETE)."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._reaping is not None and not self._reaping.done():
            await asyncio.gather(self._reaping, return_exceptions=True)
        openings = list(self._opening.values())
        self._opening.clear()
        for task in openings:
            task.cancel()
        if openings:
            await asyncio.wait(openings)
        connections = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(self._discard(c) for c in connections))
