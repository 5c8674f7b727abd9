"""One MCP session, owned by its own long-lived task.

The task enters the SDK client and keeps it open; callers hand work over through futures. A
server that dies cancels the owning task (the SDK's task group does that), never a request
handler: the handler only sees its future fail with `SessionLost`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import mcp

from gateway.mcp.bounds import watching_answer
from gateway.mcp.errors import AnswerTooLarge, CallTimeout, McpCallFailed, SessionLost, describe, session_ended
from gateway.mcp.target import SessionWatch, watching

log = logging.getLogger("toolgate.mcp")

T = TypeVar("T")
ClientFactory = Callable[[], AbstractAsyncContextManager[mcp.Client]]
"""Makes an unopened session: an `mcp.Client`, or `McpClients.session(...)`."""
Operation = Callable[["McpConnection", mcp.Client], Awaitable[T]]

CLOSE_SECONDS = 10.0
"""Default longest wait for a graceful close (DELETE, process exit) before the task is cancelled."""


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a handshake failure as seen: the opener reports it, or nobody is left to."""
    if not future.cancelled():
        future.exception()


class McpConnection:
    """A connected `mcp.Client` plus what is worth caching per session (tool and resource lists)."""

    def __init__(self, factory: ClientFactory, label: str) -> None:
        self._factory = factory
        self.label = label
        self._client: mcp.Client | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self.closed = False
        self.discarded = False
        """Set by the pool once it has closed and counted this connection."""
        self.active = 0
        self.last_used = time.monotonic()
        self._memo: dict[str, asyncio.Future[Any]] = {}
        self.watch = SessionWatch()
        """Set by the HTTP layer when the server answers this session's id with "no such session"."""

    async def open(self, timeout: float) -> None:
        """Start the owning task and wait for the handshake, at most `timeout` seconds (B17).

        A caller cancelled while the handshake runs leaves nothing behind: the owning task (and a
        stdio server's process) is ended before the cancellation goes on.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._ready.add_done_callback(_retrieve)
        self._task = loop.create_task(self._own(), name=f"mcp-session:{self.label}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self._abandon()
            raise CallTimeout(f"the MCP session could not be opened within {timeout:g}s") from None
        except BaseException:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """End an owning task whose handshake did not finish (or whose opener went away)."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        ready = self._ready
        if ready is None or not ready.done() or ready.cancelled() or ready.exception() is not None:
            task.cancel()  # still connecting: nothing to close gracefully
        await asyncio.wait({task}, timeout=CLOSE_SECONDS)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)

    async def _own(self) -> None:
        assert self._ready is not None
        watching(self.watch)  # this task's context: the transport's tasks inherit it
        try:
            async with self._factory() as client:
                self._client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # the task must end cleanly whatever the SDK raised
            reason = describe(exc)
            if not self._ready.done():
                self._ready.set_exception(McpCallFailed(reason))
            elif not self._stop.is_set():
                log.warning("mcp session %s ended: %s", self.label, reason)
        finally:
            self.closed = True
            self._client = None
            for job in list(self._jobs):
                job.cancel()
            if not self._ready.done():
                self._ready.set_exception(SessionLost())
            if self.watch.lean is not None:  # the session's own lean HTTP/1.1 connections (lean_http.py)
                await self.watch.lean.aclose()

    async def memo(self, name: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """`fetch()` once per session (tool and resource lists); concurrent callers share it.

        A failed fetch is forgotten, so the next caller tries again; a fetch whose caller was
        cancelled (its own timeout) is taken over by a waiting caller, not turned into its failure.
        """
        while True:
            future = self._memo.get(name)
            if future is None:
                future = asyncio.get_running_loop().create_future()
                self._memo[name] = future
                try:
                    future.set_result(await fetch())
                except asyncio.CancelledError:
                    del self._memo[name]
                    future.cancel()
                    raise
                except Exception as exc:
                    del self._memo[name]
                    future.set_exception(exc)
                    future.exception()  # retrieved here: waiters, if any, re-raise it themselves
                    raise
                return future.result()
            await asyncio.wait({future})
            if not future.cancelled():
                return future.result()

    async def run(self, operation: Operation[T], timeout: float) -> T:
        """Run `operation(self, client)` in a job task; at most `timeout` seconds (B17)."""
        client = self._client
        if self.closed or client is None:
            raise SessionLost()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = loop.create_task(self._job(operation, client, future))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        future.add_done_callback(lambda done: job.cancel() if done.cancelled() else None)
        self.active += 1
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise CallTimeout(f"no answer within {timeout:g}s") from None
        except Exception as exc:
            if self.watch.ended and not session_ended(exc):  # a bare 400/404 the SDK reported as a generic error (B16)
                raise SessionLost("the MCP session ended") from exc
            raise
        finally:
            self.active -= 1
            self.last_used = time.monotonic()

    async def _job(self, operation: Operation[T], client: mcp.Client, future: asyncio.Future[T]) -> None:
        watching(self.watch)  # the SDK sends a request from the context of the task that asks
        answer = watching_answer()  # ... and reads its answer there, bounded (bounds.py)
        try:
            result = await operation(self, client)
        except asyncio.CancelledError:
            if not future.done():
                future.set_exception(SessionLost())
            return
        except Exception as exc:
            if not future.done():
                future.set_exception(AnswerTooLarge(answer.limit) if answer.limit is not None else exc)
            return
        if not future.done():
            future.set_result(result)

    async def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """End the session (the transport sends DELETE for a session-ful server) and wait for it."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            self.closed = True
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
