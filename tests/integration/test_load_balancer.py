"""Three `toolgate serve` replicas behind the real HAProxy with deploy/haproxy.cfg, their Bridge on
one real PostgreSQL database (S1, S2): a conversation stays on one replica and keeps one MCP
session (B14), SSE passes unbuffered, a replica lost costs only its conversations' sessions
(rebuilt on the next call, B16), a request that reached a replica is never sent again (no tool call
runs twice); a graph saved through one replica is served by all at once, two saves at once from
one version give one winner and a 409, and the audit records of every replica are one log. Real
processes on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.load import drive
from bench.loadkit import Gateway, gateway_config, tooling_model_app
from tests.support import haproxy, postgres
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

UPSTREAM_KEY = "TOOLGATE_TEST_UPSTREAM_KEY"
"""The scripted upstream's key, by reference (the suite may already have set it; the replicas inherit it)."""
os.environ.setdefault(UPSTREAM_KEY, "sk-load-balancer-test")


@dataclass
class Replicas:
    front: str
    proxy: haproxy.HaProxy
    gateways: list[Gateway]
    mcp: McpServerState
    upstream: ScriptedUpstream
    database: str
    tools: McpServerState
    """The MCP server behind the Bridge's connection `tools` (bridge `b1`, owner anonymous)."""

    def label(self, gateway: Gateway) -> str:
        return f"backend-{self.gateways.index(gateway)}"


@pytest.fixture
def replicas() -> Iterator[Replicas]:
    haproxy.require()
    state, tools = McpServerState(), McpServerState()
    upstream = ScriptedUpstream()
    with (
        serve(http_app(state, legacy_only=True)) as mcp, serve(tooling_model_app()) as model,
        serve(upstream.app) as scripted, serve(http_app(tools, legacy_only=True)) as bridged,
        postgres.fresh_database_sync() as database,
    ):
        scripted_upstream = {"name": "scripted", "kind": "openai", "api_base": scripted.url + "/v1",
                             "api_key": f"env:{UPSTREAM_KEY}"}
        gateways = []
        proxy = None
        try:
            for i in range(3):
                # `held` runs a tool and then asks the scripted model, which the tests hold at will
                held = {"model": "held", "upstream": "scripted", "upstream_model": f"backend-{i}",
                        "plugins": [{"type": "mcp_bridge", "id": "tools", "endpoint": mcp.url + "/mcp"}]}
                plain = {"model": "plain", "upstream": "scripted", "upstream_model": f"backend-{i}", "plugins": []}
                config = gateway_config(model.url, mcp.url, label=f"backend-{i}", guard_mode=None,
                                        extra_routes=[plain, held], extra_upstreams=[scripted_upstream])
                # the Bridge, anonymous (auth off: loopback callers only), on one PostgreSQL database
                config["bridge"] = {
                    "enabled": True, "database": database,
                    "connections": [{"id": "tools", "owner": "anonymous", "endpoint": bridged.url + "/mcp"}],
                    "bridges": [{"id": "b1", "owner": "anonymous", "connections": ["tools"]}],
                }
                gateways.append(Gateway(config))
            for gateway in gateways:
                gateway.wait_ready()
            proxy = haproxy.HaProxy([g.url for g in gateways]).wait_ready()
            yield Replicas(proxy.url, proxy, gateways, state, upstream, database, tools)
        finally:
            upstream.release.set()
            if proxy is not None:
                proxy.stop()
            for gateway in gateways:
                gateway.stop()


def test_each_conversation_stays_on_one_replica_and_keeps_one_mcp_session(replicas: Replicas) -> None:
    # R: S2, B14
    seen = asyncio.run(drive(replicas.front, 24, 3, prefix="affine", seconds=90))  # odd turns streamed

    assert [c.errors for c in seen] == [[]] * 24
    assert [len(c.backends) for c in seen] == [1] * 24  # every turn on one replica
    assert {label for c in seen for label in c.backends} == {"backend-0", "backend-1", "backend-2"}
    assert [len(c.sessions) for c in seen] == [1] * 24 and sum(c.breaks for c in seen) == 0
    with replicas.mcp.cond:
        assert len(replicas.mcp.opened) == 24  # counted by the MCP server: one per conversation


def test_the_load_balancer_never_shows_a_replicas_metrics(replicas: Replicas) -> None:
    # R: S3, G9 -- Prometheus scrapes each replica; the published port answers 404 (issue 32, finding 6)
    with httpx2.Client(timeout=30) as http:
        for path in ("/metrics", "/metrics/", "/metrics?name[]=toolgate_tokens_total"):
            through = http.get(replicas.front + path)
            assert through.status_code == 404, (path, through.text)
            assert "toolgate" not in through.text
        direct = http.get(replicas.gateways[0].url + "/metrics")
        assert direct.status_code != 404  # the replica itself still serves them (to whom its settings allow)


