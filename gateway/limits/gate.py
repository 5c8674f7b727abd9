"""What the request engine calls (O2): `Limits.admit` once the route is known, before the upstream;
`Admission.end` when the request ends (streams: when the stream's cleanup runs).

Requests per minute and concurrency are taken at admission, atomically with every other check;
tokens per minute and budgets are checked at admission and charged at the end from the request's
summed usage. When the counters fail (Redis unreachable), `on_redis_error` decides: `open` lets
the request pass (counted in `toolgate_limits_redis_errors_total`, logged), `closed` answers 503.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from prometheus_client import CollectorRegistry, Counter

from gateway.accounting import RequestRecord
from gateway.errors import RateLimited, Unavailable
from gateway.identity import Identity
from gateway.limits.buckets import Check, Outcome, duration, period_window, rate_headers, spend_usd
from gateway.limits.config import LimitRule, LimitsConfig
from gateway.limits.counters import Charge, Counters, CountersError, MemoryCounters
from gateway.metrics import metric
from gateway.secrets import SecretSet, resolve_secret

log = logging.getLogger("toolgate.limits")

MINUTE = 60.0
NO_SUBJECT = "-"
"""The subject of a caller without one (no key, user or org): such callers share one counter."""
ADMISSION_KEY = "toolgate.admission"
"""Where a request's `Admission` lives in the ASGI scope, from admission until the request ends."""
LOG_EVERY_SECONDS = 10.0
"""While the counters keep failing, one log line per this many seconds (every failure is counted)."""


def subject_of(rule: LimitRule, identity: Identity, route: str) -> str:
    """Whom `rule` counts this request against: the key's SHA-256 (never the key), the user, the org or the route."""
    if rule.per == "key":
        return identity.credential_fp or NO_SUBJECT
    if rule.per == "user":
        return identity.user_id or NO_SUBJECT
    if rule.per == "org":
        return identity.org_id or NO_SUBJECT
    return route


def checks_for(rules: Sequence[LimitRule], identity: Identity, route: str, now: float, prefix: str, hold_seconds: float) -> list[Check]:
    """Every check the request is held to: one per limit of each rule that applies to `route`."""
    checks: list[Check] = []
    for rule in rules:
        if rule.route is not None and rule.route != route:
            continue
        base = f"{rule.label}:{subject_of(rule, identity, route)}"
        if rule.requests_per_minute is not None:
            checks.append(Check("requests", rule.label, f"{prefix}rpm:{base}", rule.requests_per_minute, MINUTE))
        if rule.tokens_per_minute is not None:
            checks.append(Check("tokens", rule.label, f"{prefix}tpm:{base}", rule.tokens_per_minute, MINUTE))
        if rule.concurrent is not None:
            checks.append(Check("concurrent", rule.label, f"{prefix}inflight:{base}", rule.concurrent, hold_seconds))
        if rule.budget is not None:
            window, ends = period_window(rule.budget.period, now)
            checks.append(Check("budget", rule.label, f"{prefix}spend:{base}:{window}", rule.budget.usd, max(ends - now, 1.0)))
    return checks


def refusal(checks: Sequence[Check], outcomes: Sequence[Outcome], rules: dict[str, LimitRule]) -> RateLimited | None:
    """The 429 for a refused admission (the refusing check whose wait is longest), or None when all allow."""
    refused = [(c, o) for c, o in zip(checks, outcomes) if not o.allowed]
    if not refused:
        return None
    check, outcome = max(refused, key=lambda pair: pair[1].retry_after)
    wait = max(1, math.ceil(outcome.retry_after))
    headers = {**rate_headers(list(zip(checks, outcomes))), "retry-after": str(wait)}
    rule = rules[check.rule]
    if check.kind == "requests":
        message, kind = f"{int(check.limit)} requests per minute", "requests"
    elif check.kind == "tokens":
        message, kind = f"{int(check.limit)} tokens per minute", "tokens"
    elif check.kind == "concurrent":
        message, kind = f"{int(check.limit)} requests at once", "requests"
    else:
        assert rule.budget is not None
        return RateLimited(
            f"budget reached: limit rule '{check.rule}' allows ${rule.budget.usd:g} per {rule.budget.period}; "
            f"it opens again in {duration(outcome.retry_after)}",
            rule=check.rule, reason="budget", headers=headers, type="insufficient_quota", code="insufficient_quota",
        )
    return RateLimited(f"rate limit reached: limit rule '{check.rule}' allows {message}; try again in {duration(outcome.retry_after)}",
                       rule=check.rule, reason=check.kind, headers=headers, type=kind)


