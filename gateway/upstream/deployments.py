"""A route's deployments as one `Upstream` (O1): spread, retried, cooled down, fallen back.

`Deployments` implements the `Upstream` protocol, so the tool loop and the plugin chain do not
know a route has several. Each `complete`/`stream` call is one upstream call of the loop:

- it goes to a healthy deployment picked by weight (`breaker.pick`, an injected random source);
- a 429, a 5xx, a timeout or a connection failure (`RETRIABLE`) is retried on another deployment
  of the route, at most `retries` times, while the request's budget lasts (the caller's
  `asyncio.timeout` on `ctx.deadline` cancels whatever attempt is running when it ends); a stream
  is retried only while it has yielded nothing: after its first batch, a failure reaches the client;
- when the route's deployments are exhausted, each fallback route's deployments are tried in turn;
  a context-window error goes to the next fallback at once;
- each deployment has a `Breaker`: failing `failures` times in a row (or a 429 with Retry-After)
  cools it down, then one call probes it back.

Retries are per upstream call. A failed call ran no tool (the loop runs tools between calls), so a
retry never runs one twice. Still, by default a call that follows gateway tool calls of the same
request is not retried or sent to a fallback (`retry_after_tool_calls: false`): those tools' side
effects are done, and the operator decides whether another deployment or model may finish the
turn. The request tells its calls so through `CallNote` (set by gateway.chat, per request), which
also learns which deployment answered (the access log's `deployment`, priced by rate limits).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from gateway.errors import (
    ContextWindowExceeded,
    GatewayError,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from gateway.upstream.base import Upstream
from gateway.upstream.breaker import Breaker, pick, soonest

RETRIABLE = (UpstreamRateLimited, UpstreamError, UpstreamTimeout)
"""What another deployment may answer: 429, 502 (5xx, connection, a broken answer), 504."""


@dataclass
class CallNote:
    """What one client request tells its upstream calls, and learns from them."""

    tools_ran: bool = False
    """Gateway tool calls of this request have run (the loop's `call_tool` sets it)."""
    deployment: str | None = None
    """`upstream/model` of the deployment that answered the latest call."""


CALL_NOTE: ContextVar[CallNote | None] = ContextVar("toolgate_call_note", default=None)
"""The current request's note; unset (None): retries allowed, nothing recorded."""


@dataclass
class Deployment:
    """One place a route's calls can go: an upstream and the model name it is asked for."""

    upstream: Upstream
    model: str
    weight: float = 1.0
    timeout_seconds: float | None = None
    breaker: Breaker = field(default_factory=Breaker)

    @property
    def label(self) -> str:
        """`upstream/model`: the metric label and the access log's `deployment`."""
        return f"{self.upstream.name}/{self.model}"


@dataclass
class Pool:
    """The deployments of one route, with the route's retry settings."""

    route: str
    deployments: list[Deployment]
    retries: int = 2


class Deployments:
    """The `Upstream` of a route: its own `Pool`, then its fallbacks' (see the module docstring)."""

    def __init__(
        self, pool: Pool, calls: Counter, *, retry_after_tool_calls: bool = False,
        random: Callable[[], float], clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = pool.route
        self.pool = pool
        self.fallbacks: list[Pool] = []
        """Filled in once every route's pool exists (gateway.Gateway), in the order tried."""
        self.retry_after_tool_calls = retry_after_tool_calls
        self._calls = calls
        self.random = random
        """Draws in [0, 1) that pick among healthy deployments by weight (tests script them)."""
        self.clock = clock
        """Seconds on a monotonic scale, for the breakers' cool-downs (tests drive it)."""

    def retry_allowed(self) -> bool:
        """May this call be retried or fall back? Not after the request's tool calls ran, unless
        `retry_after_tool_calls`."""
        note = CALL_NOTE.get()
        return note is None or not note.tools_ran or self.retry_after_tool_calls

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        last: GatewayError | None = None
        plan = _Plan(self)
        while (deployment := plan.next()) is not None:
            try:
                result = await self._guarded(deployment, self._complete_on(deployment, {**body, "model": deployment.model}))
            except ContextWindowExceeded as exc:
                last = exc
                plan.next_pool()
                continue
            except RETRIABLE as exc:
                last = exc
                continue
            self._answered(deployment)
            return result
        assert last is not None  # a plan always holds at least one deployment
        raise last

    async def _complete_on(self, deployment: Deployment, body: dict[str, Any]) -> dict[str, Any]:
        if deployment.timeout_seconds is None:
            return await deployment.upstream.complete(body)
        try:
            async with asyncio.timeout(deployment.timeout_seconds):
                return await deployment.upstream.complete(body)
        except TimeoutError:
            raise _timed_out(deployment) from None

    async def _guarded(self, deployment: Deployment, work: Awaitable[Any]) -> Any:
        """Run one attempt, feeding its outcome to the breaker and the metric."""
        deployment.breaker.admit(self.clock())
        try:
            result = await work
        except GatewayError as exc:
            self._failed(deployment, exc)
            raise
        except BaseException:
            deployment.breaker.abandoned()
            raise
        return result

    def _failed(self, deployment: Deployment, exc: GatewayError) -> None:
        """An attempt's error, fed to the metric and the breaker: a `RETRIABLE` one counts against the
        deployment; any other means it answered (the request was at fault), so it closes the breaker
        and a probe's slot is not left taken."""
        self._count(deployment, exc.code)
        if isinstance(exc, RETRIABLE):
            deployment.breaker.failed(self.clock(), getattr(exc, "retry_after", None))
        else:
            deployment.breaker.succeeded()

    def _count(self, deployment: Deployment, outcome: str) -> None:
        self._calls.labels(deployment.upstream.name, deployment.label, outcome).inc()

    def _answered(self, deployment: Deployment) -> None:
        deployment.breaker.succeeded()
        self._count(deployment, "ok")
        note = CALL_NOTE.get()
        if note is not None:
            note.deployment = deployment.label

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        last: GatewayError | None = None
        plan = _Plan(self)
        while (deployment := plan.next()) is not None:
            batches = deployment.upstream.stream({**body, "model": deployment.model}).__aiter__()
            try:
                first = await self._guarded(deployment, self._first(deployment, batches))
            except ContextWindowExceeded as exc:
                await _close(batches)
                last = exc
                plan.next_pool()
                continue
            except RETRIABLE as exc:
                await _close(batches)
                last = exc
                continue
            except BaseException:
                await _close(batches)
                raise
            rest = self._rest(deployment, batches, first)
            try:
                async for batch in rest:
                    yield batch
            finally:  # closed now (the client left), not whenever the collector finalizes `rest`
                await rest.aclose()
            return
        assert last is not None
        raise last

    async def _first(self, deployment: Deployment, batches: AsyncIterator[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
        """The stream's first batch (None: it ended without one), within the deployment's timeout."""
        try:
            if deployment.timeout_seconds is None:
                return await anext(batches)
            async with asyncio.timeout(deployment.timeout_seconds):
                return await anext(batches)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise _timed_out(deployment) from None

    async def _rest(
        self, deployment: Deployment, batches: AsyncIterator[list[dict[str, Any]]], first: list[dict[str, Any]] | None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Past the first batch nothing is retried: a failure reaches the client (and the breaker)."""
        try:
            if first is not None:
                yield first
                async for batch in batches:
                    yield batch
        except GatewayError as exc:
            self._failed(deployment, exc)
            raise
        except BaseException:  # the client left mid-stream: no verdict on the deployment
            deployment.breaker.abandoned()
            raise
        finally:
            await _close(batches)
        self._answered(deployment)

    async def aclose(self) -> None:
        """The upstreams are shared between routes; the gateway closes them."""


class _Plan:
    """The deployments one upstream call tries, chosen one at a time (each choice sees the
    breakers as the previous attempts left them)."""

    def __init__(self, owner: Deployments) -> None:
        self._owner = owner
        self._retry = owner.retry_allowed()
        self._pools = [owner.pool] + (owner.fallbacks if self._retry else [])
        self._index = 0
        self._tried: set[int] = set()
        self._budget = 1 + (owner.pool.retries if self._retry else 0)
        self._asked = 0

    def next_pool(self) -> None:
        """Leave the current pool (a context-window error: its deployments share the model)."""
        self._index += 1
        self._tried = set()
        if self._index < len(self._pools):
            self._budget = 1 + self._pools[self._index].retries

    def next(self) -> Deployment | None:
        """The next deployment to ask, or None when every pool is exhausted."""
        while self._index < len(self._pools):
            if not self._retry and self._asked:
                return None
            pool = self._pools[self._index]
            chosen = self._choose(pool) if self._budget > 0 else None
            if chosen is not None:
                self._tried.add(chosen)
                self._budget -= 1
                self._asked += 1
                return pool.deployments[chosen]
            self.next_pool()
        return None

    def _choose(self, pool: Pool) -> int | None:
        now = self._owner.clock()
        untried = [i not in self._tried for i in range(len(pool.deployments))]
        eligible = [ok and d.breaker.available(now) for ok, d in zip(untried, pool.deployments)]
        chosen = pick([d.weight for d in pool.deployments], eligible, self._owner.random)
        if chosen is None and self._asked == 0 and self._index == len(self._pools) - 1:
            # every deployment is cooling down: ask the one back soonest rather than refuse unasked
            chosen = soonest([d.breaker for d in pool.deployments], untried)
        return chosen


def _timed_out(deployment: Deployment) -> UpstreamTimeout:
    return UpstreamTimeout(f"deployment '{deployment.label}' did not answer within {deployment.timeout_seconds:g}s")


async def _close(batches: AsyncIterator[Any]) -> None:
    aclose = getattr(batches, "aclose", None)
    if aclose is not None:
        await aclose()