def test_without_a_conversation_id_each_caller_stays_on_one_replica(replicas: Replicas) -> None:
    # R: S2, G4
    body = {"model": "assistant", "messages": [{"role": "user", "content": "who serves me"}]}
    served: dict[str, set[str]] = {}
    with httpx2.Client(timeout=30) as http:
        for caller in range(9):
            for _ in range(3):
                answer = http.post(replicas.front + "/v1/chat/completions", json=body,
                                   headers={"authorization": f"Bearer sk-caller-{caller}"})
                assert answer.status_code == 200, answer.text
                content = answer.json()["choices"][0]["message"]["content"]
                served.setdefault(f"caller-{caller}", set()).add(content[1:content.index("]")])
    assert all(len(labels) == 1 for labels in served.values()), served
    assert len(set.union(*served.values())) >= 2  # callers are spread over the replicas


async def test_each_bridge_mcp_session_stays_on_the_replica_that_opened_it(replicas: Replicas) -> None:
    # R: S2, F1 -- anonymous clients send no credential: `initialize` goes round robin, and only
    # the Mcp-Session-Id learnt from the replica's answer brings the session's requests back to it
    # (a replica answers 404 to a session it does not hold).
    for _ in range(2):
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(streamable_http_client(
                replicas.front + "/mcp", http_client=httpx2.AsyncClient(timeout=30)), mode="legacy")) for _ in range(6)]
            for _ in range(3):
                for client in clients:
                    assert "tools__count" in {t.name for t in (await client.list_tools()).tools}
    table = replicas.proxy.admin("show table bridge_mcp")
    owners = [line.split("server_key=")[1].split()[0] for line in table.splitlines() if "server_key=" in line]
    assert len(owners) == 12 and len(set(owners)) >= 2, table  # twelve sessions, on more than one replica


