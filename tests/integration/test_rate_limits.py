"""Rate limits and budgets (O2) on real gateways, the machine's real Redis (each test under its own
key prefix, deleted after) and the scripted upstream; the multi-replica test runs two `toolgate
serve` processes behind the real HAProxy with deploy/haproxy.cfg."""

from __future__ import annotations

import asyncio
import json
import selectors
import socket
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx2
import pytest
from prometheus_client import CollectorRegistry

from bench.loadkit import Gateway as ServeProcess
from gateway.errors import Unavailable
from gateway.identity import Identity
from gateway.limits.buckets import Check
from gateway.limits.config import LimitsConfig
from gateway.limits.counters import Charge, CountersError
from gateway.limits.gate import Limits, build_limits
from gateway.limits.redis_counters import RedisCounters
from gateway.secrets import SecretSet
from tests.support import canary, haproxy
from tests.support import redis as redis_support
from tests.support.faults import free_port, metric
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.logs import captured_logs
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
KEYS = {  # key → (user, org); every value holds the canary, so a key that leaks fails the test
    "k1": ("alice", "acme"), "k2": ("alice", "acme"), "k3": ("bob", "acme"), "k4": ("carol", "globex"),
}


def key_value(name: str) -> str:
    return f"{canary.CANARY}-limits-{name}"


def body(api: str, model: str = "assistant", stream: bool = False) -> dict[str, Any]:
    if api == "responses":
        return {"model": model, "input": "hello", "stream": stream}
    found: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    if api == "messages":
        found["max_tokens"] = 16
    return found


def post(gw: ServerThread | str, api: str = "chat", key: str | None = None, model: str = "assistant",
         stream: bool = False, **headers: str) -> httpx2.Response:
    url = gw if isinstance(gw, str) else gw.url
    if key is not None:
        headers["authorization"] = f"Bearer {key_value(key)}"
    return httpx2.post(url + PATHS[api], json=body(api, model, stream), headers=headers, timeout=30)


@pytest.fixture
def prefix() -> Iterator[str]:
    redis_support.require()
    found = redis_support.prefix()
    yield found
    redis_support.clean(found)


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, ServerThread]]:
    scripted = ScriptedUpstream()
    with serve(scripted.app) as server:
        yield scripted, server
    scripted.release.set()


def limited(upstream_url: str, rules: list[dict[str, Any]], prefix: str, *, keys: bool = False,
            redis: str | None = redis_support.URL, **limits: Any) -> dict[str, Any]:
    """The scripted route `assistant` (and `other`) with `limits.rules`; with `keys`, auth by the four API keys of KEYS."""
    config = simple_config(upstream_url)
    config["routes"].append({**config["routes"][0], "model": "other"})
    config["limits"] = {"key_prefix": prefix, "rules": rules, **limits}
    if redis is not None:
        config["limits"]["redis"] = redis
    if keys:
        config["auth"] = {"mode": "api_keys", "api_keys": [
            {"key": f"env:TOOLGATE_TEST_LIMITS_{name.upper()}", "user_id": user, "org_id": org} for name, (user, org) in KEYS.items()
        ]}
    return config


@pytest.fixture(autouse=True)
def key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        monkeypatch.setenv(f"TOOLGATE_TEST_LIMITS_{name.upper()}", key_value(name))


def rate_headers(response: httpx2.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("x-ratelimit-") or k == "retry-after"}


