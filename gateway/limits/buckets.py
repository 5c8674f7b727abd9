"""The arithmetic of limits, pure: GCRA buckets, budget periods and the `x-ratelimit-*` headers.

Requests and tokens per minute use GCRA (the generic cell rate algorithm, a token bucket kept as
one number): a bucket of `limit` units refilling over `period` seconds stores only its
"theoretical arrival time" `tat`, the moment it will be full again. Taking `cost` units moves it
to `max(tat, now) + cost × period/limit`; that is allowed while it stays within `period` of now.
So a burst of `limit` passes at once, then one unit every `period/limit` seconds — the limit
holds over every sliding minute, with no window edge that lets 2× through. Tokens are known only
when a request ends: they are charged then (`charge`, never refused), and the next request is
admitted while the bucket is not over full (`check`). The Lua scripts in gateway.limits.redis_counters
do the same arithmetic on Redis's clock; tests/unit/test_limits.py pins this one.
"""

from __future__ import annotations

import calendar
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

CheckKind = Literal["requests", "tokens", "concurrent", "budget"]


@dataclass(frozen=True)
class Check:
    """One limit one request is held to: a counter (`key`) and its limit.

    `period` is seconds: the GCRA period (requests, tokens), the seconds until the budget's
    period ends (budget), or how long a concurrency slot may be held at most (concurrent: a
    replica that dies mid-request frees its slots after that)."""

    kind: CheckKind
    rule: str
    key: str
    limit: float
    period: float


@dataclass(frozen=True)
class Outcome:
    """One check's answer: allowed, what is left, seconds until full again, seconds to wait."""

    allowed: bool
    remaining: float
    reset: float
    retry_after: float = 0.0


def gcra_take(tat: float, now: float, limit: float, period: float, cost: float = 1.0) -> tuple[Outcome, float]:
    """Take `cost` units (requests per minute) now; the outcome and the bucket's new `tat` (unchanged when refused)."""
    interval = period / limit
    start = max(tat, now)
    new = start + cost * interval
    if new - now > period + 1e-9:
        remaining = max(0.0, math.floor((period - (start - now)) / interval + 1e-9))
        return Outcome(False, remaining, start - now, new - now - period), tat
    return Outcome(True, math.floor((period - (new - now)) / interval + 1e-9), new - now), new


def gcra_check(tat: float, now: float, limit: float, period: float) -> Outcome:
    """Is there anything left in the bucket (tokens per minute), without taking from it?"""
    interval = period / limit
    used = max(tat, now) - now
    remaining = max(0.0, math.floor((period - used) / interval + 1e-9))
    if used >= period:
        return Outcome(False, 0, used, used - period + interval)
    return Outcome(True, remaining, used)


def gcra_charge(tat: float, now: float, limit: float, period: float, cost: float) -> float:
    """The bucket's new `tat` after `cost` units were used (never refused: the work is done)."""
    return max(tat, now) + cost * period / limit


def budget_check(spent: float, limit: float, until_end: float) -> Outcome:
    """A budget is open while less than `limit` was spent this period; closed, it opens at the period's end."""
    if spent >= limit:
        return Outcome(False, 0, until_end, until_end)
    return Outcome(True, limit - spent, until_end)


def concurrency_check(in_flight: int, limit: float) -> Outcome:
    """A slot is free while fewer than `limit` requests are in flight (retry: in a second)."""
    if in_flight >= limit:
        return Outcome(False, 0, 1.0, 1.0)
    return Outcome(True, limit - in_flight - 1, 0.0)


def period_window(period: str, now: float) -> tuple[str, float]:
    """The UTC calendar period holding `now` (epoch seconds): its id (part of the counter's key)
    and the epoch second it ends."""
    at = datetime.fromtimestamp(now, timezone.utc)
    if period == "hour":
        start = at.replace(minute=0, second=0, microsecond=0)
        return start.strftime("%Y-%m-%dT%H"), start.timestamp() + 3600
    if period == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.strftime("%Y-%m-%d"), start.timestamp() + 86400
    days = calendar.monthrange(at.year, at.month)[1]
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start.strftime("%Y-%m"), start.timestamp() + days * 86400


def spend_usd(prompt_tokens: int, completion_tokens: int, input_per_million: float, output_per_million: float) -> float:
    """What a request's usage cost, in US dollars."""
    return (prompt_tokens * input_per_million + completion_tokens * output_per_million) / 1_000_000


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it (`x-ratelimit-reset-*`): `20ms`, `1.5s`, `6m0s`, `1h2m3s`."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{round(secs, 3):g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text


def rate_headers(outcomes: list[tuple[Check, Outcome]]) -> dict[str, str]:
    """`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` of the tightest requests and tokens
    checks (fewest remaining), as OpenAI sends them."""
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        found = [(c, o) for c, o in outcomes if c.kind == kind]
        if not found:
            continue
        check, outcome = min(found, key=lambda pair: (pair[1].remaining, -pair[1].reset))
        headers[f"x-ratelimit-limit-{kind}"] = str(int(check.limit))
        headers[f"x-ratelimit-remaining-{kind}"] = str(int(outcome.remaining))
        headers[f"x-ratelimit-reset-{kind}"] = duration(outcome.reset)
    return headers
