"""Counters in Redis, shared by every replica (O2): the arithmetic of gateway.limits.buckets as one
Lua script, `COUNT`, each run one atomic round trip on Redis's own clock (`TIME`), so replicas
whose clocks differ still count one bucket alike.

`COUNT` first settles what finished requests used — tokens (GCRA), spend (`INCRBYFLOAT`, expiring
after the budget's period), concurrency slots freed, leased requests given back unused — then
admits one request: it evaluates every check and takes units and slots only when all allow
(requests: a GCRA `tat` in a string key with a TTL, `want` of them at once when they fit — a
replica's lease, gateway.limits.leases — else one; concurrency: a sorted set of holders scored by
when their slot lapses, lapsed ones dropped first, `want` slots at once named `holder#1…` when
they fit, else one named `holder`; `want` 0: only read; tokens and budgets: read only). Numbers cross as
text (Lua would truncate floats to integers); the admission answers one string, `ok remaining
reset retry granted` per check, comma-separated, which parses faster than a nested reply.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError, ResponseError

from gateway.limits.buckets import Check, Outcome
from gateway.limits.counters import Charge, CountersError

_KINDS = {"requests": "r", "tokens": "t", "budget": "b", "concurrent": "c"}

COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local m, holder = tonumber(ARGV[1]), ARGV[2]
for i = 1, m do
  local key, j = KEYS[i], 3 + (i - 1) * 5
  local kind, limit, period, amount = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  if kind == 't' then
    local tat = tonumber(redis.call('GET', key) or '0')
    local new = math.max(tat, now) + amount * period / limit
    redis.call('SET', key, string.format('%.6f', new), 'PX', math.ceil((new - now) * 1000) + 1)
  elseif kind == 'b' then
    redis.call('INCRBYFLOAT', key, string.format('%.9f', amount))
    redis.call('EXPIRE', key, math.ceil(period) + 60)
  elseif kind == 'c' then
    redis.call('ZREM', key, ARGV[j + 4])
  elseif kind == 'g' then
    local tat = tonumber(redis.call('GET', key) or '0')
    if tat > now then
      local back = math.max(now, tat - amount * period / limit)
      redis.call('SET', key, string.format('%.6f', back), 'PX', math.ceil((back - now) * 1000) + 1)
    end
  end
end
local base = 3 + m * 5
local out, newtat, slots, all = {}, {}, {}, true
for i = m + 1, #KEYS do
  local key, j = KEYS[i], base + (i - m - 1) * 4
  local kind, limit, period, want = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local ok, remaining, reset, retry, granted = 1, 0, 0, 0, 0
  if kind == 'r' or kind == 't' then
    local interval = period / limit
    local tat = newtat[key] or tonumber(redis.call('GET', key) or '0')
    local start = math.max(tat, now)
    if kind == 'r' then
      local new = start + want * interval
      if want > 1 and new - now > period + 1e-9 then
        want = 1
        new = start + interval
      end
      granted = want
      if new - now > period + 1e-9 then
        granted = 0
        ok, remaining, reset, retry = 0, math.max(0, math.floor((period - (start - now)) / interval + 1e-9)), start - now, new - now - period
      else
        newtat[key] = new
        remaining, reset = math.floor((period - (new - now)) / interval + 1e-9), new - now
      end
    else
      local used = start - now
      if used >= period then
        ok, reset, retry = 0, used, used - period + interval
      else
        remaining, reset = math.max(0, math.floor((period - used) / interval + 1e-9)), used
      end
    end
  elseif kind == 'b' then
    local spent = tonumber(redis.call('GET', key) or '0')
    if spent >= limit then
      ok, reset, retry = 0, period, period
    else
      remaining, reset = limit - spent, period
    end
  elseif want == 0 then
    granted = 0
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    local n = redis.call('ZCARD', key)
    if want > 1 and n + want > limit then want = 1 end
    if n >= limit then
      ok, reset, retry = 0, 1, 1
    else
      remaining, granted = limit - n - want, want
    end
  end
  if ok == 0 then all = false end
  slots[i] = granted
  out[i - m] = string.format('%d %.6f %.6f %.6f %d', ok, remaining, reset, retry, granted)
end
if all then
  for i = m + 1, #KEYS do
    local key, j = KEYS[i], base + (i - m - 1) * 4
    local kind, period = ARGV[j], tonumber(ARGV[j + 2])
    if kind == 'r' and newtat[key] then
      redis.call('SET', key, string.format('%.6f', newtat[key]), 'PX', math.ceil((newtat[key] - now) * 1000) + 1)
    elseif kind == 'c' and slots[i] == 1 then
      redis.call('ZADD', key, now + period, holder)
      redis.call('PEXPIRE', key, math.ceil(period * 1000) + 1)
    elseif kind == 'c' and slots[i] > 1 then
      for x = 1, slots[i] do
        redis.call('ZADD', key, now + period, holder .. '#' .. x)
      end
      redis.call('PEXPIRE', key, math.ceil(period * 1000) + 1)
    end
  end
end
return table.concat(out, ',')
"""

