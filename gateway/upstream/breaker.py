"""The decisions behind a route's deployments (O1): which one takes a call, and when one cools down.

Pure code fed a clock value (`now`, seconds on any monotonic scale) and a random source: no I/O,
no time read here, so tests drive it step by step (tests/unit/test_deployments.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Breaker:
    """One deployment's circuit breaker.

    Closed: every call is admitted. `failures` failed calls in a row (or one 429 that said how
    long to wait: `Retry-After`) open it for `cooldown_seconds` (or the Retry-After, if longer).
    Once the cool-down is over, one call is admitted as a probe; while it runs no other call is;
    its success closes the breaker, its failure opens it again for another cool-down."""

    failures: int = 3
    cooldown_seconds: float = 30.0
    failed_in_a_row: int = 0
    open_until: float | None = None
    probing: bool = False

    def available(self, now: float) -> bool:
        """Would a call be admitted at `now`? (Asks only; `admit` takes the probe slot.)"""
        if self.open_until is None:
            return True
        return now >= self.open_until and not self.probing

    def admit(self, now: float) -> None:
        """A call starts on this deployment; past a cool-down it is the probe."""
        if self.open_until is not None and now >= self.open_until:
            self.probing = True

    def succeeded(self) -> None:
        """The deployment answered: closed again, the count of failures in a row reset."""
        self.failed_in_a_row = 0
        self.open_until = None
        self.probing = False

    def failed(self, now: float, retry_after: float | None = None) -> None:
        """The deployment failed a call (429, 5xx, timeout, connection): cool down if it was the
        probe, if this makes `failures` in a row, or if the upstream said when to come back."""
        self.failed_in_a_row += 1
        if self.probing or self.failed_in_a_row >= self.failures or retry_after is not None:
            wait = max(self.cooldown_seconds, retry_after or 0.0)
            self.open_until = now + wait
        self.probing = False

    def abandoned(self) -> None:
        """A call ended with no verdict (the client left): a probe slot it held is free again."""
        self.probing = False


def pick(weights: Sequence[float], eligible: Sequence[bool], random: Callable[[], float]) -> int | None:
    """The index of the entry a call goes to: chosen among the `eligible` ones with probability
    proportional to its weight, by one draw of `random()` in [0, 1); None when none is eligible."""
    total = sum(w for w, ok in zip(weights, eligible) if ok)
    if total <= 0:
        return None
    point = random() * total
    last = None
    for i, (weight, ok) in enumerate(zip(weights, eligible)):
        if not ok:
            continue
        last = i
        if point < weight:
            return i
        point -= weight
    return last  # rounding at the top end of the range


def soonest(breakers: Sequence[Breaker], eligible: Sequence[bool]) -> int | None:
    """Among the `eligible` entries, the one whose cool-down ends first (a route whose every
    deployment is cooling down still asks one rather than refusing without asking anyone)."""
    candidates = [(b.open_until or 0.0, i) for i, (b, ok) in enumerate(zip(breakers, eligible)) if ok]
    return min(candidates)[1] if candidates else None
