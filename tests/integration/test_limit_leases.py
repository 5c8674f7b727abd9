"""Leases and readings in front of the Redis counters (O2, gateway/limits/leases.py), on the machine's
real Redis (each test under its own key prefix, deleted after). The replicas' clock is a number the
test moves (`Clock`), so a lease's or reading's age is exact; Redis keeps its own clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
import redis as redis_py

from gateway.limits.buckets import Check
from gateway.limits.counters import Charge
from gateway.limits.leases import LeasingCounters
from gateway.limits.redis_counters import RedisCounters
from tests.support import redis as redis_support


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def prefix() -> Iterator[str]:
    redis_support.require()
    found = redis_support.prefix()
    yield found
    redis_support.clean(found)


def replica(clock: Callable[[], float], share: float = 0.05, stale: float = 0.2) -> LeasingCounters:
    return LeasingCounters(RedisCounters(redis_support.URL, password=None, username=None, timeout=2),
                           lease_share=share, stale_seconds=stale, clock=clock)


def members(key: str) -> set[bytes]:
    """The members of the concurrency set at `key` (the slots Redis counts as taken)."""
    client = redis_py.Redis.from_url(redis_support.URL)
    try:
        return set(client.zrange(key, 0, -1))
    finally:
        client.close()


def taken(key: str, check: Check) -> float:
    """How many requests the bucket at `key` counts as taken now (its `tat` ahead of Redis's clock, in intervals)."""
    client = redis_py.Redis.from_url(redis_support.URL)
    try:
        tat = float(client.get(key) or 0)
        seconds, micros = client.time()
    finally:
        client.close()
    return max(0.0, tat - (seconds + micros / 1e6)) / (check.period / check.limit)


def test_a_large_limit_is_leased_so_most_admissions_make_no_round_trip_and_the_rest_goes_back(prefix) -> None:
    # R: O2 -- one admission takes a lease's worth from the shared bucket; the next ones come from the lease
    rpm = Check("requests", "r", f"{prefix}rpm", 600, 60)  # half of 600: leases of 300; 1 refilled per 0.1 s
    clock = Clock()

    async def scenario() -> tuple[float, float, list[float]]:
        counters = replica(clock, share=0.5)
        try:
            remaining = []
            for _ in range(5):
                [outcome] = await counters.admit([rpm], "")
                assert outcome.allowed
                remaining.append(outcome.remaining)
            held = taken(rpm.key, rpm)
        finally:
            await counters.close()  # gives back the 295 never used
        return held, taken(rpm.key, rpm), remaining

    held, after_close, remaining = asyncio.run(scenario())
    assert 280 <= held <= 300  # the first admission took 300 (less what Redis's clock refilled since: 1 per 0.1 s)
    assert after_close <= 5.5  # only the five used stay taken
    assert remaining == sorted(remaining, reverse=True) and remaining[0] - remaining[-1] == 4


def test_two_replicas_leasing_one_bucket_never_admit_more_than_it_holds(prefix) -> None:
    # R: O2 -- every request admitted was taken from the one bucket: leases change who holds them, not how many
    rpm = Check("requests", "r", f"{prefix}rpm", 200, 60)  # leases of 10
    clock = Clock()

    async def scenario() -> tuple[int, float]:
        first, second = replica(clock), replica(clock)
        admitted, refused_in_a_row = 0, 0
        started = time.monotonic()
        try:
            while refused_in_a_row < 4:
                for counters in (first, second):
                    [outcome] = await counters.admit([rpm], "")
                    admitted += outcome.allowed
                    refused_in_a_row = 0 if outcome.allowed else refused_in_a_row + 1
        finally:
            await first.close()
            await second.close()
        return admitted, time.monotonic() - started

    admitted, elapsed = asyncio.run(scenario())
    refilled = int(elapsed * 200 / 60) + 1
    assert 200 <= admitted <= 200 + refilled  # the bucket's 200 and what refilled while the loop ran


def test_a_lease_left_unused_past_stale_seconds_is_given_back_and_a_new_one_taken(prefix) -> None:
    # R: O2 -- an idle replica holds nothing for long
    rpm = Check("requests", "r", f"{prefix}rpm", 600, 60)  # leases of 300; 1 refilled per 0.1 s
    clock = Clock()

    async def scenario() -> tuple[float, float]:
        counters = replica(clock, share=0.5)
        try:
            await counters.admit([rpm], "")
            before = taken(rpm.key, rpm)
            clock.now += 0.5  # past stale_seconds: the next admission gives back 299 and leases 300 anew
            await counters.admit([rpm], "")
            await counters.redis.flush()
            return before, taken(rpm.key, rpm)
        finally:
            await counters.close()

    before, after = asyncio.run(scenario())
    assert 280 <= before <= 300
    assert 282 <= after <= 302  # the 1 used before + 300 leased anew (the first lease's 299 back), less refill


def test_small_limits_take_one_request_per_admission_exactly(prefix) -> None:
    # R: O2 -- where the share makes less than 2, no lease: each admission is Redis's
    rpm = Check("requests", "r", f"{prefix}rpm", 3, 60)
    clock = Clock()

    async def scenario() -> list[bool]:
        first, second = replica(clock), replica(clock)
        try:
            return [(await counters.admit([rpm], ""))[0].allowed for counters in (first, second, first, second)]
        finally:
            await first.close()
            await second.close()

    assert asyncio.run(scenario()) == [True, True, True, False]


def test_a_replica_admits_on_its_reading_plus_its_own_charges_and_only_redis_refuses(prefix) -> None:
    # R: O2 -- a budget spent by another replica counts here once the reading is stale; this replica's
    # own charges count at once; a refusal is always Redis's answer
    budget = Check("budget", "b", f"{prefix}budget", 1.0, 3600)
    clock = Clock()

    async def scenario() -> list[bool]:
        here, there = replica(clock), replica(clock)
        seen = []
        try:
            seen.append((await here.admit([budget], ""))[0].allowed)  # read: $0 of $1
            await there.settle([Charge(budget, 1.5)], [], "")
            await there.redis.flush()  # the other replica spent it all
            seen.append((await here.admit([budget], ""))[0].allowed)  # within stale_seconds: the reading admits
            clock.now += 0.3
            seen.append((await here.admit([budget], ""))[0].allowed)  # stale: Redis is asked, and refuses
            return seen
        finally:
            await here.close()
            await there.close()

    assert asyncio.run(scenario()) == [True, True, False]


def test_own_token_charges_refuse_the_next_request_at_once_through_redis(prefix) -> None:
    # R: O2 -- the charge rides on the admission that asks Redis, so the refusal is exact
    tokens = Check("tokens", "t", f"{prefix}tpm", 20, 60)
    clock = Clock()

    async def scenario() -> list[bool]:
        counters = replica(clock, stale=5)
        try:
            seen = [(await counters.admit([tokens], ""))[0].allowed]
            await counters.settle([Charge(tokens, 25)], [], "")
            seen.append((await counters.admit([tokens], ""))[0].allowed)
            return seen
        finally:
            await counters.close()

    assert asyncio.run(scenario()) == [True, False]


def test_concurrency_slots_are_leased_handed_out_here_and_never_exceed_the_limit_across_replicas(prefix) -> None:
    # R: O2 -- a lease adds slots to the one set; requests in flight across replicas stay within the limit
    slot = Check("concurrent", "c", f"{prefix}slot", 40, 600)  # 5 % of 40: leases of 2
    clock = Clock()

    async def scenario() -> tuple[int, int, int, int]:
        first, second = replica(clock), replica(clock)
        holders: list[tuple[LeasingCounters, str]] = []
        try:
            refused = 0
            for n in range(60):
                counters = (first, second)[n % 2]
                [outcome] = await counters.admit([slot], f"h{n}")
                if outcome.allowed:
                    holders.append((counters, f"h{n}"))
                else:
                    refused += 1
            in_flight, held = len(holders), len(members(slot.key))
            for counters, holder in holders:
                await counters.settle([], [slot], holder)  # back to the leases, or removed
            await first.close()
            await second.close()
            return in_flight, refused, held, len(members(slot.key))
        finally:
            await first.close()
            await second.close()

    in_flight, refused, held, after = asyncio.run(scenario())
    assert in_flight == 40 and refused == 20  # exactly the limit, across both replicas
    assert held == 40
    assert after == 0  # every slot freed: the free ones of each lease removed at close


def test_a_slot_freed_here_is_reused_without_redis_and_an_old_lease_is_removed(prefix) -> None:
    # R: O2
    slot = Check("concurrent", "c", f"{prefix}slot", 100, 600)  # leases of 5
    clock = Clock()

    async def scenario() -> tuple[set[bytes], set[bytes], set[bytes]]:
        counters = replica(clock)
        try:
            await counters.admit([slot], "a")
            leased = members(slot.key)
            await counters.settle([], [slot], "a")
            await counters.admit([slot], "b")  # a free slot of the lease: nothing new in Redis
            again = members(slot.key)
            clock.now += 0.5  # the lease is old: its free slots go, "b"'s slot goes when b ends
            await counters.admit([slot], "c")
            await counters.settle([], [slot], "b")
            await counters.redis.flush()
            return leased, again, members(slot.key)
        finally:
            await counters.close()

    leased, again, later = asyncio.run(scenario())
    assert leased == {f"a#{n}".encode() for n in range(1, 6)}
    assert again == leased
    assert later == {f"c#{n}".encode() for n in range(1, 6)}


def test_settlements_riding_on_an_admission_whose_client_left_still_reach_redis(prefix) -> None:
    # R: O2 -- a cancelled admission does not lose the charges it carried
    tokens = Check("tokens", "t", f"{prefix}tpm", 20, 60)
    rpm = Check("requests", "r", f"{prefix}rpm", 100, 60)

    async def scenario() -> None:
        counters = RedisCounters(redis_support.URL, password=None, username=None, timeout=2)
        try:
            await counters.settle([Charge(tokens, 25)], [], "")  # queued: rides on the next admission
            admission = asyncio.ensure_future(counters.admit([rpm], ""))
            await asyncio.sleep(0)  # let it send (one step of the loop, not a wait)
            admission.cancel()
            with pytest.raises(asyncio.CancelledError):
                await admission
        finally:
            await counters.close()  # waits for the call the admission started

    asyncio.run(scenario())
    assert taken(tokens.key, tokens) >= 24  # the 25 tokens counted (less what Redis's clock refilled)


def test_an_admission_cancelled_in_flight_leaves_no_leased_slot_behind(prefix) -> None:
    # R: O2 -- the script may have added holder#1… before the client left: they are freed, not left to lapse
    slot = Check("concurrent", "c", f"{prefix}slot", 200, 600)  # leases of 10
    clock = Clock()

    async def scenario() -> None:
        counters = replica(clock)
        try:
            await counters.ping()  # a connection ready: the admission's script goes out at its first step
            admission = asyncio.ensure_future(counters.admit([slot], "H"))
            await asyncio.sleep(0)  # let it send (one step of the loop, not a wait)
            admission.cancel()
            with pytest.raises(asyncio.CancelledError):
                await admission
            await counters.settle([], [slot], "H")  # what the gate does for an admission that never completed
        finally:
            await counters.close()

    asyncio.run(scenario())
    assert len(members(slot.key)) == 0


def test_admissions_racing_to_redis_on_one_replica_orphan_no_lease(prefix) -> None:
    # R: O2 -- a lease replaced by one that arrived at the same time gives back what it held
    slot = Check("concurrent", "c", f"{prefix}slot", 500, 600)  # leases of 25
    rpm = Check("requests", "r", f"{prefix}rpm", 600, 60)  # leases of 30
    clock = Clock()

    async def scenario() -> float:
        counters = replica(clock)
        try:
            outcomes = await asyncio.gather(*(counters.admit([rpm, slot], f"h{n}") for n in range(12)))
            assert all(o.allowed for pair in outcomes for o in pair)
            for n in range(12):
                await counters.settle([], [slot], f"h{n}")
        finally:
            await counters.close()
        return taken(rpm.key, rpm)

    requests_taken = asyncio.run(scenario())
    assert len(members(slot.key)) == 0  # every slot freed: none orphaned by a replaced lease
    assert requests_taken <= 12.5  # only the twelve used stay taken (leases replaced or closed gave theirs back)


def test_a_lease_an_idle_replica_holds_is_given_back_after_stale_seconds_without_another_admission(prefix) -> None:
    # R: O2
    slot = Check("concurrent", "c", f"{prefix}slot", 200, 600)

    async def scenario() -> tuple[int, int]:
        counters = replica(time.monotonic, stale=0.05)  # the real clock: the lease's own timer gives it back
        try:
            await counters.admit([slot], "a")
            await counters.settle([], [slot], "a")
            held = len(members(slot.key))
            deadline = time.monotonic() + 10
            while len(members(slot.key)) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # polling Redis with a deadline: nothing else happens on this replica
            return held, len(members(slot.key))
        finally:
            await counters.close()

    held, later = asyncio.run(scenario())
    assert held == 10 and later == 0
