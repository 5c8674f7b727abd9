"""Admitting on a replica what it already holds, so most requests make no Redis round trip (O2).

A round trip to Redis per request costs ≈ 0.3 ms on a busy 2-core host (bench/limits_overhead.py),
more than admission's whole budget. `LeasingCounters` wraps the Redis counters and answers locally
when it can, asking Redis only when it must:

- **requests per minute — leases.** Where a rule's limit is large (`lease_share` × limit ≥ 2), an
  admission that goes to Redis takes up to that many requests from the rule's one bucket at once
  (where they fit; else one, as without leases) and the replica admits the rest itself, one per
  request. Every request admitted was taken from the shared bucket, so replicas together never
  admit more than the bucket allows — each may take up to its lease ahead of time, so at most
  `lease_share` × limit per replica is held where another replica that runs short cannot use it.
  A lease not used up within `stale_seconds` is given back (the bucket moves back by what is
  left), so an idle replica holds nothing for long. Small limits never lease: one round trip per
  request, exact.
- **tokens per minute and budgets — readings.** These are only read at admission (charged when a
  request ends). A replica reuses its last reading of a counter for `stale_seconds`, adding what
  its own requests were charged since; it admits on that reading, and **asks Redis before it
  refuses** — a refusal is always Redis's word, never a stale guess. Charges reach Redis within
  `stale_seconds / 4` (or on the next admission that asks). So the one inexactness is other
  replicas' charges of the last `stale_seconds` and a bit, which a budget or a token limit
  (charged after the fact anyway) already tolerates.
- **concurrency slots** are always taken and freed in Redis (a request holding a slot must be
  seen by every replica at once): a rule with `concurrent` keeps its round trip per request.

Leases and readings are keyed by counter key (which names the rule, the subject and, for budgets,
the calendar period), so a new period starts a new reading.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gateway.limits.buckets import Check, Outcome
from gateway.limits.counters import Charge
from gateway.limits.redis_counters import RedisCounters

MOST_LEASED = 1000
"""No lease holds more requests than this, whatever the limit and share."""


@dataclass
class _Lease:
    """Requests a replica took from a requests bucket and has not used yet."""

    check: Check
    left: int
    remaining: float
    """The bucket's `remaining` as Redis answered when the lease was taken (after taking it)."""
    reset: float
    at: float


@dataclass
class _Reading:
    """A tokens or budget counter as Redis answered it, plus this replica's own charges since.

    `used` is seconds of the period used (tokens, the GCRA `tat` − now at `at`) or dollars spent
    (budget); `read_at` is when Redis answered (the reading's age), `at` when `used` was last moved."""

    check: Check
    used: float
    read_at: float
    at: float

    def outcome(self, check: Check, now: float) -> Outcome:
        if check.kind == "tokens":
            used = max(0.0, self.used - (now - self.at))
            interval = check.period / check.limit
            if used >= check.period:
                return Outcome(False, 0, used, used - check.period + interval)
            return Outcome(True, max(0.0, math.floor((check.period - used) / interval + 1e-9)), used)
        if self.used >= check.limit:
            return Outcome(False, 0, check.period, check.period)
        return Outcome(True, check.limit - self.used, check.period)

    def charge(self, amount: float, now: float) -> None:
        if self.check.kind == "tokens":
            self.used = max(0.0, self.used - (now - self.at)) + amount * self.check.period / self.check.limit
            self.at = now
        else:
            self.used += amount