@dataclass
class Admission:
    """One admitted request's hold on the counters: its `headers` (`x-ratelimit-*`) and what its
    `end` charges and frees. `end` runs once, whatever calls it again."""

    headers: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    holder: str = ""
    model: str = ""
    limits: "Limits | None" = None
    ended: bool = False

    async def end(self, prompt_tokens: int, completion_tokens: int, deployment: str | None = None) -> None:
        """Charge the request's tokens and spend and free its concurrency slots. `deployment`
        ("upstream/model", when a route has deployments) prices by its model; else the route's."""
        if self.ended or self.limits is None:
            return
        self.ended = True
        model = deployment.split("/", 1)[-1] if deployment else self.model
        await self.limits.settle(self, prompt_tokens, completion_tokens, model)

    async def end_of(self, record: RequestRecord) -> None:
        """`end` with what `record` counted: the summed usage and, when the route has deployments,
        the one that answered (`record.deployment`)."""
        if not self.ended:
            await self.end(record.prompt_tokens, record.completion_tokens, record.deployment)

    def end_soon(self, record: RequestRecord) -> None:
        """`end_of(record)` in a task of its own, so a JSON answer goes out without waiting for it
        (`Limits.close` waits for what is pending)."""
        if self.ended or self.limits is None:
            return
        if not any(c.kind != "requests" for c in self.checks):
            self.ended = True  # requests per minute only: nothing to charge or free
            return
        self.limits.in_background(self.end_of(record))


UNLIMITED = Admission(ended=True)
"""The admission of every request when no `limits:` are configured (nothing to charge or free)."""


