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
- **concurrency slots — leased too.** Where `lease_share` × a `concurrent` limit ≥ 2, an admission
  that goes to Redis adds that many slots to the rule's one set at once (named `<holder>#1…`, each
  lapsing after the rule's hold like any slot); the replica hands its free ones to the requests it
  admits and takes them back when they end, without Redis. Slots in Redis never exceed the limit,
  so neither do requests in flight across replicas; a replica holds at most its lease free where
  another cannot use it. A slot lease is used for new requests for `stale_seconds`; then its free
  slots are removed from Redis, and each slot still in use is removed when its request ends.

Leases and readings are keyed by counter key (which names the rule, the subject and, for budgets,
the calendar period), so a new period starts a new reading.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gateway.limits.buckets import Check, Outcome
from gateway.limits.counters import Charge
from gateway.limits.redis_counters import RedisCounters

MOST_LEASED = 1000
"""No lease holds more requests or slots than this, whatever the limit and share."""


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
class _Slots:
    """Concurrency slots a replica added to a rule's set at once: the members no request holds now."""

    check: Check
    free: list[str]
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


_Taken = _Lease | tuple[_Slots, str] | None
"""What an admission took here for one check before asking Redis: one request of a lease, one free
slot (its member name), or nothing."""


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
        self._slots: dict[str, _Slots] = {}
        self._readings: dict[str, _Reading] = {}
        self._closed = False
        self._held: dict[str, dict[str, tuple[str, _Slots | None]]] = {}
        """Admission holder → concurrency key → (the slot's member name in Redis, the lease it came from)."""

    async def ping(self) -> None:
        await self.redis.ping()

    def lease_size(self, check: Check) -> int:
        """How many requests or slots one admission takes at once for `check` (1: no lease)."""
        return max(1, min(MOST_LEASED, int(check.limit * self.lease_share)))

    async def admit(self, checks: Sequence[Check], holder: str) -> list[Outcome]:
        now = self.clock()
        taken = [self._take(check, now) for check in checks]
        local = self._local(checks, taken, now)
        if local is not None:
            self._hold(holder, checks, taken)
            return local
        try:
            return await self._remote(checks, taken, holder)
        except BaseException:
            self._put_back(checks, taken)
            raise

    def _take(self, check: Check, now: float) -> _Taken:
        """One request or slot of a fresh lease on `check`, if this replica holds one."""
        if check.kind == "requests":
            lease = self._leases.get(check.key)
            if lease is not None and now - lease.at > self.stale_seconds:
                del self._leases[check.key]
                self._give_back(lease)
                return None
            if lease is None or lease.left < 1:
                return None
            lease.left -= 1
            return lease
        if check.kind == "concurrent":
            slots = self._slots.get(check.key)
            if slots is not None and now - slots.at > self.stale_seconds:
                del self._slots[check.key]
                self._give_back(slots)
                return None
            if slots is None or not slots.free:
                return None
            return slots, slots.free.pop()
        return None

    def _put_back(self, checks: Sequence[Check], taken: Sequence[_Taken]) -> None:
        """Return what `_take` took for an admission that did not happen."""
        for check, took in zip(checks, taken):
            if isinstance(took, _Lease):
                if self._leases.get(check.key) is took:
                    took.left += 1
                else:
                    self.redis.give_back(check, 1)
            elif took is not None:
                slots, member = took
                if self._slots.get(check.key) is slots:
                    slots.free.append(member)
                else:
                    self._remove_slot(check, member)

    def _remove_slot(self, check: Check, member: str) -> None:
        self.redis.queue_release(check, member)

    def _local(self, checks: Sequence[Check], taken: Sequence[_Taken], now: float) -> list[Outcome] | None:
        """The outcomes when every check was answered here and allows; else None (ask Redis)."""
        outcomes: list[Outcome] = []
        for check, took in zip(checks, taken):
            if isinstance(took, _Lease):
                outcomes.append(Outcome(True, took.remaining + took.left, max(0.0, took.reset - (now - took.at))))
            elif took is not None:
                outcomes.append(Outcome(True, len(took[0].free), 0.0))
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

    def _hold(self, holder: str, checks: Sequence[Check], taken: Sequence[_Taken]) -> None:
        for check, took in zip(checks, taken):
            if isinstance(took, tuple):
                self._held.setdefault(holder, {})[check.key] = (took[1], took[0])

    async def _remote(self, checks: Sequence[Check], taken: Sequence[_Taken], holder: str) -> list[Outcome]:
        """One round trip: what was taken here is only read there (`want` 0); the other requests and
        concurrency checks ask for a lease's worth; tokens and budgets refresh their readings."""
        wants = [0 if took is not None else self.lease_size(c) if c.kind in ("requests", "concurrent") else 1
                 for c, took in zip(checks, taken)]
        try:
            outcomes, granted = await self.redis.lease(checks, holder, wants)
        except BaseException:  # cancelled or failed: the script may have run and added a lease of slots
            for check, want in zip(checks, wants):
                if check.kind == "concurrent" and want > 1:
                    for n in range(1, want + 1):  # freeing a member that was never added is a no-op
                        self._remove_slot(check, f"{holder}#{n}")
            raise
        after = self.clock()
        allowed = all(o.allowed for o in outcomes)
        if not allowed:
            self._put_back(checks, taken)
        for i, (check, outcome, took, got) in enumerate(zip(checks, outcomes, taken, granted)):
            if check.kind in ("tokens", "budget"):
                used = outcome.reset if check.kind == "tokens" else check.limit - outcome.remaining
                self._readings[check.key] = _Reading(check, used, after, after)
            elif not allowed:
                continue
            elif check.kind == "requests":
                left = took.left if isinstance(took, _Lease) else got - 1
                if got > 1:
                    self._install_lease(_Lease(check, got - 1, outcome.remaining, outcome.reset, after))
                outcomes[i] = replace(outcome, remaining=outcome.remaining + left)  # the lease is this replica's to use
            elif took is None and got > 1:
                slots = _Slots(check, [f"{holder}#{n}" for n in range(got, 1, -1)], after)
                self._install_slots(slots)
                self._held.setdefault(holder, {})[check.key] = (f"{holder}#1", slots)
            elif took is None:
                self._held.setdefault(holder, {})[check.key] = (holder, None)
        if allowed:
            self._hold(holder, checks, taken)
        return outcomes

    def _install_lease(self, lease: _Lease) -> None:
        """Make `lease` this replica's lease on its key; one it replaces (admissions that went to Redis
        at the same time) gives back what it has left."""
        old = self._leases.get(lease.check.key)
        if old is not None:
            self._give_back(old)
        if self._closed:  # the gateway is stopping: nothing is kept
            self._give_back(lease)
            return
        self._leases[lease.check.key] = lease
        self._expire_later(lease.check.key, lease)

    def _install_slots(self, slots: _Slots) -> None:
        """As `_install_lease`, for a lease of concurrency slots: one replaced removes its free slots."""
        old = self._slots.get(slots.check.key)
        if old is not None:
            self._give_back(old)
        if self._closed:
            self._give_back(slots)
            return
        self._slots[slots.check.key] = slots
        self._expire_later(slots.check.key, slots)

    def _expire_later(self, key: str, lease: _Lease | _Slots) -> None:
        """Give back what `lease` holds once it is `stale_seconds` old, even if no admission comes for
        its key again (an idle replica holds nothing for long)."""
        asyncio.get_running_loop().call_later(self.stale_seconds, self._expire, key, lease)

    def _expire(self, key: str, lease: _Lease | _Slots) -> None:
        if self.clock() - lease.at < self.stale_seconds - 0.001:
            return  # (a clock a test moves by hand: its admissions find the lease stale themselves)
        if isinstance(lease, _Lease) and self._leases.get(key) is lease:
            del self._leases[key]
            self._give_back(lease)
        elif isinstance(lease, _Slots) and self._slots.get(key) is lease:
            del self._slots[key]
            self._give_back(lease)

    def _give_back(self, lease: _Lease | _Slots) -> None:
        """Return to Redis what a lease no longer kept still holds: its requests left, its free slots."""
        if isinstance(lease, _Lease):
            if lease.left:
                self.redis.give_back(lease.check, lease.left)
        else:
            for member in lease.free:
                self._remove_slot(lease.check, member)

    async def settle(self, charges: Sequence[Charge], releases: Sequence[Check], holder: str) -> None:
        now = self.clock()
        for charge in charges:
            reading = self._readings.get(charge.check.key)
            if reading is not None:
                reading.charge(charge.amount, now)
        held = self._held.pop(holder, {})
        for check in releases:
            member, slots = held.get(check.key, (holder, None))
            current = self._slots.get(check.key)
            if slots is not None and current is slots and now - slots.at <= self.stale_seconds:
                slots.free.append(member)  # back to this replica's lease: no Redis
            else:
                self._remove_slot(check, member)
        await self.redis.settle(charges, [], holder)

    async def close(self) -> None:
        """Give back what the leases hold, then send everything pending and close."""
        self._closed = True  # a lease an admission in flight brings back now is given back at once
        for lease in [*self._leases.values(), *self._slots.values()]:
            self._give_back(lease)
        self._leases.clear()
        self._slots.clear()
        await self.redis.close()
