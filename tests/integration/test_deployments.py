"""A route's deployments through a running gateway (O1): spread, retries, cool-down, fallbacks.

Two or three scripted upstreams on loopback stand for providers; one of them is scripted to answer
429, 500, hang, cut its stream or refuse a too-long prompt. The client is the official `openai`
SDK with its own retries off, so every retry seen here is the gateway's. The random draws and the
clock of the route's deployments are scripted (`Deployments.random`, `.clock`).
"""

from __future__ import annotations

import io
import itertools
import json
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gateway.app import create_app
from gateway.config import load_checked, parse_config
from gateway.plugins import Plugin
from tests.support import canary
from tests.support.gateway import client
from tests.support.http_server import ServerThread, serve
from tests.support.logs import captured_logs
from tests.support.plugins import EchoTools
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def ups() -> Iterator[dict[str, ScriptedUpstream]]:
    """Three scripted upstreams `a`, `b`, `c`, each answering with its own name by default."""
    with ExitStack() as stack:
        found = {}
        for name in "abc":
            scripted = ScriptedUpstream(Reply(content=f"from {name}"))
            server = stack.enter_context(serve(scripted.app))
            scripted.url = server.url  # type: ignore[attr-defined]
            stack.callback(scripted.release.set)
            found[name] = scripted
        yield found


def upstream_entry(name: str, url: str) -> dict[str, Any]:
    return {"name": name, "kind": "openai", "api_base": url + "/v1", "api_key": canary.UPSTREAM_KEY_REF}


