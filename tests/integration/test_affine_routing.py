"""Several gateway replicas behind `toolgate route`: a conversation stays on one replica, so it
keeps one MCP session (B14) although every replica has its own pool. Real processes on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest

from bench.load import drive
from bench.loadkit import ROOT, Gateway, gateway_config, listening_port, tooling_model_app
from gateway.router import HashRing, Router
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

UPSTREAM_KEY = "TOOLGATE_TEST_UPSTREAM_KEY"
"""The scripted upstream's key, by reference (the suite may already have set it; the replicas inherit it)."""
os.environ.setdefault(UPSTREAM_KEY, "sk-affine-routing-test")


@dataclass
class Replicas:
    router: str
    backends: list[str]
    labels: dict[str, str]
    """Backend URL → the model name its config sends upstream (the scripted model echoes it)."""
    mcp: McpServerState
    upstream: ScriptedUpstream


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url + "/healthz", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


@pytest.fixture(scope="module")
def replicas() -> Iterator[Replicas]:
    state = McpServerState()
    upstream = ScriptedUpstream()
    with serve(http_app(state, legacy_only=True)) as mcp, serve(tooling_model_app()) as model, serve(upstream.app) as scripted:
        plain = {"model": "plain", "upstream": "scripted", "plugins": []}
        scripted_upstream = {"name": "scripted", "kind": "openai", "api_base": scripted.url + "/v1",
                             "api_key": f"env:{UPSTREAM_KEY}"}
        gateways = [
            Gateway(gateway_config(model.url, mcp.url, label=f"backend-{i}", guard_mode=None, extra_routes=[plain],
                                   extra_upstreams=[scripted_upstream]))
            for i in range(2)
        ]
        router = None
        try:
            argv = [sys.executable, "-m", "gateway.cli", "route", "--listen", "127.0.0.1:0"]
            for gateway in gateways:
                gateway.wait_ready()
                argv += ["--backend", gateway.url]
            router = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            port: list[int] = []

            def up() -> bool:
                if router.poll() is not None:
                    return True
                if not port:
                    port.extend(p for p in [listening_port(router.pid)] if p is not None)
                return bool(port) and _answers(f"http://127.0.0.1:{port[0]}")

            assert wait_until(up, timeout=60), "the router did not come up"
            assert router.poll() is None, router.stderr.read() if router.stderr else ""
            url = f"http://127.0.0.1:{port[0]}"
            yield Replicas(url, [g.url for g in gateways], {g.url: f"backend-{i}" for i, g in enumerate(gateways)},
                           state, upstream)
        finally:
            upstream.release.set()
            if router is not None:
                router.terminate()
                router.wait(30)
                if router.stderr is not None:
                    router.stderr.close()
            for gateway in gateways:
                gateway.stop()


def test_each_conversation_stays_on_one_replica_and_keeps_one_mcp_session(replicas: Replicas) -> None:
    # R: B14, G4
    with replicas.mcp.cond:
        before = len(replicas.mcp.opened)
    seen = asyncio.run(drive(replicas.router, 20, 3, prefix="affine", seconds=60))  # odd turns streamed

    assert [c.errors for c in seen] == [[]] * 20
    ring = HashRing(replicas.backends)
    expected = [{replicas.labels[ring.pick(f"x-conversation-id:affine-{i}")]} for i in range(20)]
    assert [c.backends for c in seen] == expected  # every turn on the replica the ring names
    assert {label for c in seen for label in c.backends} == {"backend-0", "backend-1"}  # both replicas serve
    assert [len(c.sessions) for c in seen] == [1] * 20 and sum(c.breaks for c in seen) == 0
    with replicas.mcp.cond:
        assert len(replicas.mcp.opened) - before == 20  # counted by the MCP server: one per conversation


def _held_stream(upstream: ScriptedUpstream) -> None:
    """The next model stream sends its first word, then waits for `upstream.release`."""
    upstream.release.clear()
    upstream.stream_closed.clear()
    upstream.push(Reply(content="first second third", hang_stream_after=2))