def test_a_stream_passes_through_the_load_balancer_as_it_is_written(replicas: Replicas) -> None:
    # R: S2, G1
    replicas.upstream.release.clear()
    replicas.upstream.push(Reply(content="first second third", hang_stream_after=2))
    body = {"model": "plain", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    text = ""
    timeout = httpx2.Timeout(30, read=15)  # a deadline for a proxy that would buffer, not a measurement
    with httpx2.stream("POST", replicas.front + "/v1/chat/completions", json=body, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                text += "".join(ch["delta"].get("content") or "" for ch in json.loads(line[6:])["choices"])
                if text:
                    break
        # the model still holds its stream: what arrived was passed on before the stream ended
        assert not replicas.upstream.stream_closed.is_set()
        replicas.upstream.release.set()
        rest = list(lines)
    text += "".join(ch["delta"].get("content") or ""
                    for line in rest if line.startswith("data: {") for ch in json.loads(line[6:])["choices"])
    assert text == "first second third "
    assert [line for line in rest if line][-1] == "data: [DONE]"


def test_a_lost_replica_costs_only_its_conversations_sessions_and_its_in_flight_requests(replicas: Replicas) -> None:
    # R: S2, B16, G6
    conversations, turns = 24, 8
    victim = replicas.gateways[1]
    calls_before_kill = conversations * 2 * 3  # three turns of every conversation, on average, before the kill

    def kill_mid_run() -> None:
        def enough() -> bool:
            with replicas.mcp.cond:
                return sum(replicas.mcp.calls.values()) >= calls_before_kill
        if wait_until(enough, timeout=90):
            victim.process.kill()

    killer = threading.Thread(target=kill_mid_run)
    killer.start()
    seen = asyncio.run(drive(replicas.front, conversations, turns, prefix="lost", seconds=120))
    killer.join()
    assert victim.process.poll() is not None, "the run ended before the replica was killed"

    lost = replicas.label(victim)
    hit = [c for c in seen if lost in c.backends]
    spared = [c for c in seen if lost not in c.backends]
    assert hit and spared
    # conversations on the other replicas saw nothing: no error, one MCP session, one replica
    assert [(c.errors, len(c.sessions), c.breaks, len(c.backends)) for c in spared] == [([], 1, 0, 1)] * len(spared)
    # every request HAProxy logged as failed was on the lost replica and had reached it (a connection
    # was made), so HAProxy could not know whether the replica had begun it and sent it nowhere else
    failed = replicas.proxy.abnormal()
    assert all(r.server == "gateway-2" and r.connect_ms >= 0 for r in failed), [r.line for r in failed]
    for c in hit:
        # the turn it had in flight on the lost replica failed (a 502 or a cut stream from the proxy),
        # and at most the next one: sent the moment the first failed, it can still reach the replica
        # while it is dying, before HAProxy takes it out (3 runs of 33 on 2026-12-04)...
        turns = [int(e.split(" turn ", 1)[1].split(":", 1)[0]) for e in c.errors]
        assert len(turns) <= 2 and all(b == a + 1 for a, b in zip(turns, turns[1:])), (c.errors, [r.line for r in failed])
        assert all("status 502" in e or "transport" in e or "stream ended" in e for e in c.errors), c.errors
        # ...and the conversation went on on one other replica, in one new MCP session (B16)
        assert len(c.backends) <= 2 and len(c.sessions) <= 2, (c.backends, c.sessions)
    assert any(len(c.backends) == 2 and len(c.sessions) == 2 for c in hit)  # (a conversation could end before the kill)
    assert wait_until(lambda: replicas.proxy.states()["gateway-2"] != "UP", timeout=15)


def test_a_request_that_reached_a_replica_is_never_sent_again(replicas: Replicas) -> None:
    # R: S2, B16
    victim = replicas.gateways[0]
    replicas.upstream.release.clear()
    conversation = next(f"once-{i}" for i in range(200) if _served_by(replicas, f"once-{i}") is victim)
    # first model call: run the tool `count`; the second hangs while the replica is killed
    replicas.upstream.push(Reply(tool_calls=[("count", {})]), Reply(content="after the tool", hang=True))
    asked = len(replicas.upstream.requests)
    body = {"model": "held", "messages": [{"role": "user", "content": "count once"}]}
    result: list[httpx2.Response | Exception] = []

    def post() -> None:
        try:
            result.append(httpx2.post(replicas.front + "/v1/chat/completions", json=body, timeout=60,
                                      headers={"x-conversation-id": conversation}))
        except httpx2.HTTPError as exc:
            result.append(exc)

    client = threading.Thread(target=post)
    client.start()
    assert wait_until(lambda: len(replicas.upstream.requests) >= asked + 2, timeout=30)  # the tool ran; the model holds
    with replicas.mcp.cond:
        assert replicas.mcp.calls["count"] == 1
    victim.process.kill()
    client.join(60)
    replicas.upstream.release.set()

    assert len(result) == 1 and isinstance(result[0], httpx2.Response)
    assert result[0].status_code == 502  # HAProxy's answer: the replica died before answering
    with replicas.mcp.cond:
        assert replicas.mcp.calls["count"] == 1  # not sent to another replica: the tool never ran twice
    assert len(replicas.upstream.requests) == asked + 2


def _served_by(replicas: Replicas, conversation: str) -> Gateway:
    """The replica HAProxy sends `conversation` to (asked with a request on route `plain`)."""
    replicas.upstream.push(Reply(content="where"))
    answer = httpx2.post(replicas.front + "/v1/chat/completions", timeout=30, headers={"x-conversation-id": conversation},
                         json={"model": "plain", "messages": [{"role": "user", "content": "where"}]})
    assert answer.status_code == 200, answer.text
    return replicas.gateways[int(replicas.upstream.requests[-1]["model"].removeprefix("backend-"))]


def test_a_console_browser_stays_on_the_replica_that_signed_it_in(replicas: Replicas) -> None:
    # R: S2, C1 -- console sessions live in one replica: HAProxy's cookie keeps the browser there,
    # so every page and REST call of the session finds it (round robin would lose it 2 times in 3)
    with httpx2.Client(base_url=replicas.front, timeout=30) as browser:
        page = browser.get("/console")
        token = re.search(r'name="signin_token" value="([^"]+)"', page.text)
        assert token is not None
        assert browser.post("/console/signin", data={"signin_token": token.group(1), "api_key": ""}).status_code == 303
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', browser.get("/console").text)
        assert csrf is not None
        listed = [browser.get("/bridges").status_code for _ in range(9)]
        changed = browser.delete("/connections/none-such", headers={"x-csrf-token": csrf.group(1)})
        pinned = browser.cookies.get("toolgate_replica")
    assert listed == [200] * 9
    assert changed.status_code == 404  # authenticated by the session (and its token), then not found
    assert pinned in ("r1", "r2", "r3")


# -- one Bridge store for every replica (PostgreSQL) --------------------------------------------


def passthrough(name: str, size: int = 0) -> dict[str, object]:
    """A valid graph: one pipeline `name` from input to output; `size` extra unconnected output nodes
    make it large enough that a torn save would show."""
    extra = [{"id": f"o{i}", "kind": "output", "inputs": ["x"]} for i in range(size)]
    return {"version": 1, "nodes": [{"id": "in1", "kind": "input", "outputs": ["q"]},
                                    {"id": "out1", "kind": "output", "inputs": ["ctx"]}, *extra],
            "edges": [{"id": "e1", "from": {"node": "in1", "port": "q"}, "to": {"node": "out1", "port": "ctx"}}],
            "pipelines": [{"id": f"p_{name}", "name": name, "inputNode": "in1", "outputNode": "out1"}]}


async def tool_names(url: str) -> set[str]:
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30)), mode="legacy") as client:
        return {t.name for t in (await client.list_tools()).tools}


