"""The session pool (B14–B17): one session per (conversation key, server), closed when idle.

Requests without a conversation key get a session of their own, closed when the request ends
(B15). A session the server ended is replaced and the call retried once (B16).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from plugins.mcp_bridge.connection import ClientFactory, McpConnection, Operation
from plugins.mcp_bridge.errors import describe, session_ended
from plugins.mcp_bridge.metrics import BridgeMetrics

log = logging.getLogger("toolgate.mcp_bridge")

T = TypeVar("T")


class SessionPool:
    """Pooled sessions by conversation key, unpooled ones by request id, and an idle reaper."""

    def __init__(
        self,
        factory: ClientFactory,
        *,
        server: str,
        timeout: float,
        idle_seconds: float,
        metrics: BridgeMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._server = server
        self._timeout = timeout
        self._idle = idle_seconds
        self._metrics = metrics
        self._clock = clock
        self._pooled: dict[str, McpConnection] = {}
        self._unpooled: dict[str, McpConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._wake = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Start the idle reaper."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap(), name=f"mcp-reaper:{self._server}")

    @staticmethod
    def _slot(key: str | None, request_id: str) -> str:
        return f"k:{key}" if key is not None else f"r:{request_id}"

    def _table(self, key: str | None) -> dict[str, McpConnection]:
        return self._pooled if key is not None else self._unpooled

    async def _open(self, slot: str) -> McpConnection:
        connection = McpConnection(self._factory, f"{self._server}/{slot[:14]}")
        await connection.open(self._timeout)
        self._metrics.opened.inc()
        self._metrics.open.inc()
        return connection

    async def acquire(self, key: str | None, request_id: str) -> McpConnection:
        """The live session of this conversation (or request), opened on first use."""
        slot = self._slot(key, request_id)
        table = self._table(key)
        connection = table.get(slot)
        if connection is not None and not connection.closed:
            return connection
        lock = self._locks.setdefault(slot, asyncio.Lock())
        async with lock:
            connection = table.get(slot)
            if connection is not None and not connection.closed:
                return connection
            if connection is not None:  # ended by the server or its transport since the last call (B16)
                self._metrics.replaced.inc()
                await self._discard(connection)
            connection = await self._open(slot)
            table[slot] = connection
            self._wake.set()
            return connection

    async def _replace(self, key: str | None, request_id: str, dead: McpConnection) -> McpConnection:
        slot = self._slot(key, request_id)
        table = self._table(key)
        lock = self._locks.setdefault(slot, asyncio.Lock())
        async with lock:
            current = table.get(slot)
            if current is not None and current is not dead and not current.closed:
                return current
            await self._discard(dead)
            table.pop(slot, None)
            self._metrics.replaced.inc()
            connection = await self._open(slot)
            table[slot] = connection
            return connection

    async def run(self, key: str | None, request_id: str, operation: Operation[T]) -> T:
        """Run `operation` on this conversation's session; replace an ended session and retry once."""
        connection = await self.acquire(key, request_id)
        try:
            return await connection.run(operation, self._timeout)
        except Exception as exc:
            if not session_ended(exc):
                raise
            log.info("mcp session of %s ended by the server (%s); replacing it", self._server, describe(exc))
        connection = await self._replace(key, request_id, connection)
        return await connection.run(operation, self._timeout)

    async def _discard(self, connection: McpConnection) -> None:
        """Close a connection and count it, once."""
        if connection.discarded:
            return
        connection.discarded = True
        self._metrics.closed.inc()
        self._metrics.open.dec()
        await connection.close()

    async def release_request(self, request_id: str) -> None:
        """Close the unpooled session of a request that ended (B15)."""
        connection = self._unpooled.pop(self._slot(None, request_id), None)
        self._locks.pop(self._slot(None, request_id), None)
        if connection is not None:
            await self._discard(connection)

    def expired(self) -> list[tuple[str, McpConnection]]:
        """Pooled sessions idle for `sessionIdleSeconds` with no call in flight."""
        now = self._clock()
        return [
            (slot, c) for slot, c in self._pooled.items() if c.active == 0 and now - c.last_used >= self._idle
        ]

    async def reap(self) -> int:
        """Close every expired session now; returns how many were closed."""
        victims = self.expired()
        for slot, connection in victims:
            if self._pooled.get(slot) is connection:
                del self._pooled[slot]
                self._locks.pop(slot, None)
        await asyncio.gather(*(self._discard(c) for _, c in victims))
        return len(victims)

    def _next_expiry(self) -> float | None:
        if not self._pooled:
            return None
        now = self._clock()
        # A session with a call in flight is looked at again one lifetime from now.
        return min((c.last_used if c.active == 0 else now) for c in self._pooled.values()) + self._idle - now

    async def _reap(self) -> None:
        while not self._closing:
            self._wake.clear()
            delay = self._next_expiry()
            try:
                await asyncio.wait_for(self._wake.wait(), None if delay is None else max(delay, 0.01))
            except TimeoutError:
                try:
                    await self.reap()
                except Exception as exc:  # a reaper that dies would leak every later session
                    log.warning("mcp idle reaper of %s: %s", self._server, describe(exc))

    @property
    def size(self) -> int:
        """Open sessions, pooled and unpooled."""
        return len(self._pooled) + len(self._unpooled)

    async def close(self) -> None:
        """Close every session (with DELETE) and stop the reaper."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        connections = [*self._pooled.values(), *self._unpooled.values()]
        self._pooled.clear()
        self._unpooled.clear()
        await asyncio.gather(*(self._discard(c) for c in connections))
