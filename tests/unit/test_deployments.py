"""The decisions behind a route's deployments (O1): the breaker fed a clock, the weighted pick,
the routing config and its checks (integration: tests/integration/test_deployments.py)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from gateway.config import ConfigError, fallback_order, parse_config
from gateway.errors import ContextWindowExceeded, UpstreamBadRequest, UpstreamRateLimited
from gateway.upstream.base import error_for_status, retry_after_seconds
from gateway.upstream.breaker import Breaker, pick, soonest
from gateway.upstream.deployments import Deployment, Deployments, Pool


def draws(*values: float):  # type: ignore[no-untyped-def]
    """A random source that returns `values` in turn, forever."""
    return itertools.cycle(values).__next__


def test_a_closed_breaker_admits_every_call_and_one_failure_does_not_open_it() -> None:
    # R: O1
    breaker = Breaker(failures=3, cooldown_seconds=30)
    breaker.failed(now=0)
    breaker.failed(now=1)
    assert breaker.available(2) is True
    assert (breaker.failed_in_a_row, breaker.open_until) == (2, None)


def test_failures_in_a_row_open_the_breaker_for_the_cooldown_then_one_probe_is_admitted() -> None:
    # R: O1
    breaker = Breaker(failures=3, cooldown_seconds=30)
    for t in (0, 1, 2):
        breaker.failed(now=t)
    assert breaker.open_until == 32
    assert [breaker.available(t) for t in (2, 31.9, 32)] == [False, False, True]
    breaker.admit(now=32)  # the probe
    assert breaker.probing is True
    assert breaker.available(33) is False  # no second call while the probe runs
    breaker.succeeded()
    assert (breaker.available(33), breaker.failed_in_a_row, breaker.open_until) == (True, 0, None)


def test_a_failed_probe_cools_the_deployment_down_again() -> None:
    # R: O1
    breaker = Breaker(failures=2, cooldown_seconds=10)
    breaker.failed(now=0)
    breaker.failed(now=0)
    breaker.admit(now=10)
    breaker.failed(now=11)
    assert (breaker.open_until, breaker.probing, breaker.available(20), breaker.available(21)) == (21, False, False, True)


def test_a_success_between_failures_resets_the_count() -> None:
    # R: O1
    breaker = Breaker(failures=2, cooldown_seconds=10)
    breaker.failed(now=0)
    breaker.succeeded()
    breaker.failed(now=1)
    assert breaker.available(1) is True


def test_a_429_with_retry_after_cools_down_at_once_for_the_longer_of_the_two() -> None:
    # R: O1
    short, long = Breaker(failures=5, cooldown_seconds=30), Breaker(failures=5, cooldown_seconds=30)
    short.failed(now=100, retry_after=2)
    long.failed(now=100, retry_after=90)
    assert (short.open_until, long.open_until) == (130, 190)


def test_a_probe_abandoned_by_a_client_that_left_frees_the_slot() -> None:
    # R: O1
    breaker = Breaker(failures=1, cooldown_seconds=5)
    breaker.failed(now=0)
    breaker.admit(now=5)
    breaker.abandoned()
    assert breaker.available(5) is True


def test_pick_spreads_draws_over_the_eligible_entries_by_weight() -> None:
    # R: O1
    random = draws(0.0, 0.25, 0.5, 0.74, 0.76, 0.99)
    picks = [pick([3, 1], [True, True], random) for _ in range(6)]
    assert picks == [0, 0, 0, 0, 1, 1]


def test_pick_skips_entries_that_are_not_eligible_and_gives_none_when_none_is() -> None:
    # R: O1
    assert [pick([5, 1, 2], [False, True, True], draws(v)) for v in (0.0, 0.34, 0.99)] == [1, 2, 2]
    assert pick([1, 1], [False, False], draws(0.5)) is None


def test_soonest_is_the_cooling_entry_back_first() -> None:
    # R: O1
    a, b = Breaker(open_until=50), Breaker(open_until=20)
    assert soonest([a, b], [True, True]) == 1
    assert soonest([a, b], [True, False]) == 0
    assert soonest([a, b], [False, False]) is None


def test_an_upstream_400_about_the_context_window_is_its_own_error() -> None:
    # R: O1, G5
    openai_body = b'{"error": {"message": "This model\'s maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}'
    vllm_body = b'{"message": "prompt is too long: 9000 tokens > 8192", "type": "BadRequestError"}'
    other = b'{"error": {"message": "temperature must be at most 2"}}'
    assert type(error_for_status("u", 400, openai_body)) is ContextWindowExceeded
    assert type(error_for_status("u", 400, vllm_body)) is ContextWindowExceeded
    assert type(error_for_status("u", 400, other)) is UpstreamBadRequest
    assert error_for_status("u", 400, openai_body).status == 400


def test_a_429_carries_the_upstreams_retry_after_in_seconds() -> None:
    # R: O1, G5
    error = error_for_status("u", 429, b"{}", "12")
    assert isinstance(error, UpstreamRateLimited) and error.retry_after == 12
    assert [retry_after_seconds(v) for v in (None, "Wed, 21 Oct 2015 07:28:00 GMT", "-1", "0.5")] == [None, None, None, 0.5]


def base(**route: object) -> dict[str, object]:
    return {
        "upstreams": [{"name": "a", "kind": "inspect"}, {"name": "b", "kind": "inspect"}],
        "routes": [{"model": "m", **route}],
    }


def test_the_single_upstream_form_is_one_deployment_of_weight_one() -> None:
    # R: O1
    route = parse_config(base(upstream="a", upstream_model="x")).routes[0]
    assert [(d.upstream, d.model, d.weight, d.timeout_seconds) for d in route.deployment_list()] == [("a", "x", 1, None)]
    assert (route.retries, route.retry_after_tool_calls, route.fallbacks) == (2, False, [])


def test_a_route_lists_deployments_with_weights_and_timeouts() -> None:
    # R: O1
    route = parse_config(base(deployments=[{"upstream": "a", "model": "x", "weight": 3},
                                           {"upstream": "b", "model": "y", "timeout_seconds": 5}])).routes[0]
    assert [(d.upstream, d.model, d.weight, d.timeout_seconds) for d in route.deployment_list()] == [("a", "x", 3, None), ("b", "y", 1, 5)]


def problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "c.yaml", Path("."))
    return caught.value.problems


def test_a_route_with_both_forms_or_neither_is_refused_with_its_path() -> None:
    # R: O1
    both = problems(base(upstream="a", deployments=[{"upstream": "b", "model": "y"}]))
    neither = problems(base())
    assert both == ["c.yaml: routes[m]: give either 'upstream' (one upstream) or 'deployments' (a list), not both and not neither"]
    assert neither == both


def test_a_deployment_naming_an_unknown_upstream_is_refused_with_its_path() -> None:
    # R: O1
    found = problems(base(deployments=[{"upstream": "a", "model": "x"}, {"upstream": "nope", "model": "y"}]))
    assert found == ["c.yaml: routes[m].deployments[#2].upstream: names upstream 'nope', which is not defined in 'upstreams'"]


def test_bad_deployment_values_are_refused_with_their_paths() -> None:
    # R: O1
    found = problems(base(deployments=[{"upstream": "a", "model": "x", "weight": 0, "timeout_seconds": -1}], retries=-1))
    assert [p.split(":")[1].strip() for p in found] == ["routes[m].deployments[#1].weight", "routes[m].deployments[#1].timeout_seconds", "routes[m].retries"]


def test_fallbacks_naming_unknown_routes_or_forming_a_cycle_are_refused() -> None:
    # R: O1
    data = {
        "upstreams": [{"name": "a", "kind": "inspect"}],
        "routes": [
            {"model": "big", "upstream": "a", "fallbacks": ["small", "ghost"]},
            {"model": "small", "upstream": "a", "fallbacks": ["tiny"]},
            {"model": "tiny", "upstream": "a", "fallbacks": ["big"]},
        ],
    }
    assert problems(data) == [
        "c.yaml: routes[big].fallbacks[#2]: names route 'ghost', which is not defined in 'routes'",
        "c.yaml: routes[big].fallbacks: fallbacks lead back to this route: big -> small -> tiny -> big",
        "c.yaml: routes[small].fallbacks: fallbacks lead back to this route: small -> tiny -> big -> small",
        "c.yaml: routes[tiny].fallbacks: fallbacks lead back to this route: tiny -> big -> small -> tiny",
    ]


def test_fallbacks_are_tried_depth_first_each_route_once() -> None:
    # R: O1
    routes = {"big": ["mid", "small"], "mid": ["small", "tiny"], "small": [], "tiny": []}
    assert fallback_order("big", routes) == ["mid", "small", "tiny"]
    assert fallback_order("small", routes) == []


class _RefusesMidStream:
    """An upstream whose stream sends one batch, then a request fault (not a deployment's failure)."""

    name = "a"

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not called")

    def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        yield [{"choices": []}]
        raise UpstreamBadRequest("upstream 'a' rejected the request (HTTP 400): scripted", status=400)

    async def aclose(self) -> None:
        pass


async def test_a_probe_stream_ending_in_a_request_fault_frees_the_probe_slot() -> None:
    # R: O1
    breaker = Breaker(failures=1, cooldown_seconds=5)
    breaker.failed(now=0)
    pool = Pool("assistant", [Deployment(_RefusesMidStream(), "model-a", breaker=breaker)])  # type: ignore[arg-type]
    routed = Deployments(pool, Counter("calls", "calls", ["upstream", "deployment", "outcome"], registry=CollectorRegistry()),
                         random=draws(0.0), clock=lambda: 5.0)
    with pytest.raises(UpstreamBadRequest):
        async for _ in routed.stream({"model": "assistant"}):
            pass
    assert (breaker.probing, breaker.available(6)) == (False, True)


class _Endless:
    """An upstream whose stream never ends; `closed` is set once the stream is closed."""

    def __init__(self) -> None:
        self.closed = False

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not called")

    def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        try:
            while True:
                yield [{"choices": []}]
        finally:
            self.closed = True

    async def aclose(self) -> None:
        pass


async def test_closing_a_routed_stream_closes_the_upstream_stream_before_it_returns() -> None:
    # R: O1 -- the client left: the upstream stream is closed by the close itself, not later by the garbage collector
    upstream = _Endless()
    breaker = Breaker(failures=1, cooldown_seconds=5)
    pool = Pool("assistant", [Deployment(upstream, "model-a", breaker=breaker)])  # type: ignore[arg-type]
    routed = Deployments(pool, Counter("calls", "calls", ["upstream", "deployment", "outcome"], registry=CollectorRegistry()),
                         random=draws(0.0), clock=lambda: 5.0)
    stream = routed.stream({"model": "assistant"})
    await anext(stream)
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert upstream.closed