FLUSH_SECONDS = 0.005
"""Settlements wait at most this long for the replica's next admission to carry them; then they go alone."""


def redis_location(url: str) -> str:
    """`host:port/db` of a Redis URL, for messages (never a user name or password)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


class _Connections:
    """redis-py connections (its protocol, AUTH, TLS) kept idle in a list and taken one per call.

    redis-py's own pool and per-read socket timeouts cost more than the round trip itself on
    loopback (≈ 130 µs a call against ≈ 65 µs on a held connection, bench/limits_overhead.py);
    a call is bounded instead by one `asyncio.timeout`, and a connection whose call failed or
    timed out is dropped, never reused in an unknown state. At most `most` calls (so connections)
    at once: while Redis stalls, further calls wait for a free one within the same timeout and fail
    as any timed-out call does, instead of opening a socket each."""

    def __init__(self, url: str, *, password: str | None, username: str | None, timeout: float,
                 most: int = 64, idle: int = 64) -> None:
        parsed = ConnectionPool.from_url(url, password=password, username=username, socket_timeout=None,
                                         socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
        self._make: Callable[[], Any] = lambda: parsed.connection_class(**parsed.connection_kwargs)
        self._idle: list[Any] = []
        self._most_idle = min(idle, most)
        self._slots = asyncio.Semaphore(most)
        self.timeout = timeout

    async def call(self, *args: Any) -> Any:
        """One command's reply; a Redis error reply is raised as redis-py raises it."""
        async with asyncio.timeout(self.timeout):
            async with self._slots:
                conn = self._idle.pop() if self._idle else self._make()
                try:
                    await conn.send_command(*args)
                    reply = await conn.read_response()
                except ResponseError:
                    self._keep(conn)  # an error reply leaves the connection in step
                    raise
                except BaseException:
                    await _drop(conn)
                    raise
                self._keep(conn)
                return reply

    def _keep(self, conn: Any) -> None:
        if len(self._idle) < self._most_idle:
            self._idle.append(conn)
        else:
            asyncio.ensure_future(_drop(conn))

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _drop(conn)


def _settled(task: "asyncio.Task[bytes]") -> None:
    """A call carrying settlements ended; its error, if any, was reported (`on_error`) and is
    raised to its caller — or to nobody, when the admission was cancelled: read it here."""
    if not task.cancelled():
        task.exception()


async def _drop(conn: Any) -> None:
    try:
        await conn.disconnect()
    except (RedisError, OSError):
        pass  # closing a connection that is already gone