class Limits:
    """The gateway's limits: `config` None means none (every request passes, nothing is counted)."""

    def __init__(self, config: LimitsConfig | None, counters: Counters | None, registry: CollectorRegistry,
                 hold_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.counters = counters
        self.hold_seconds = hold_seconds
        self.clock = clock
        self._rules = {rule.label: rule for rule in config.rules} if config else {}
        self._last_logged = -math.inf
        self._pending: set[asyncio.Task[None]] = set()
        self.limited = metric(registry, Counter, "toolgate_requests_limited",
                              "Requests refused for a limit of `limits:` by rule and reason (requests, tokens, concurrent, budget)",
                              ["rule", "reason"])
        self.redis_errors = metric(registry, Counter, "toolgate_limits_redis_errors",
                                   "Calls to the limits' Redis that failed, by operation (admit, settle)", ["operation"])

    async def start(self) -> None:
        """Say at start-up how limits are counted: per replica without Redis; whether Redis answers."""
        if self.config is None or self.counters is None:
            return
        if not self.counters.shared:
            log.warning("limits: no limits.redis configured: counters are per replica (each replica admits up to each limit on its own)")
            return
        try:
            await self.counters.ping()
        except CountersError as exc:
            log.warning("limits: %s; requests %s until it answers", exc,
                        "pass unlimited" if self.config.on_redis_error == "open" else "are refused (503)")

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (a settlement) as a task, held until it ends so it is neither collected nor lost at shutdown."""
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def close(self) -> None:
        """Wait (at most 5 s) for pending settlements, then close the counters."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=5)
        if self.counters is not None:
            await self.counters.close()

    async def admit(self, identity: Identity, route: str, model: str) -> Admission:
        """Admit one request to `route` (upstream `model`, for prices) or raise `RateLimited` (429)
        or, with `on_redis_error: closed` and the counters failing, `Unavailable` (503)."""
        if self.config is None or self.counters is None:
            return UNLIMITED
        checks = checks_for(self.config.rules, identity, route, self.clock(), self.config.key_prefix, self.hold_seconds)
        if not checks:
            return UNLIMITED
        holder = uuid.uuid4().hex if any(c.kind == "concurrent" for c in checks) else ""
        try:
            outcomes = await self.counters.admit(checks, holder)
        except CountersError as exc:
            self.failed("admit", exc)
            if self.config.on_redis_error == "closed":
                self._free(checks, holder)
                raise Unavailable(f"rate limits cannot be checked ({exc}) and limits.on_redis_error is 'closed'",
                                  code="limits_unavailable") from None
            # a call that timed out may still have taken its slots in Redis: the end frees them (a no-op if not)
            return Admission(checks=[c for c in checks if c.kind != "requests"], holder=holder, model=model, limits=self)
        except BaseException:  # cancelled (the client left) after Redis may have taken the slots
            self._free(checks, holder)
            raise
        refused = refusal(checks, outcomes, self._rules)
        if refused is not None:
            self.limited.labels(refused.rule, refused.reason).inc()
            raise refused
        return Admission(rate_headers(list(zip(checks, outcomes))), checks, holder, model, self)

    def _free(self, checks: Sequence[Check], holder: str) -> None:
        """Free the concurrency slots an admission that never completed may have taken (a no-op where it took none)."""
        releases = [c for c in checks if c.kind == "concurrent"]
        if releases and self.counters is not None:
            self.in_background(self._release(releases, holder))

    async def _release(self, releases: list[Check], holder: str) -> None:
        assert self.counters is not None
        try:
            await self.counters.settle([], releases, holder)
        except CountersError as exc:
            self.failed("settle", exc)

    async def settle(self, admission: Admission, prompt_tokens: int, completion_tokens: int, model: str) -> None:
        """Charge a finished request (see `Admission.end`); a failure is counted and logged, never raised."""
        assert self.config is not None and self.counters is not None
        tokens = prompt_tokens + completion_tokens
        price = self.config.prices.get(model)
        cost = spend_usd(prompt_tokens, completion_tokens, price.input_per_million, price.output_per_million) if price else 0.0
        charges: list[Charge] = []
        for check in admission.checks:
            if check.kind == "tokens" and tokens:
                charges.append(Charge(check, tokens))
            elif check.kind == "budget" and cost:
                charges.append(Charge(check, cost))
        releases = [c for c in admission.checks if c.kind == "concurrent"]
        if not charges and not releases:
            return
        try:
            await self.counters.settle(charges, releases, admission.holder)
        except CountersError as exc:
            self.failed("settle", exc)

    def failed(self, operation: str, exc: CountersError) -> None:
        """Count a failed call to the counters (`admit` or `settle`) and log it, at most once per `LOG_EVERY_SECONDS`."""
        self.redis_errors.labels(operation).inc()
        now = time.monotonic()
        if now - self._last_logged >= LOG_EVERY_SECONDS:
            self._last_logged = now
            assert self.config is not None
            log.warning("limits: %s failed: %s (limits.on_redis_error: %s)", operation, exc, self.config.on_redis_error)


def build_limits(config: LimitsConfig | None, base_dir: Path, secrets: SecretSet, registry: CollectorRegistry,
                 hold_seconds: float) -> Limits:
    """The gateway's `Limits` from `limits:` (secrets resolved here, at start-up): Redis counters
    when `limits.redis` is set, else this process's own."""
    counters: Counters | None = None
    if config is not None:
        if config.redis is not None:
            from gateway.limits.redis_counters import RedisCounters

            password = resolve_secret(config.password, base_dir, secrets) if config.password else None
            redis = RedisCounters(config.redis, password=password, username=config.username,
                                  timeout=config.timeout_seconds, connections=config.connections)
            shared: Counters = redis
            if config.lease_share > 0 or config.stale_seconds > 0:
                from gateway.limits.leases import LeasingCounters

                shared = LeasingCounters(redis, lease_share=config.lease_share, stale_seconds=config.stale_seconds)
            limits = Limits(config, shared, registry, hold_seconds)
            redis.on_error = lambda exc: limits.failed("settle", exc)  # a queued settlement lost
            return limits
        counters = MemoryCounters()
    return Limits(config, counters, registry, hold_seconds)