def config(ups: dict[str, ScriptedUpstream], routes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    entries = [upstream_entry(n, u.url) for n, u in ups.items()]  # type: ignore[attr-defined]
    return {"upstreams": entries, "routes": routes, "server": {"metrics_public": True}, **extra}


def deployment(name: str, **more: Any) -> dict[str, Any]:
    return {"upstream": name, "model": f"model-{name}", **more}


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def gateway(
    data: dict[str, Any], *, draws: tuple[float, ...] = (0.0,), clock: Callable[[], float] | None = None,
    plugins: list[Plugin] | None = None,
) -> Iterator[ServerThread]:
    """A running gateway whose deployments draw `draws` in turn (0.0: the first healthy one)."""
    app = create_app(parse_config(data, "test", Path(".")))
    for route in app.state.gateway.routes.values():
        route.upstream.random = itertools.cycle(draws).__next__
        if clock is not None:
            route.upstream.clock = clock
    if plugins:
        chain = app.state.gateway.routes["assistant"].chain
        chain.plugins = plugins
        chain.max_tool_calls = 10
    with serve(app) as server:
        yield server


def ask(gw: ServerThread, model: str = "assistant") -> str:
    response = client(gw).chat.completions.create(model=model, messages=USER)
    return response.choices[0].message.content or ""


def streamed(gw: ServerThread, model: str = "assistant") -> str:
    chunks = client(gw).chat.completions.create(model=model, messages=USER, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def asked(scripted: ScriptedUpstream) -> list[str]:
    """The model names the upstream was asked for, in order."""
    return [r["model"] for r in scripted.requests]


def access_lines(logs: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "toolgate.http"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_calls_are_spread_over_deployments_by_weight(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    route = {"model": "assistant", "deployments": [deployment("a", weight=3), deployment("b")]}
    with gateway(config(ups, [route]), draws=(0.0, 0.3, 0.6, 0.9)) as gw:
        answers = [ask(gw) for _ in range(8)]
    assert answers == ["from a"] * 3 + ["from b"] + ["from a"] * 3 + ["from b"]
    assert (asked(ups["a"]), asked(ups["b"])) == (["model-a"] * 6, ["model-b"] * 2)


def test_a_429_is_retried_on_the_other_deployment_and_the_client_gets_200(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    ups["a"].push(Reply(status=429, error_message="slow down"))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")]}
    with captured_logs("toolgate") as logs, gateway(config(ups, [route])) as gw:
        raw = client(gw).chat.completions.with_raw_response.create(model="assistant", messages=USER)
        metrics = httpx2.get(gw.url + "/metrics").text
    assert (raw.http_response.status_code, raw.parse().choices[0].message.content) == (200, "from b")
    assert (asked(ups["a"]), asked(ups["b"])) == (["model-a"], ["model-b"])
    assert 'toolgate_upstream_calls_total{deployment="a/model-a",outcome="upstream_rate_limited",upstream="a"} 1.0' in metrics
    assert 'toolgate_upstream_calls_total{deployment="b/model-b",outcome="ok",upstream="b"} 1.0' in metrics
    assert [(a["status"], a["deployment"]) for a in access_lines(logs)] == [(200, "b/model-b")]


@pytest.mark.parametrize("failure", ["500", "refused connection", "hang past the deployment's timeout"])
def test_a_failing_deployment_is_retried_on_another(ups: dict[str, ScriptedUpstream], failure: str) -> None:
    # R: O1
    first = deployment("a", timeout_seconds=1) if failure.startswith("hang") else deployment("a")
    data = config(ups, [{"model": "assistant", "deployments": [first, deployment("b")]}])
    if failure == "500":
        ups["a"].push(Reply(status=500))
    elif failure == "refused connection":
        data["upstreams"][0]["api_base"] = f"http://127.0.0.1:{closed_port()}/v1"
    else:
        ups["a"].push(Reply(hang=True))
    with gateway(data) as gw:
        assert ask(gw) == "from b"
    assert asked(ups["b"]) == ["model-b"]


def test_when_every_deployment_fails_the_client_gets_the_last_error(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1, G5
    ups["a"].push(Reply(status=500))
    ups["b"].push(Reply(status=503))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")], "retries": 5}
    with captured_logs("toolgate") as logs, gateway(config(ups, [route])) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw)
    assert caught.value.status_code == 502 and "upstream 'b' failed (HTTP 503)" in str(caught.value)
    assert (asked(ups["a"]), asked(ups["b"])) == (["model-a"], ["model-b"])  # each deployment once
    assert [(a["status"], a["deployment"]) for a in access_lines(logs)] == [(502, None)]


def test_retries_stop_at_the_routes_retries(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    for name in "abc":
        ups[name].push(Reply(status=500))
    route = {"model": "assistant", "deployments": [deployment(n) for n in "abc"], "retries": 1}
    with gateway(config(ups, [route])) as gw:
        with pytest.raises(openai.InternalServerError):
            ask(gw)
    assert [len(ups[n].requests) for n in "abc"] == [1, 1, 0]


def test_retries_end_with_the_requests_budget(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    ups["a"].push(Reply(hang=True))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")]}
    data = config(ups, [route], server={"metrics_public": True, "request_timeout_seconds": 1})
    with gateway(data) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw)
    assert caught.value.status_code == 504 and "server.request_timeout_seconds (1s)" in caught.value.message
    assert (asked(ups["a"]), ups["b"].requests) == (["model-a"], [])


def test_a_stream_that_fails_before_its_first_chunk_is_retried(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    ups["a"].push(Reply(content="never sent", cut_stream_after=0))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")]}
    with captured_logs("toolgate") as logs, gateway(config(ups, [route])) as gw:
        text = streamed(gw)
    assert text == "from b "
    assert (asked(ups["a"]), asked(ups["b"])) == (["model-a"], ["model-b"])
    assert [(a["status"], a["deployment"]) for a in access_lines(logs)] == [(200, "b/model-b")]


def test_a_stream_that_fails_after_its_first_chunk_is_not_retried(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    ups["a"].push(Reply(content="one two three four", cut_stream_after=3))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")]}
    with gateway(config(ups, [route])) as gw:
        with pytest.raises(openai.APIError) as caught:
            streamed(gw)
    assert "upstream 'a' ended the stream without [DONE]" in str(caught.value)
    assert (asked(ups["a"]), ups["b"].requests) == (["model-a"], [])


@pytest.mark.parametrize("allowed", [False, True])
def test_a_call_after_the_turns_tool_calls_ran_is_retried_only_when_the_operator_allows(
    ups: dict[str, ScriptedUpstream], allowed: bool
) -> None:
    # R: O1
    ups["a"].push(Reply(tool_calls=[("search", {"q": "x"})]), Reply(status=500))
    tools = EchoTools("docs", ["search"])
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")], "retry_after_tool_calls": allowed}
    with gateway(config(ups, [route]), plugins=[tools]) as gw:
        if allowed:
            assert ask(gw) == "from b"
        else:
            with pytest.raises(openai.InternalServerError):
                ask(gw)
    assert tools.calls == [("search", {"q": "x"})]  # the tool ran once either way
    assert asked(ups["a"]) == ["model-a", "model-a"]
    assert asked(ups["b"]) == (["model-b"] if allowed else [])
    if allowed:  # the retried call carries the tool's result: nothing ran twice
        assert ups["b"].requests[0]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": "docs.search: {'q': 'x'}"}


def test_a_failing_deployment_cools_down_then_one_call_probes_it_back(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    clock = Clock()
    ups["a"].push(Reply(status=500), Reply(status=500))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")],
             "cooldown_after_failures": 2, "cooldown_seconds": 30}
    with gateway(config(ups, [route]), clock=clock) as gw:
        first = [ask(gw), ask(gw)]  # a fails twice in a row: it cools down
        clock.now += 10
        cooling = ask(gw)  # a is not asked
        clock.now += 20
        probe = ask(gw)  # the cool-down is over: a is asked again and answers
        after = ask(gw)
    assert (first, cooling, probe, after) == (["from b", "from b"], "from b", "from a", "from a")
    assert (len(ups["a"].requests), len(ups["b"].requests)) == (4, 3)


def test_a_429_with_retry_after_cools_the_deployment_down_at_once(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    clock = Clock()
    ups["a"].push(Reply(status=429, headers={"retry-after": "120"}))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")],
             "cooldown_after_failures": 5, "cooldown_seconds": 30}
    with gateway(config(ups, [route]), clock=clock) as gw:
        answers = [ask(gw)]
        clock.now += 119
        answers.append(ask(gw))
        clock.now += 1
        answers.append(ask(gw))
    assert answers == ["from b", "from b", "from a"]


def test_a_fallback_route_answers_when_every_deployment_is_exhausted(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1
    ups["a"].push(Reply(status=500), Reply(status=502))
    routes = [
        {"model": "assistant", "deployments": [deployment("a")], "retries": 1, "fallbacks": ["backup"]},
        {"model": "backup", "upstream": "b", "upstream_model": "small-model"},
    ]
    with captured_logs("toolgate") as logs, gateway(config(ups, routes)) as gw:
        answer = ask(gw)
        metrics = httpx2.get(gw.url + "/metrics").text
    assert answer == "from b"
    assert (asked(ups["a"]), asked(ups["b"])) == (["model-a"], ["small-model"])
    assert [(a["route"], a["deployment"]) for a in access_lines(logs)] == [("assistant", "b/small-model")]
    assert 'toolgate_upstream_calls_total{deployment="b/small-model",outcome="ok",upstream="b"} 1.0' in metrics


def test_a_context_window_error_goes_to_the_fallback_at_once(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1, G5
    ups["a"].push(Reply(status=400, error_message="This model's maximum context length is 8192 tokens"))
    routes = [
        {"model": "assistant", "deployments": [deployment("a"), deployment("c")], "fallbacks": ["long"]},
        {"model": "long", "deployments": [deployment("b")]},
    ]
    with gateway(config(ups, routes)) as gw:
        assert ask(gw) == "from b"
    assert (asked(ups["a"]), ups["c"].requests, asked(ups["b"])) == (["model-a"], [], ["model-b"])


def test_a_context_window_error_without_a_fallback_is_a_400_saying_so(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1, G5
    ups["a"].push(Reply(status=400, error_message="This model's maximum context length is 8192 tokens"))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("c")]}
    with gateway(config(ups, [route])) as gw:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(gw)
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in caught.value.message
    assert ups["c"].requests == []  # the same request is as long for every deployment


def test_a_request_the_upstream_refuses_is_not_retried(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1, G5
    ups["a"].push(Reply(status=422, error_message="temperature must be at most 2"))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")], "fallbacks": ["other"]}
    other = {"model": "other", "upstream": "c"}
    with gateway(config(ups, [route, other])) as gw:
        with pytest.raises(openai.UnprocessableEntityError):
            ask(gw)
    assert (ups["b"].requests, ups["c"].requests) == ([], [])


def test_check_reports_deployment_and_fallback_problems_with_their_paths(tmp_path: Path) -> None:
    # R: O1, D4
    path = tmp_path / "toolgate.yaml"
    path.write_text(
        "upstreams:\n"
        "  - {name: a, kind: openai, api_base: 'http://127.0.0.1:9/v1', api_key: 'env:TOOLGATE_TEST_MISSING_KEY'}\n"
        "routes:\n"
        "  - model: assistant\n"
        "    deployments:\n"
        "      - {upstream: a, model: x}\n"
        "      - {upstream: ghost, model: y}\n"
        "    fallbacks: [backup, nowhere]\n"
        "  - model: backup\n"
        "    upstream: a\n"
        "    fallbacks: [assistant]\n"
    )
    config_, problems = load_checked(path)
    assert config_ is None
    assert problems == [
        f"{path}:7:10: routes[assistant].deployments[#2].upstream: names upstream 'ghost', which is not defined in 'upstreams'",
        f"{path}:8:25: routes[assistant].fallbacks[#2]: names route 'nowhere', which is not defined in 'routes'",
        f"{path}:8:5: routes[assistant].fallbacks: fallbacks lead back to this route: assistant -> backup -> assistant",
        f"{path}:11:5: routes[backup].fallbacks: fallbacks lead back to this route: backup -> assistant -> backup",
        f"{path}:2:64: upstreams[a].api_key: environment variable TOOLGATE_TEST_MISSING_KEY is not set"
        " (from env:TOOLGATE_TEST_MISSING_KEY)",
    ]


def test_a_probe_whose_stream_the_client_leaves_frees_the_probe_slot(ups: dict[str, ScriptedUpstream]) -> None:
    # R: O1 -- a probe slot must never stay taken: the deployment would not be picked by weight again
    clock = Clock()
    ups["a"].push(Reply(status=500), Reply(content="probe answer", hang_stream_after=2))
    route = {"model": "assistant", "deployments": [deployment("a"), deployment("b")],
             "cooldown_after_failures": 1, "cooldown_seconds": 30}
    app = create_app(parse_config(config(ups, [route]), "test", Path(".")))
    routed = app.state.gateway.routes["assistant"].upstream
    routed.random, routed.clock = itertools.cycle((0.0,)).__next__, clock
    breaker = routed.pool.deployments[0].breaker
    with serve(app) as gw:
        assert ask(gw) == "from b"  # a failed once: it cools down
        clock.now += 30
        try:
            with client(gw).chat.completions.create(model="assistant", messages=USER, stream=True) as chunks:
                next(iter(chunks))  # the probe's stream has begun on a, which now hangs
                assert breaker.probing
            # the client has left while a still hangs
            assert wait_until(lambda: not breaker.probing, timeout=10)
        finally:
            ups["a"].release.set()
        assert ask(gw) == "from a"  # a is picked again (its probe slot is free)