class LeasingCounters:
    """The Redis counters with leases and readings in front (see the module docstring)."""

    shared = True

    def __init__(self, redis: RedisCounters, *, lease_share: float, stale_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        # admissions here seldom go to Redis, so settlements wait for a timer: the readings already
        # count this replica's charges, and other replicas' readings are `stale_seconds` old anyway
        redis.flush_seconds = max(redis.flush_seconds, stale_seconds / 4)
        self.lease_share = lease_share
        self.stale_seconds = stale_seconds
        self.clock = clock
        self._leases: dict[str, _Lease] = {}
        self._readings: dict[str, _Reading] = {}

    async def ping(self) -> None:
        await self.redis.ping()

    def lease_size(self, check: Check) -> int:
        """How many requests one admission takes at once from `check`'s bucket (1: no lease)."""
        return max(1, min(MOST_LEASED, int(check.limit * self.lease_share)))

    async def admit(self, checks: Sequence[Check], holder: str) -> list[Outcome]:
        now = self.clock()
        local = self._local(checks, now)
        if local is not None:
            for check in checks:
                if check.kind == "requests":
                    self._take(check.key)
            return local
        return await self._remote(checks, holder, now)

    def _local(self, checks: Sequence[Check], now: float) -> list[Outcome] | None:
        """The outcomes when every check can be answered here and allows; else None (ask Redis)."""
        outcomes: list[Outcome] = []
        needed: dict[str, int] = {}
        for check in checks:
            if check.kind == "requests":
                lease = self._fresh_lease(check.key, now)
                needed[check.key] = needed.get(check.key, 0) + 1
                if lease is None or lease.left < needed[check.key]:
                    return None
                outcomes.append(Outcome(True, lease.remaining + lease.left - needed[check.key], max(0.0, lease.reset - (now - lease.at))))
            elif check.kind in ("tokens", "budget"):
                reading = self._readings.get(check.key)
                if reading is None or now - reading.read_at > self.stale_seconds:
                    return None
                outcome = reading.outcome(check, now)
                if not outcome.allowed:
                    return None  # only Redis refuses
                outcomes.append(outcome)
            else:
                return None
        return outcomes

    def _fresh_lease(self, key: str, now: float) -> _Lease | None:
        """The lease on `key` if it is young enough; an old one is given back (what is left of it)."""
        lease = self._leases.get(key)
        if lease is not None and now - lease.at > self.stale_seconds:
            del self._leases[key]
            if lease.left:
                self.redis.give_back(lease.check, lease.left)
            return None
        return lease

    def _take(self, key: str) -> None:
        lease = self._leases[key]
        lease.left -= 1
        if lease.left <= 0:
            del self._leases[key]

    async def _remote(self, checks: Sequence[Check], holder: str, now: float) -> list[Outcome]:
        """One round trip: requests checks with a lease here are only read (`want` 0) and take from
        the lease; the others ask for a lease's worth; tokens and budgets refresh their readings."""
        wants: list[int] = []
        for check in checks:
            if check.kind != "requests":
                wants.append(1)
            elif self._fresh_lease(check.key, now) is not None:
                wants.append(0)
            else:
                wants.append(self.lease_size(check))
        outcomes, granted = await self.redis.lease(checks, holder, wants)
        after = self.clock()
        allowed = all(o.allowed for o in outcomes)
        for i, (check, outcome, want, taken) in enumerate(zip(checks, outcomes, wants, granted)):
            if check.kind in ("tokens", "budget"):
                used = outcome.reset if check.kind == "tokens" else check.limit - outcome.remaining
                self._readings[check.key] = _Reading(check, used, after, after)
            elif check.kind == "requests" and allowed:
                if want == 0:
                    self._take(check.key)
                    left = self._leases[check.key].left if check.key in self._leases else 0
                    outcomes[i] = replace(outcome, remaining=outcome.remaining + left)
                elif taken > 1:
                    self._leases[check.key] = _Lease(check, taken - 1, outcome.remaining, outcome.reset, after)
                    outcomes[i] = replace(outcome, remaining=outcome.remaining + taken - 1)  # the lease is this replica's to use
        return outcomes

    async def settle(self, charges: Sequence[Charge], releases: Sequence[Check], holder: str) -> None:
        now = self.clock()
        for charge in charges:
            reading = self._readings.get(charge.check.key)
            if reading is not None:
                reading.charge(charge.amount, now)
        await self.redis.settle(charges, releases, holder)

    async def close(self) -> None:
        """Give back what the leases hold, then send everything pending and close."""
        for lease in self._leases.values():
            if lease.left:
                self.redis.give_back(lease.check, lease.left)
        self._leases.clear()
        await self.redis.close()