class RedisCounters:
    """Counters in one Redis database, every key under `prefix`: one script (`COUNT`, by `EVALSHA`,
    loaded on the first `NOSCRIPT`) settles what finished requests used, then admits a request.

    Settlements are queued and ride on this replica's next admission — so a request's charge
    always counts before the next request this replica admits, with no round trip of its own —
    or, when no admission comes within `flush_seconds` (default `FLUSH_SECONDS`), go alone. No retries: a call that fails
    is reported at once (`CountersError`; settlements lost, alone or with the admission that carried
    them, through `on_error`), and the gate fails open or closed as configured, instead of holding
    the request through back-offs."""

    shared = True

    def __init__(self, url: str, *, password: str | None, username: str | None, timeout: float,
                 connections: int = 64) -> None:
        self.where = redis_location(url)
        self.on_error: Callable[[CountersError], None] | None = None
        self.flush_seconds = FLUSH_SECONDS
        self._connections = _Connections(url, password=password, username=username, timeout=timeout, most=connections)
        self._sha = hashlib.sha1(COUNT.encode()).hexdigest()
        self._pending_keys: list[str] = []
        self._pending_args: list[str | float] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[Any]] = set()
        """Calls carrying settlements (flushes, and admissions' that must finish even if cancelled)."""

    def _error(self, exc: BaseException) -> CountersError:
        return CountersError(f"Redis at {self.where}: {type(exc).__name__}: {exc}".rstrip(": "))

    async def _count(self, keys: list[str], args: list[str | float]) -> bytes:
        """Run `COUNT`: the pending settlements (taken here) and then `keys`/`args`' admission."""
        settle_keys, settle_args = self._take_pending()
        argv: list[str | float] = [len(settle_keys), *args[:1], *settle_args, *args[1:]]
        command = ("EVALSHA", self._sha, len(settle_keys) + len(keys), *settle_keys, *keys, *argv)
        if not settle_keys:
            return await self._run(command, carried=False)
        # settlements ride along: the call goes on even if this admission is cancelled (its client
        # left), so they are neither lost nor, by a retry, counted twice
        task = asyncio.ensure_future(self._run(command, carried=bool(keys)))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)
        task.add_done_callback(_settled)
        return await asyncio.shield(task)

    async def _run(self, command: tuple[Any, ...], *, carried: bool) -> bytes:
        """One `COUNT` call; `carried`: settlements ride on an admission (a failure loses them too)."""
        try:
            try:
                return await self._connections.call(*command)  # type: ignore[no-any-return]
            except NoScriptError:  # not run: load it and run it once more
                await self._connections.call("SCRIPT", "LOAD", COUNT)
                return await self._connections.call(*command)  # type: ignore[no-any-return]
        except (RedisError, OSError, TimeoutError) as exc:
            error = self._error(exc)
            if carried and self.on_error is not None:
                self.on_error(error)  # the settlements this admission carried are lost too (a flush reports its own)
            raise error from None

    def _take_pending(self) -> tuple[list[str], list[str | float]]:
        keys, args = self._pending_keys, self._pending_args
        self._pending_keys, self._pending_args = [], []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return keys, args

    async def ping(self) -> None:
        """Reach Redis once (start-up reports whether it can)."""
        try:
            await self._connections.call("PING")
        except (RedisError, OSError, TimeoutError) as exc:
            raise self._error(exc) from None

    async def admit(self, checks: Sequence[Check], holder: str) -> list[Outcome]:
        outcomes, _ = await self.lease(checks, holder, [1] * len(checks))
        return outcomes

    async def lease(self, checks: Sequence[Check], holder: str, wants: Sequence[int]) -> tuple[list[Outcome], list[int]]:
        """`admit`, taking `wants[i]` requests or concurrency slots of each such check at once where
        they fit (else one, as `admit`; 0: none, the check only read): the outcomes, and per check
        how many were taken (0 for tokens and budgets, or when refused). Slots taken more than one at
        a time are named `holder#1` … `holder#n`. `remaining` counts after everything taken."""
        args: list[str | float] = [holder]
        for check, want in zip(checks, wants):
            args += [_KINDS[check.kind], check.limit, check.period, want]
        reply = await self._count([c.key for c in checks], args)
        outcomes: list[Outcome] = []
        granted: list[int] = []
        for row in reply.decode().split(","):
            ok, remaining, reset, retry, taken = row.split(" ")
            outcomes.append(Outcome(ok == "1", float(remaining), float(reset), float(retry)))
            granted.append(int(taken))
        if not all(o.allowed for o in outcomes):
            granted = [0] * len(granted)  # refused by any check, the script took nothing
        return outcomes, granted

    def queue_release(self, check: Check, member: str) -> None:
        """Queue freeing one concurrency slot (`member` of `check`'s set), like `settle`'s releases."""
        self._pending_keys.append(check.key)
        self._pending_args += ["c", check.limit, check.period, 0, member]
        self._flush_later()

    def give_back(self, check: Check, count: int) -> None:
        """Queue the return of `count` requests taken by `lease` and never used (the bucket's `tat`
        moves back by as many intervals, never before now); it reaches Redis like a settlement."""
        self._pending_keys.append(check.key)
        self._pending_args += ["g", check.limit, check.period, count, ""]
        self._flush_later()

    async def settle(self, charges: Sequence[Charge], releases: Sequence[Check], holder: str) -> None:
        """Queue the settlement (see the class docstring); it reaches Redis within `flush_seconds`."""
        for charge in charges:
            self._pending_keys.append(charge.check.key)
            self._pending_args += [_KINDS[charge.check.kind], charge.check.limit, charge.check.period, charge.amount, holder]
        for check in releases:
            self.queue_release(check, holder)
        self._flush_later()

    def _flush_later(self) -> None:
        if self._pending_keys and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_seconds, self._flush_soon)

    def _flush_soon(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        """Send the pending settlements now (a failure goes to `on_error`: they are lost)."""
        if not self._pending_keys:
            return
        try:
            await self._count([], [""])
        except CountersError as exc:
            if self.on_error is not None:
                self.on_error(exc)

    async def close(self) -> None:
        """Send what is pending, then close the connections."""
        if self._flushes:
            await asyncio.wait(list(self._flushes), timeout=5)
        await self.flush()
        await self._connections.close()
