"""Where counters live: the interface both backends keep, and the in-process one.

`admit` is all or nothing: every check is evaluated first, and only when all allow is anything
taken (a request slot, a concurrency slot) — a request refused by one rule uses none of another's.
`settle` charges what a finished request used (tokens, spend) and frees its concurrency slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.limits.buckets import Check, Outcome, budget_check, concurrency_check, gcra_charge, gcra_check, gcra_take


PRUNE_AT = 10_000
"""In-process buckets kept before the full ones (nothing taken within their period) are dropped."""


@dataclass(frozen=True)
class Charge:
    """Units a finished request used against one check: tokens, or US dollars for a budget."""

    check: Check
    amount: float


class CountersError(Exception):
    """The counters could not be read or written (Redis unreachable, timed out, refused)."""


class Counters(Protocol):
    """Counters shared by whoever uses the same backend (one process, or every replica on one Redis)."""

    shared: bool
    """True when every replica counts together (Redis); False for one process's counters."""

    async def ping(self) -> None:
        """Reach the counters once (start-up says whether it can), or raise `CountersError`."""
        ...

    async def admit(self, checks: Sequence[Check], holder: str) -> list[Outcome]:
        """Evaluate every check; when all allow, take the request's units and slots (as `holder`)."""
        ...

    async def settle(self, charges: Sequence[Charge], releases: Sequence[Check], holder: str) -> None:
        """Charge what a finished request used; free `holder`'s concurrency slots of `releases`."""
        ...

    async def close(self) -> None:
        ...


@dataclass
class MemoryCounters:
    """One process's counters, with the Redis backend's semantics (`clock`: epoch seconds)."""

    clock: Callable[[], float] = time.time
    shared: bool = False
    _tat: dict[str, float] = field(default_factory=dict)
    _spent: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Budget key → (US dollars spent, epoch second the period ends)."""
    _slots: dict[str, dict[str, float]] = field(default_factory=dict)
    """Concurrency key → holder → epoch second its slot lapses."""

    async def ping(self) -> None:
        return None

    async def admit(self, checks: Sequence[Check], holder: str) -> list[Outcome]:
        now = self.clock()
        outcomes: list[Outcome] = []
        taken: dict[str, float] = {}
        for check in checks:
            if check.kind == "requests":
                outcome, taken[check.key] = gcra_take(taken.get(check.key, self._tat.get(check.key, 0.0)), now, check.limit, check.period)
            elif check.kind == "tokens":
                outcome = gcra_check(self._tat.get(check.key, 0.0), now, check.limit, check.period)
            elif check.kind == "budget":
                outcome = budget_check(self._spent_now(check.key, now), check.limit, check.period)
            else:
                slots = self._slots.setdefault(check.key, {})
                for lapsed in [h for h, until in slots.items() if until <= now]:
                    del slots[lapsed]
                outcome = concurrency_check(len(slots), check.limit)
            outcomes.append(outcome)
        if all(o.allowed for o in outcomes):
            if len(self._tat) > PRUNE_AT:  # buckets full again hold nothing worth keeping
                self._tat = {key: tat for key, tat in self._tat.items() if tat > now}
            self._tat.update(taken)
            for check in checks:
                if check.kind == "concurrent":
                    self._slots[check.key][holder] = now + check.period
        return outcomes

    def _spent_now(self, key: str, now: float) -> float:
        spent, ends = self._spent.get(key, (0.0, 0.0))
        if ends <= now:
            self._spent.pop(key, None)
            return 0.0
        return spent

    async def settle(self, charges: Sequence[Charge], releases: Sequence[Check], holder: str) -> None:
        now = self.clock()
        for charge in charges:
            check = charge.check
            if check.kind == "tokens":
                self._tat[check.key] = gcra_charge(self._tat.get(check.key, 0.0), now, check.limit, check.period, charge.amount)
            elif check.kind == "budget":
                self._spent[check.key] = (self._spent_now(check.key, now) + charge.amount, now + check.period)
        for check in releases:
            slots = self._slots.get(check.key)
            if slots is not None:
                slots.pop(holder, None)
                if not slots:
                    del self._slots[check.key]

    async def close(self) -> None:
        return None