async def test_a_graph_saved_through_one_replica_is_served_by_every_replica_at_once(replicas: Replicas) -> None:
    # R: S2, S1, F12
    a, b, c = (g.url for g in replicas.gateways)
    with httpx2.Client(timeout=30) as http:
        saved = http.put(a + "/bridges/b1/graph", json=passthrough("relay"))
        assert saved.status_code == 200, saved.text
        for other in (b, c):  # no cache to expire: the next read on any replica sees it
            answer = http.get(other + "/bridges/b1/graph")
            assert answer.json() == passthrough("relay") and answer.headers["etag"] == saved.headers["etag"]
    for other in (b, c):
        assert {"relay", "tools__count"} <= await tool_names(other + "/mcp/b1")


async def test_two_replicas_saving_one_graph_at_once_give_one_whole_winner_and_a_conflict(replicas: Replicas) -> None:
    # R: S2
    a, b, c = (g.url for g in replicas.gateways)
    async with httpx2.AsyncClient(timeout=30) as http:
        start = await http.put(a + "/bridges/b1/graph", json=passthrough("start"))
        tag = start.headers["etag"]
        for round_ in range(5):  # several rounds: the two saves race for real
            saves = await asyncio.gather(
                http.put(a + "/bridges/b1/graph", json=passthrough(f"from_a_{round_}", 40), headers={"if-match": tag}),
                http.put(b + "/bridges/b1/graph", json=passthrough(f"from_b_{round_}", 60), headers={"if-match": tag}),
            )
            assert sorted(s.status_code for s in saves) == [200, 409], [s.text for s in saves]
            won, lost = sorted(saves, key=lambda s: s.status_code)
            assert "saved by someone else meanwhile" in lost.json()["error"]["message"]
            stored = await http.get(c + "/bridges/b1/graph")
            assert stored.json() == json.loads(won.request.content)  # the winner's graph, whole
            assert stored.headers["etag"] == won.headers["etag"]
            tag = won.headers["etag"]


async def test_the_audit_records_of_every_replica_are_one_log(replicas: Replicas) -> None:
    # R: S2, S1, F5
    for i, gateway in enumerate(replicas.gateways):
        async with Client(streamable_http_client(gateway.url + "/mcp/b1", http_client=httpx2.AsyncClient(timeout=30)),
                          mode="legacy") as client:
            for _ in range(i + 1):
                assert not (await client.call_tool("tools__count", {})).is_error
    query = "SELECT count(*) FROM audit WHERE action = 'mcp.tool_call' AND resource = 'tools__count'"
    assert wait_until(lambda: postgres.scalar(replicas.database, query) == 6, timeout=15)  # 1 + 2 + 3, one table
    with httpx2.Client(timeout=30) as http:  # and any replica's GET /audit shows all of them
        for gateway in replicas.gateways:
            records = http.get(gateway.url + "/audit", params={"resource": "tools__count"}).json()["data"]
            assert len(records) == 6


def test_a_bridge_tool_call_that_reached_a_replica_is_never_run_again_by_the_load_balancer(replicas: Replicas) -> None:
    # R: S2, B16 -- a session-less (2026-07-28) tools/call is one self-contained POST that any replica
    # could run: when its replica dies mid-call, HAProxy answers with an error and does not send it
    # to another replica (retry-on conn-failure only)
    version = "2026-07-28"
    meta = {"io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": version, "mcp-method": "tools/call", "mcp-name": "tools__count"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "tools__count", "arguments": {}, "_meta": meta}}
    replicas.tools.delay = 60.0  # the tool holds until its replica is killed
    outcome: list[httpx2.Response | Exception] = []

    def call() -> None:
        try:
            with httpx2.Client(timeout=60) as http:
                answer = http.post(replicas.front + "/mcp/b1", headers=headers, json=body)
                answer.read()
                outcome.append(answer)
        except httpx2.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert replicas.tools.wait_for(lambda: replicas.tools.calls["count"] == 1, timeout=30)
    busy = [name for name, n in replicas.proxy.in_flight("bridge_mcp").items() if n > 0]
    assert len(busy) == 1, busy
    replicas.gateways[int(busy[0].removeprefix("gateway-")) - 1].process.kill()
    caller.join(60)
    assert len(outcome) == 1
    answer = outcome[0]
    if isinstance(answer, httpx2.Response):  # 502 before the SSE stream began, else a stream cut short
        assert answer.status_code == 502 or '"result"' not in answer.text, answer.text
    with replicas.tools.cond:
        assert replicas.tools.calls["count"] == 1  # its answer came back without a second run anywhere