def test_n_requests_a_minute_are_admitted_then_each_api_gets_its_own_429_with_retry_after(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    with running_gateway(limited(server.url, [{"per": "route", "requests_per_minute": 3}], prefix)) as gw:
        admitted = [post(gw, api) for api in ("chat", "responses", "messages")]
        refused = {api: post(gw, api) for api in PATHS}

        assert [r.status_code for r in admitted] == [200, 200, 200]
        assert [r.headers["x-ratelimit-remaining-requests"] for r in admitted] == ["2", "1", "0"]
        assert {r.headers["x-ratelimit-limit-requests"] for r in admitted} == {"3"}
        assert len(scripted.requests) == 3  # refused before the upstream was called
        for api, response in refused.items():
            assert response.status_code == 429, (api, response.text)
            headers = rate_headers(response)
            assert headers["x-ratelimit-limit-requests"] == "3" and headers["x-ratelimit-remaining-requests"] == "0"
            assert 1 <= int(headers["retry-after"]) <= 20  # one request frees every 60/3 s
            assert headers["x-ratelimit-reset-requests"].endswith("s")
        message = "rate limit reached: limit rule 'route' allows 3 requests per minute; try again in "
        for api in ("chat", "responses"):
            error = refused[api].json()["error"]
            assert (error["type"], error["code"], error["param"]) == ("requests", "rate_limit_exceeded", None)
            assert error["message"].startswith(message)
        anthropic = refused["messages"].json()
        assert anthropic["type"] == "error" and anthropic["error"]["type"] == "rate_limit_error"
        assert anthropic["error"]["message"].startswith(message)
        assert metric(gw.url, "toolgate_requests_limited_total", rule="route", reason="requests") == 3
        assert redis_support.keys(prefix) == [f"{prefix}rpm:route:assistant"]


def test_tokens_a_minute_are_charged_from_usage_when_a_request_ends_streams_included(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream  # every answer uses 10 + 5 tokens
    with running_gateway(limited(server.url, [{"per": "user", "tokens_per_minute": 20}], prefix)) as gw:
        first = post(gw, stream=True)
        assert first.status_code == 200 and first.headers["x-ratelimit-remaining-tokens"] == "20"
        assert "[DONE]" in first.text
        # the stream's cleanup charged its 15 tokens: 5 are left
        assert wait_until(lambda: post(gw, "responses").headers.get("x-ratelimit-remaining-tokens") == "5", timeout=10)
        refused = post(gw, "messages")  # 30 of 20 used

        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert "allows 20 tokens per minute" in refused.json()["error"]["message"]
        assert rate_headers(refused)["x-ratelimit-limit-tokens"] == "20"
        assert rate_headers(refused)["x-ratelimit-remaining-tokens"] == "0"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert metric(gw.url, "toolgate_requests_limited_total", rule="user", reason="tokens") == 1


def test_a_budget_closes_once_usage_times_prices_reaches_it_until_the_period_ends(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    # 10 prompt × $100/M + 5 completion × $200/M = $0.002 a request; $0.003 a day admits two
    prices = {"scripted-model": {"input_per_million": 100, "output_per_million": 200}}
    rules = [{"per": "org", "budget": {"usd": 0.003, "period": "day"}}]
    with running_gateway(limited(server.url, rules, prefix, keys=True, prices=prices)) as gw:
        statuses = [post(gw, key="k1").status_code, post(gw, key="k3").status_code]
        acme = f"{prefix}spend:org:acme:{datetime.now(timezone.utc):%Y-%m-%d}"
        # a charge reaches Redis with the replica's next admission, or alone within 5 ms
        assert wait_until(lambda: float(redis_support.value(acme) or 0) >= 0.004 - 1e-9, timeout=10)
        refused = post(gw, key="k2")  # acme spent $0.004
        other_org = post(gw, key="k4")

        assert statuses == [200, 200] and other_org.status_code == 200
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota")
        assert error["message"].startswith("budget reached: limit rule 'org' allows $0.003 per day; it opens again in ")
        now = datetime.now(timezone.utc)
        to_midnight = 86400 - (now.hour * 3600 + now.minute * 60 + now.second)
        assert abs(int(refused.headers["retry-after"]) - to_midnight) <= 5
        spend = [f"{prefix}spend:org:acme:{now:%Y-%m-%d}", f"{prefix}spend:org:globex:{now:%Y-%m-%d}"]
        assert wait_until(lambda: [k for k in redis_support.keys(prefix) if ":spend:" in k] == spend, timeout=10)
        assert metric(gw.url, "toolgate_requests_limited_total", rule="org", reason="budget") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_over_the_concurrency_limit_is_refused_until_one_in_flight_ends(upstream, prefix, stream) -> None:
    # R: O2
    scripted, server = upstream
    scripted.push(Reply(content="held answer", hang_stream_after=2) if stream else Reply(content="held", hang=True))
    with running_gateway(limited(server.url, [{"per": "key", "concurrent": 1}], prefix, keys=True)) as gw:
        held: list[httpx2.Response] = []
        thread = threading.Thread(target=lambda: held.append(post(gw, key="k1", stream=stream)))
        thread.start()
        try:
            assert wait_until(lambda: len(scripted.requests) == 1, timeout=10)
            refused = post(gw, key="k1")
            other_key = post(gw, key="k2")  # each key has its own slot
        finally:
            scripted.release.set()
            thread.join(30)
        in_flight = f"{prefix}inflight:key:"
        assert wait_until(lambda: not [k for k in redis_support.keys(prefix) if k.startswith(in_flight)], timeout=10)
        again = post(gw, key="k1")

        assert refused.status_code == 429 and refused.json()["error"]["message"].startswith(
            "rate limit reached: limit rule 'key' allows 1 requests at once")
        assert refused.headers["retry-after"] == "1"
        assert other_key.status_code == 200 and held[0].status_code == 200 and again.status_code == 200
        assert metric(gw.url, "toolgate_requests_limited_total", rule="key", reason="concurrent") == 1


@pytest.mark.parametrize(("per", "first", "refused", "admitted"), [
    ("key", ("k1", "assistant"), ("k1", "assistant"), ("k2", "assistant")),
    ("user", ("k1", "assistant"), ("k2", "assistant"), ("k3", "assistant")),
    ("org", ("k1", "assistant"), ("k3", "assistant"), ("k4", "assistant")),
    ("route", ("k1", "assistant"), ("k4", "assistant"), ("k4", "other")),
])
def test_each_rule_counts_its_own_subject(upstream, prefix, per, first, refused, admitted) -> None:
    # R: O2 -- k1 and k2 are alice's keys at acme, k3 is bob's at acme, k4 carol's at globex
    scripted, server = upstream
    with running_gateway(limited(server.url, [{"per": per, "requests_per_minute": 1}], prefix, keys=True)) as gw:
        statuses = [post(gw, key=k, model=m).status_code for k, m in (first, refused, admitted)]

    assert statuses == [200, 429, 200]


def test_a_rule_on_one_route_counts_only_that_routes_requests_per_user(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    rules = [{"per": "user", "route": "other", "requests_per_minute": 1}]
    with running_gateway(limited(server.url, rules, prefix, keys=True)) as gw:
        statuses = [post(gw, key=k, model=m).status_code
                    for k, m in (("k1", "other"), ("k2", "other"), ("k3", "other"), ("k1", "assistant"), ("k1", "assistant"))]
        unlimited = post(gw, key="k1")

    assert statuses == [200, 429, 200, 200, 200]
    assert not any(k.startswith("x-ratelimit-") for k in unlimited.headers)  # no rule applies to `assistant`


@pytest.mark.parametrize("redis_down", ["closed port", "never answers"])
def test_with_redis_unreachable_requests_pass_by_default_counted_and_logged(upstream, prefix, redis_down) -> None:
    # R: O2
    scripted, server = upstream
    with socket.socket() as silent:  # listening, so connections open, but nothing ever reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1] if redis_down == "never answers" else free_port()
        config = limited(server.url, [{"per": "route", "requests_per_minute": 1}], prefix,
                         redis=f"redis://127.0.0.1:{port}/0", timeout_seconds=0.2)
        with captured_logs("toolgate.limits") as logs, running_gateway(config) as gw:
            responses = [post(gw, api) for api in PATHS]
            errors = metric(gw.url, "toolgate_limits_redis_errors_total", operation="admit")

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert not any(k.startswith("x-ratelimit-") for r in responses for k in r.headers)
    assert errors == 3
    lines = [json.loads(line)["message"] for line in logs.getvalue().splitlines()]
    assert any(line.startswith(f"limits: admit failed: Redis at 127.0.0.1:{port}/0: ") for line in lines), lines


class SilentRedis:
    """A TCP server on loopback that accepts and reads but never answers (a stalled Redis), and
    counts the most connections it held open at once."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.listener.getsockname()[1]
        self.most_open = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            held: set[socket.socket] = set()
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.05):
                    if key.fileobj is self.listener:
                        conn, _ = self.listener.accept()
                        held.add(conn)
                        selector.register(conn, selectors.EVENT_READ)
                        self.most_open = max(self.most_open, len(held))
                    elif not key.fileobj.recv(65536):  # type: ignore[union-attr]
                        selector.unregister(key.fileobj)
                        held.discard(key.fileobj)  # type: ignore[arg-type]
                        key.fileobj.close()  # type: ignore[union-attr]
            for conn in held:
                conn.close()

    def __enter__(self) -> "SilentRedis":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.listener.close()


def test_a_stalled_redis_costs_at_most_limits_connections_sockets_however_many_requests_wait(upstream, prefix) -> None:
    # R: O2 — each admission waiting on a stalled Redis used to open a connection of its own
    scripted, server = upstream
    with SilentRedis() as silent:
        config = limited(server.url, [{"per": "route", "requests_per_minute": 100}], prefix,
                         redis=f"redis://127.0.0.1:{silent.port}/0", timeout_seconds=1, connections=2)
        with running_gateway(config) as gw:
            with ThreadPoolExecutor(8) as pool:
                statuses = list(pool.map(lambda _: post(gw).status_code, range(8)))
            errors = metric(gw.url, "toolgate_limits_redis_errors_total", operation="admit")

    assert statuses == [200] * 8  # on_redis_error: open — every request passed, counted as a Redis error
    assert errors == 8
    assert silent.most_open == 2


def test_limits_connections_below_one_is_refused_with_the_key_named() -> None:
    # R: O2
    with pytest.raises(ValueError) as refused:
        LimitsConfig.model_validate({"redis": redis_support.URL, "connections": 0,
                                     "rules": [{"per": "route", "requests_per_minute": 1}]})
    assert "connections" in str(refused.value)
    assert "greater than or equal to 1" in str(refused.value)


def test_with_redis_unreachable_and_on_redis_error_closed_requests_get_503_naming_why(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    config = limited(server.url, [{"per": "route", "requests_per_minute": 100}], prefix,
                     redis=f"redis://127.0.0.1:{free_port()}/0", on_redis_error="closed")
    with running_gateway(config) as gw:
        refused = {api: post(gw, api) for api in PATHS}

    assert {api: r.status_code for api, r in refused.items()} == {"chat": 503, "responses": 503, "messages": 503}
    error = refused["chat"].json()["error"]
    assert error["code"] == "limits_unavailable"
    assert error["message"].startswith("rate limits cannot be checked (Redis at 127.0.0.1:")
    assert error["message"].endswith("and limits.on_redis_error is 'closed'")
    assert refused["messages"].json()["error"]["type"] == "api_error"
    assert scripted.requests == []


def test_without_redis_limits_count_in_the_process_and_start_up_warns_they_are_per_replica(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    config = limited(server.url, [{"per": "route", "requests_per_minute": 2}], prefix, redis=None)
    with captured_logs("toolgate.limits") as logs, running_gateway(config) as gw:
        statuses = [post(gw, api).status_code for api in PATHS]

    assert statuses == [200, 200, 429]
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("warning", "limits: no limits.redis configured: counters are per replica (each replica admits up to each limit on its own)")]
    assert redis_support.keys(prefix) == []


def test_a_limit_of_n_a_minute_across_two_replicas_behind_haproxy_admits_n_not_2n(upstream, prefix) -> None:
    # R: O2, S2
    haproxy.require()
    scripted, server = upstream
    replicas = []
    proxy = None
    try:
        for i in range(2):
            config = limited(server.url, [{"per": "route", "requests_per_minute": 4}], prefix)
            config["routes"][0]["upstream_model"] = f"backend-{i}"
            replicas.append(ServeProcess(config))
        for replica in replicas:
            replica.wait_ready()
        proxy = haproxy.HaProxy([r.url for r in replicas]).wait_ready()
        # each request its own conversation: HAProxy hashes X-Conversation-Id over both replicas
        sent = [post(proxy.url, **{"x-conversation-id": uuid.uuid4().hex}) for _ in range(16)]
        served = {line.server for line in haproxy.logged(proxy.log_tail(1000)) if line.status in (200, 429)}
    finally:
        if proxy is not None:
            proxy.stop()
        for replica in replicas:
            replica.stop()

    assert [r.status_code for r in sent].count(200) == 4
    assert [r.status_code for r in sent].count(429) == 12
    assert served == {"gateway-1", "gateway-2"}  # both replicas answered, and counted together
    assert len(scripted.requests) == 4


def test_redis_counters_admit_all_or_nothing_and_settle_before_the_next_admission(prefix) -> None:
    # R: O2 -- the Lua script itself, on the real Redis
    rpm = Check("requests", "r", f"{prefix}rpm", 2, 60)
    slot = Check("concurrent", "c", f"{prefix}slot", 1, 600)
    tokens = Check("tokens", "t", f"{prefix}tpm", 20, 60)

    async def scenario() -> list[list[bool]]:
        counters = RedisCounters(redis_support.URL, password=None, username=None, timeout=2)
        try:
            seen = [[o.allowed for o in await counters.admit([rpm, slot, tokens], "one")]]
            seen.append([o.allowed for o in await counters.admit([rpm, slot, tokens], "two")])  # the slot is held: nothing taken
            await counters.settle([Charge(tokens, 25)], [slot], "one")  # queued: rides on the next admission
            seen.append([o.allowed for o in await counters.admit([rpm, slot, tokens], "three")])  # freed, but 25 of 20 tokens used
            seen.append([o.allowed for o in await counters.admit([rpm, slot], "four")])  # the second request of the minute
            seen.append([o.allowed for o in await counters.admit([rpm], "five")])
            return seen
        finally:
            await counters.close()

    assert asyncio.run(scenario()) == [[True, True, True], [True, False, True], [True, True, False], [True, True], [False]]


@pytest.mark.parametrize("carried", [False, True], ids=["alone", "with-an-admission"])
def test_a_settlement_lost_while_redis_is_down_is_counted(prefix, carried) -> None:
    # R: O2 -- sent alone (the flush), or riding on the next admission, whose failing call loses it too
    config = LimitsConfig(redis=f"redis://127.0.0.1:{free_port()}/0", key_prefix=prefix, timeout_seconds=0.2,
                          rules=[{"per": "user", "tokens_per_minute": 100}])
    registry = CollectorRegistry()

    async def scenario() -> None:
        limits = build_limits(config, Path("."), SecretSet(), registry, hold_seconds=60)
        admission = await limits.admit(Identity(user_id="alice"), "assistant", "scripted-model")  # open: passes
        await admission.end(10, 5)  # queued
        if carried:
            await limits.admit(Identity(user_id="alice"), "assistant", "scripted-model")  # carries it, and fails
        await limits.close()  # sends what is still pending: it fails

    asyncio.run(scenario())
    assert registry.get_sample_value("toolgate_limits_redis_errors_total", {"operation": "admit"}) == (2 if carried else 1)
    assert registry.get_sample_value("toolgate_limits_redis_errors_total", {"operation": "settle"}) == 1


def test_spend_is_priced_by_the_model_of_the_deployment_that_answered(upstream, prefix) -> None:
    # R: O2, O1 -- a route with deployments has no upstream_model of its own: its price is the deployment's
    scripted, server = upstream
    prices = {"dear-model": {"input_per_million": 1000, "output_per_million": 2000}}  # $0.02 a request
    config = limited(server.url, [{"per": "route", "route": "assistant", "budget": {"usd": 0.03, "period": "month"}}],
                     prefix, prices=prices)
    route = config["routes"][0]
    del route["upstream"], route["upstream_model"]
    route["deployments"] = [{"upstream": "scripted", "model": "dear-model"}]
    with running_gateway(config) as gw:
        statuses = [post(gw).status_code]
        spend = f"{prefix}spend:route@assistant:assistant:{datetime.now(timezone.utc):%Y-%m}"
        assert wait_until(lambda: redis_support.value(spend) is not None, timeout=10)
        statuses.append(post(gw, "messages").status_code)
        assert wait_until(lambda: float(redis_support.value(spend) or 0) >= 0.04 - 1e-9, timeout=10)
        statuses.append(post(gw, "responses").status_code)

    assert statuses == [200, 200, 429]
    assert {body["model"] for body in scripted.requests} == {"dear-model"}


def test_a_client_that_leaves_mid_stream_frees_its_concurrency_slot(upstream, prefix) -> None:
    # R: O2
    scripted, server = upstream
    scripted.push(Reply(content="held answer", hang_stream_after=2))
    with running_gateway(limited(server.url, [{"per": "key", "concurrent": 1}], prefix, keys=True)) as gw:
        in_flight = f"{prefix}inflight:key:"
        try:
            headers = {"authorization": f"Bearer {key_value('k1')}"}
            with httpx2.stream("POST", gw.url + PATHS["chat"], json=body("chat", stream=True), headers=headers, timeout=30) as held:
                assert held.status_code == 200
                next(held.iter_bytes())  # the stream has begun; the upstream now hangs
                assert [k for k in redis_support.keys(prefix) if k.startswith(in_flight)]
            # the client has left while the upstream still hangs: its slot must be freed all the same
            assert wait_until(lambda: not [k for k in redis_support.keys(prefix) if k.startswith(in_flight)], timeout=10)
            again = post(gw, key="k1", stream=True)
        finally:
            scripted.release.set()
        assert again.status_code == 200


@pytest.mark.parametrize("lost", ["open", "closed", "cancelled"])
def test_a_slot_taken_by_an_admission_whose_answer_was_lost_is_freed(prefix, lost) -> None:
    # R: O2 -- a Redis call that timed out (or whose request was cancelled) may have run and taken the
    # slot: failing open (freed when the request ends), closed (503) or cancelled must not leave it held
    class AnswerLost(RedisCounters):
        async def admit(self, checks, holder):  # type: ignore[no-untyped-def]
            await super().admit(checks, holder)  # Redis ran the script and took the slot ...
            if lost == "cancelled":
                raise asyncio.CancelledError()  # ... and the request was cancelled before its answer was read
            raise CountersError(f"Redis at {self.where}: TimeoutError")  # ... but its answer never came

    config = LimitsConfig(redis=redis_support.URL, key_prefix=prefix, on_redis_error="closed" if lost == "closed" else "open",
                          rules=[{"per": "user", "concurrent": 1}])
    registry = CollectorRegistry()

    async def scenario() -> list[str]:
        limits = Limits(config, AnswerLost(redis_support.URL, password=None, username=None, timeout=2), registry, hold_seconds=600)
        if lost == "open":
            admission = await limits.admit(Identity(user_id="alice"), "assistant", "scripted-model")  # passes
            held = redis_support.keys(prefix)
            await admission.end(0, 0)
        else:
            with pytest.raises(asyncio.CancelledError if lost == "cancelled" else Unavailable):
                await limits.admit(Identity(user_id="alice"), "assistant", "scripted-model")
            held = redis_support.keys(prefix)
        await limits.close()  # sends the release
        return held

    assert asyncio.run(scenario()) == [f"{prefix}inflight:user:alice"]
    assert redis_support.keys(prefix) == []


@pytest.mark.parametrize("leases", [True, False], ids=["leased", "a-round-trip-each"])
def test_a_large_limit_is_leased_at_lease_share_and_lease_share_0_takes_one_request_at_a_time(upstream, prefix, leases) -> None:
    # R: O2 -- the config keys reach the counters: 10 % of 10,000 a minute is leased at the first request
    scripted, server = upstream
    extra = {"lease_share": 0.1} if leases else {"lease_share": 0, "stale_seconds": 0}
    with running_gateway(limited(server.url, [{"per": "route", "requests_per_minute": 10_000}], prefix, **extra)) as gw:
        remaining = [int(post(gw).headers["x-ratelimit-remaining-requests"]) for _ in range(3)]
        [key] = [k for k in redis_support.keys(prefix) if "rpm" in k] or [""]
        ahead = float(redis_support.value(key) or 0) - datetime.now(timezone.utc).timestamp() if key else 0.0
    assert remaining[0] >= 9998 and remaining == sorted(remaining, reverse=True)  # (tat kept to the µs: ±1)
    taken = ahead / 0.006  # seconds ahead of now, in intervals of 60/10,000 s (the bucket refills 1 per 6 ms)
    if leases:
        assert 500 <= taken <= 1000  # 1,000 taken at once, less what refilled in the (at most 3 s) since
    else:
        assert taken <= 3


def test_a_client_that_leaves_a_stream_before_its_usage_is_charged_an_estimate(upstream, prefix) -> None:
    # R: O2 -- the upstream did the work (and bills it): the tokens of what was sent and streamed count
    scripted, server = upstream
    scripted.push(Reply(content="held answer", hang_stream_after=2))
    scripted.push(Reply(content="second"))
    with running_gateway(limited(server.url, [{"per": "route", "tokens_per_minute": 20}], prefix)) as gw:
        long_question = {**body("chat", stream=True), "messages": [{"role": "user", "content": "why " * 50}]}
        def charged_seconds() -> float:  # the tokens bucket's `tat` ahead of now: 3 s a token at 20 a minute
            found = [k for k in redis_support.keys(prefix) if "tpm" in k]
            tat = float(redis_support.value(found[0]) or 0) if found else 0.0
            return tat - datetime.now(timezone.utc).timestamp()

        try:
            with httpx2.stream("POST", gw.url + PATHS["chat"], json=long_question, timeout=30) as held:
                assert held.status_code == 200
                next(held.iter_bytes())  # the stream has begun; the upstream now hangs, its usage never comes
            # ≈ 210 characters sent: ≈ 53 tokens, over the 20 a minute (60 s of the bucket)
            assert wait_until(lambda: charged_seconds() > 60, timeout=10)
            refused = post(gw)
        finally:
            scripted.release.set()
    assert refused.status_code == 429
    assert "tokens" in refused.json()["error"]["message"]
