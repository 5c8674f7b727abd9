"""The pure parts of rate limits and budgets (O2): GCRA arithmetic, budget periods, the
`x-ratelimit-*` headers, which checks a request is held to, the in-process counters on a clock the
test moves, and the `limits:` config's errors with their paths (start-up and `toolgate check`)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import ConfigError, parse_config
from gateway.identity import Identity
from gateway.limits.buckets import Check, Outcome, duration, gcra_charge, gcra_check, gcra_take, period_window, rate_headers, spend_usd
from gateway.limits.config import LimitRule
from gateway.limits.counters import Charge, MemoryCounters
from gateway.limits.gate import checks_for, refusal
from tests.support.config_files import place, write


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_gcra_admits_a_burst_of_the_limit_then_one_per_interval() -> None:
    # R: O2
    tat, now, taken = 0.0, 100.0, []
    for _ in range(4):
        outcome, tat = gcra_take(tat, now, limit=3, period=60)
        taken.append(outcome)
    assert [o.allowed for o in taken] == [True, True, True, False]
    assert [o.remaining for o in taken[:3]] == [2, 1, 0]
    assert taken[3] == Outcome(False, 0, 60.0, 20.0)  # full again in 60 s; one frees in 20 s
    assert tat == 160.0  # the refusal took nothing
    assert gcra_take(tat, now + 20, limit=3, period=60)[0].allowed


def test_tokens_are_charged_after_and_checked_before_the_next_request() -> None:
    # R: O2
    tat = gcra_charge(0.0, 100.0, limit=20, period=60, cost=15)
    assert tat == 145.0
    assert gcra_check(tat, 100.0, limit=20, period=60) == Outcome(True, 5, 45.0)
    tat = gcra_charge(tat, 100.0, limit=20, period=60, cost=15)  # 30 of 20: over, never refused after the fact
    assert gcra_check(tat, 100.0, limit=20, period=60) == Outcome(False, 0, 90.0, 33.0)
    assert gcra_check(tat, 133.0, limit=20, period=60).allowed


def test_budget_periods_are_utc_calendar_hours_days_and_months() -> None:
    # R: O2
    at = datetime(2026, 2, 14, 13, 45, 30, tzinfo=timezone.utc).timestamp()
    assert period_window("hour", at) == ("2026-02-14T13", datetime(2026, 2, 14, 14, tzinfo=timezone.utc).timestamp())
    assert period_window("day", at) == ("2026-02-14", datetime(2026, 2, 15, tzinfo=timezone.utc).timestamp())
    assert period_window("month", at) == ("2026-02", datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp())
    assert spend_usd(10, 5, 100, 200) == pytest.approx(0.002)


def test_reset_times_are_written_as_openai_writes_them() -> None:
    # R: O2
    assert [duration(s) for s in (0.02, 1, 1.5, 60, 360, 3723)] == ["20ms", "1s", "1.5s", "1m0s", "6m0s", "1h2m3s"]


def test_headers_report_the_tightest_requests_and_tokens_rules() -> None:
    # R: O2
    wide = Check("requests", "org", "k1", 100, 60)
    tight = Check("requests", "user", "k2", 5, 60)
    tokens = Check("tokens", "user", "k3", 1000, 60)
    budget = Check("budget", "org", "k4", 10, 3600)
    headers = rate_headers([(wide, Outcome(True, 90, 6)), (tight, Outcome(True, 1, 48)), (tokens, Outcome(True, 400, 36)),
                            (budget, Outcome(True, 3, 3600))])
    assert headers == {
        "x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": "48s",
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400", "x-ratelimit-reset-tokens": "36s",
    }


def test_a_request_is_held_to_every_rule_that_applies_by_its_subject_never_the_key_itself() -> None:
    # R: O2
    rules = [LimitRule(per="key", requests_per_minute=10), LimitRule(per="user", route="other", concurrent=2),
             LimitRule(per="org", budget={"usd": 5, "period": "day"}), LimitRule(per="route", tokens_per_minute=1000)]
    caller = Identity(user_id="alice", org_id="acme", credential_fp="ab" * 32)
    now = datetime(2026, 2, 14, 12, tzinfo=timezone.utc).timestamp()
    checks = checks_for(rules, caller, "assistant", now, "p:", hold_seconds=660)
    assert checks == [
        Check("requests", "key", f"p:rpm:key:{'ab' * 32}", 10, 60.0),
        Check("budget", "org", "p:spend:org:acme:2026-02-14", 5, 43200.0),
        Check("tokens", "route", "p:tpm:route:assistant", 1000, 60.0),
    ]
    anonymous = checks_for(rules, Identity(), "other", now, "p:", hold_seconds=660)
    assert [c.key for c in anonymous] == ["p:rpm:key:-", "p:inflight:user@other:-", "p:spend:org:-:2026-02-14", "p:tpm:route:other"]


def test_a_refusal_names_the_rule_that_makes_the_client_wait_longest() -> None:
    # R: O2
    rules = {r.label: r for r in [LimitRule(per="user", requests_per_minute=3), LimitRule(per="org", budget={"usd": 1})]}
    checks = [Check("requests", "user", "a", 3, 60), Check("budget", "org", "b", 1, 7200)]
    assert refusal(checks, [Outcome(True, 2, 20), Outcome(True, 0.5, 7200)], rules) is None
    refused = refusal(checks, [Outcome(False, 0, 60, 19.2), Outcome(False, 0, 7200, 7200)], rules)
    assert refused is not None
    assert (refused.status, refused.type, refused.code, refused.rule, refused.reason) == (
        429, "insufficient_quota", "insufficient_quota", "org", "budget")
    assert refused.message == "budget reached: limit rule 'org' allows $1 per day; it opens again in 2h0m0s"
    assert refused.headers == {"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "0",
                               "x-ratelimit-reset-requests": "1m0s", "retry-after": "7200"}


def test_memory_counters_admit_all_or_nothing_and_settle_charges_and_slots() -> None:
    # R: O2
    clock = Clock()
    counters = MemoryCounters(clock=clock)
    rpm = Check("requests", "r", "rpm", 2, 60)
    slot = Check("concurrent", "c", "slot", 1, 600)
    budget = Check("budget", "b", "spend", 1.0, 3600)

    async def scenario() -> list[list[bool]]:
        seen = [[o.allowed for o in await counters.admit([rpm, slot, budget], "one")]]
        seen.append([o.allowed for o in await counters.admit([rpm, slot, budget], "two")])  # the slot is held
        await counters.settle([Charge(budget, 1.5)], [slot], "one")
        seen.append([o.allowed for o in await counters.admit([rpm, slot, budget], "three")])  # spent
        clock.now += 3600  # a new budget period
        seen.append([o.allowed for o in await counters.admit([rpm, slot, budget], "four")])
        return seen

    assert asyncio.run(scenario()) == [[True, True, True], [True, False, True], [True, True, False], [True, True, True]]
    assert counters._tat["rpm"] == clock.now + 30  # "two" and "three" took no request: one at t0, one now


def test_a_concurrency_slot_lapses_after_its_hold_time() -> None:
    # R: O2 -- a replica that died holding a slot frees it eventually
    clock = Clock()
    counters = MemoryCounters(clock=clock)
    slot = Check("concurrent", "c", "slot", 1, 600)

    async def scenario() -> list[bool]:
        first = (await counters.admit([slot], "lost"))[0].allowed
        second = (await counters.admit([slot], "next"))[0].allowed
        clock.now += 600
        return [first, second, (await counters.admit([slot], "later"))[0].allowed]

    assert asyncio.run(scenario()) == [True, False, True]


BASE = {"upstreams": [{"name": "u", "kind": "inspect"}], "routes": [{"model": "m", "upstream": "u", "upstream_model": "gpt-x"}]}


@pytest.mark.parametrize(("limits", "problem"), [
    ({"rules": []}, "limits.rules: List should have at least 1 item after validation, not 0"),
    ({"rules": [{"per": "user"}]},
     "limits.rules[#1]: a rule needs at least one of requests_per_minute, tokens_per_minute, concurrent or budget"),
    ({"rules": [{"per": "team", "concurrent": 1}]}, "limits.rules[#1].per: Input should be 'key', 'user', 'org' or 'route'"),
    ({"rules": [{"per": "user", "requests_per_minute": 0}]}, "limits.rules[#1].requests_per_minute: Input should be greater than or equal to 1"),
    ({"rules": [{"per": "user", "budget": {"usd": 5, "period": "week"}}], "prices": {"gpt-x": {"input_per_million": 1, "output_per_million": 2}}},
     "limits.rules[#1].budget.period: Input should be 'hour', 'day' or 'month'"),
    ({"redis": "redis://:hunter2@127.0.0.1:6379/0", "rules": [{"per": "user", "concurrent": 1}]},
     "limits.redis: holds a password: give it as limits.password (an env:/file: reference) instead"),
    ({"redis": "http://127.0.0.1:6379", "rules": [{"per": "user", "concurrent": 1}]},
     "limits.redis: must be redis://host:port/db or rediss://host:port/db"),
    ({"on_redis_error": "maybe", "rules": [{"per": "user", "concurrent": 1}]}, "limits.on_redis_error: Input should be 'open' or 'closed'"),
    ({"rules": [{"per": "user", "concurrent": 1}, {"per": "user", "requests_per_minute": 3}]},
     "limits: rules ['user'] share a name: give each rule its own 'name'"),
    ({"rules": [{"per": "user", "route": "nope", "concurrent": 1}]},
     "limits.rules[#1].route: names route 'nope', which is not defined in 'routes'"),
    ({"rules": [{"per": "org", "budget": {"usd": 5}}]},
     "limits.rules[#1].budget: route 'm' calls upstream model 'gpt-x', which has no entry in limits.prices"),
    ({"rules": [{"per": "key", "requests_per_minute": 5}]},  # BASE has no auth: every bearer string is accepted
     "limits.rules[#1].per: with auth.mode none every bearer string is accepted, so a per-key rule would count whatever "
     "string a caller sends (a new one each time is never limited): use per: route, or turn authentication on"),
])
def test_an_invalid_limits_section_stops_start_up_naming_the_key(limits: dict, problem: str) -> None:
    # R: O2
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, "limits": limits}, "cfg")
    assert caught.value.problems == [f"cfg: {problem}"]


def test_check_reports_a_limits_problem_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: O2
    path = write(tmp_path, """
upstreams: [{name: u, kind: inspect}]
routes: [{model: m, upstream: u}]
limits:
  redis: redis://127.0.0.1:6379/0
  password: env:TG_TEST_UNSET_REDIS_PASSWORD
  rules:
    - {per: user, requests_per_minute: -1}
""")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{place(path, 'requests_per_minute')}: limits.rules[#1].requests_per_minute: Input should be greater than or equal to 1",
        f"{place(path, 'password')}: limits.password: environment variable TG_TEST_UNSET_REDIS_PASSWORD is not set"
        " (from env:TG_TEST_UNSET_REDIS_PASSWORD)",
    ]


def test_a_budget_on_a_route_with_deployments_needs_a_price_for_each_model() -> None:
    # R: O2
    from gateway.limits.config import reference_problems

    data = {"routes": [{"model": "m", "deployments": [{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "y"}]}],
            "limits": {"rules": [{"per": "user", "budget": {"usd": 1}}], "prices": {"x": {"input_per_million": 1, "output_per_million": 1}}}}
    assert reference_problems(data) == [("limits.rules.0.budget", "route 'm' calls upstream model 'y', which has no entry in limits.prices")]