def test_a_stream_passes_through_the_router_as_it_is_written(replicas: Replicas) -> None:
    # R: G1
    _held_stream(replicas.upstream)
    body = {"model": "plain", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    events: list[dict] = []
    timeout = httpx2.Timeout(30, read=15)  # a deadline for a router that would buffer, not a measurement
    with httpx2.stream("POST", replicas.router + "/v1/chat/completions", json=body, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
                if any(ch["delta"].get("content") for e in events for ch in e["choices"]):
                    break
        # the model is still holding its stream: what arrived was passed on before the stream ended
        assert not replicas.upstream.stream_closed.is_set()
        replicas.upstream.release.set()
        rest = list(lines)
    text = "".join(ch["delta"].get("content") or "" for e in events for ch in e["choices"])
    text += "".join(ch["delta"].get("content") or ""
                    for line in rest if line.startswith("data: {") for ch in json.loads(line[6:])["choices"])
    assert text == "first second third "
    assert [line for line in rest if line][-1] == "data: [DONE]"


def test_a_client_that_leaves_mid_stream_ends_the_request_down_to_the_model(replicas: Replicas) -> None:
    # R: G1
    _held_stream(replicas.upstream)
    body = {"model": "plain", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx2.stream("POST", replicas.router + "/v1/chat/completions", json=body, timeout=httpx2.Timeout(30, read=15)) as response:
        for line in response.iter_lines():
            if '"content": "first ' in line:
                break  # leave while the model still holds its stream open
    # the router closed its request to the gateway, which closed its stream from the model
    assert wait_until(replicas.upstream.stream_closed.is_set, timeout=15)
    assert not replicas.upstream.release.is_set()
    replicas.upstream.release.set()


def test_a_replica_that_is_down_gets_a_502_envelope_and_the_others_keep_serving(replicas: Replicas) -> None:
    # R: G6
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused, and no one else gets the port
    down = f"http://127.0.0.1:{closed.getsockname()[1]}"
    live = replicas.backends[0]
    router = Router([live, down])
    ring = HashRing([live, down])
    ids = {ring.pick(f"x-conversation-id:down-{i}"): f"down-{i}" for i in range(50)}
    body = {"model": "assistant", "messages": [{"role": "user", "content": "down-check turn 0"}]}
    with closed, serve(router) as front:
        refused = httpx2.post(front.url + "/v1/chat/completions", json=body, headers={"x-conversation-id": ids[down]}, timeout=30)
        served = httpx2.post(front.url + "/v1/chat/completions", json=body, headers={"x-conversation-id": ids[live]}, timeout=30)
    assert refused.status_code == 502
    assert refused.json() == {"error": {"message": "gateway backend 2 of 2 could not be reached (ConnectError)",
                                        "type": "upstream_error", "code": "bad_gateway", "param": None}}
    assert served.status_code == 200 and served.json()["choices"][0]["message"]["content"].startswith("[backend-0]")


def test_the_ring_moves_only_the_new_backends_share_when_one_is_added() -> None:
    # R: B14
    keys = [f"x-conversation-id:c{i}" for i in range(3000)]
    two = HashRing(["http://a:1", "http://b:1"])
    three = HashRing(["http://a:1", "http://b:1", "http://c:1"])
    before = [two.pick(k) for k in keys]
    after = [three.pick(k) for k in keys]
    moved = [(b, a) for b, a in zip(before, after) if b != a]
    assert {a for _, a in moved} == {"http://c:1"}  # nothing moves between the old backends
    shares = Counter(after)
    assert all(600 <= n <= 1400 for n in shares.values()), shares  # each near a third


def test_without_a_conversation_id_the_credential_then_round_robin_decides() -> None:
    # R: G4
    router = Router(["http://a:1", "http://b:1"])
    token = {b"authorization": b"Bearer sk-some-caller"}
    assert len({router.backend_for(token) for _ in range(10)}) == 1
    assert [router.backend_for({}) for _ in range(4)] == ["http://a:1", "http://b:1", "http://a:1", "http://b:1"]
    both = {b"authorization": b"Bearer sk-some-caller", b"x-conversation-id": b"conv-7"}
    assert router.backend_for(both) == HashRing(["http://a:1", "http://b:1"]).pick("x-conversation-id:conv-7")
