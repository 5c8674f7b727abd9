"""Ids, port names and endpoints are checked where they come in (issue 32, N4).

A node id holding `"` was stored, and the editor went blank for every member who opened the bridge;
connection endpoints took `<`, `>` and `"`. Now a graph save refuses node ids and port names outside
`[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}` (400, the problem naming the node, its id JSON-quoted), and the
REST API takes a connection endpoint only as a plain http(s) URL (400 naming `endpoint`). A graph
stored before the rule still loads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import BridgeApp, CallLog, bridge_app, graph, mcp_http, node, pipeline, tool_node, tool_server
from tests.support.http_server import ServerThread, serve


@dataclass
class World:
    url: str
    tools_url: str
    app: BridgeApp
    server: ServerThread


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with serve(tool_server(CallLog(), delay=0)) as tools:
        config = BridgeConfig.model_validate({
            "database": "bridge.db", "apiEndpointAllowPrivate": ["127.0.0.0/8"],
            "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp"}],
            "bridges": [{"id": "b1", "owner": "alice", "connections": ["tools"]}],
        })
        app = bridge_app(config, tmp_path_factory.mktemp("n4"))
        with serve(app.app) as bridge:
            yield World(bridge.url, tools.url, app, bridge)


async def call(world: World, method: str, path: str, body: Any = None) -> httpx2.Response:
    async with mcp_http("alice-key") as http:
        return await http.request(method, f"{world.url}{path}", json=body)


def link(edge_id: str, source: tuple[str, str], target: tuple[str, str]) -> dict[str, Any]:
    """An edge between (node, port) pairs (ids may hold '.', which `edge("e1", "a.p", "b.q")` splits on)."""
    return {"id": edge_id, "from": {"node": source[0], "port": source[1]}, "to": {"node": target[0], "port": target[1]}}


def echo_graph(tool_id: str = "t1", port: str = "text") -> dict[str, Any]:
    """in1 -> <tool_id> (echo, its argument wired as `port`) -> out1, pipeline `say`."""
    return graph(
        [node("in1", "input", outputs=[port]),
         tool_node(tool_id, "echo", "tools", inputs=[port], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [link("e1", ("in1", port), (tool_id, port)), link("e2", (tool_id, "result"), ("out1", "said"))],
        [pipeline("say")],
    )


@pytest.mark.parametrize("bad_id", ['t"1', "t<b>1", "t 1", "t1\n", "-t1", "t" * 65, "t\u00e91"])
async def test_a_node_id_outside_the_pattern_is_refused_naming_it_json_quoted_and_nothing_is_saved(
    world: World, bad_id: str
) -> None:
    # R: F8, C7 (issue 32, N4: a node id holding '"' was stored and blanked the editor)
    before = await call(world, "GET", "/bridges/b1/graph")
    answer = await call(world, "PUT", "/bridges/b1/graph", echo_graph(tool_id=bad_id))
    assert answer.status_code == 400
    shown = json.dumps(bad_id[:64] + ("…" if len(bad_id) > 64 else ""))
    assert answer.json()["error"]["problems"] == [{"rule": "bad node id", "ids": [bad_id], "message":
                                                   f"bad node ids (1 to 64 letters, digits or _ . : -, not starting with . : -): {shown}"}]
    after = await call(world, "GET", "/bridges/b1/graph")
    assert (after.json(), after.headers["etag"]) == (before.json(), before.headers["etag"])


@pytest.mark.parametrize("bad_port", ['te"xt', "<text>", "te xt"])
async def test_a_port_name_outside_the_pattern_is_refused_naming_its_node(world: World, bad_port: str) -> None:
    # R: F8, C7
    answer = await call(world, "PUT", "/bridges/b1/graph", echo_graph(port=bad_port))
    assert answer.status_code == 400
    (problem,) = answer.json()["error"]["problems"]
    assert (problem["rule"], problem["ids"]) == ("bad port name", ["in1", "t1", "e1"])
    assert f'node "t1" port {json.dumps(bad_port)}' in problem["message"]


@pytest.mark.parametrize("good_id", ["t1", "m1", "x1", "ReduceSum", "node_2", "a.b:c-d", "9", "_t", "t" * 64])
async def test_every_id_the_editor_and_the_tests_write_is_saved(world: World, good_id: str) -> None:
    # R: F8 (the editor names nodes <kind prefix><n>: in1, t1, m1, out1; ports after a tool's arguments)
    data = echo_graph(tool_id=good_id, port="query_2.v-x:y")
    data["nodes"][1]["config"] = {"text": "hi"}  # echo's required argument (C7): not wired under that port name
    saved = await call(world, "PUT", "/bridges/b1/graph", data)
    assert saved.status_code == 200, saved.text


async def test_a_graph_stored_before_the_rule_still_loads_and_runs(world: World) -> None:
    # R: F8, F9 (a stored graph with a bad id is not lost: it loads, its pipeline runs; the next save must fix it)
    stored = echo_graph(tool_id='t"1')
    stored["pipelines"] = [{"id": "p1", "name": "legacy", "inputNode": "in1", "outputNode": "out1"}]
    assert world.server.loop is not None
    future = asyncio.run_coroutine_threadsafe(
        world.app.service.store.save_graph(("alice", "b1"), stored, 0.0, "alice"), world.server.loop)
    await asyncio.wait_for(asyncio.wrap_future(future), timeout=10)
    loaded = await call(world, "GET", "/bridges/b1/graph")
    bridge = await call(world, "GET", "/bridges/b1")
    ran = await call(world, "POST", "/bridges/b1/run", {"name": "legacy", "arguments": {"text": "hi"}})
    assert (loaded.status_code, loaded.json()["nodes"][1]["id"]) == (200, 't"1')
    assert bridge.json()["pipelines"] == ["legacy"]
    assert {k: v for k, v in ran.json().items() if k != "nodes"} == {
        "isError": False, "text": '{"said": "hi"}', "structuredContent": {"said": "hi"}}
    assert [n["id"] for n in ran.json()["nodes"]] == ["in1", 't"1', "out1"]  # shown as data, as it is
    resaved = await call(world, "PUT", "/bridges/b1/graph", loaded.json())
    assert [p["rule"] for p in resaved.json()["error"]["problems"]] == ["bad node id"]


BAD_ENDPOINTS = [
    'http://127.0.0.1:9/mcp"><script>x</script>', "http://127.0.0.1:9/<mcp>", "http://127.0.0.1:9/m cp",
    "http://127.0.0.1:9/mcp\n", "http://127.0.0.1:9/m\x00cp", "http://127.0.0.1:9/m\u00e9cp", "javascript:alert(1)",
    "ftp://127.0.0.1/mcp", "HTTP://127.0.0.1:9/mcp", "http:///mcp", "http://user:pw@127.0.0.1:9/mcp", "http://127.0.0.1:99999/mcp",
    "http://127.0.0.1:9/" + "a" * 2048, 42,
]


@pytest.mark.parametrize("case", range(len(BAD_ENDPOINTS)))
async def test_an_endpoint_that_is_not_a_plain_http_url_is_refused_on_create_and_change_naming_the_field(
    world: World, case: int
) -> None:
    # R: F3, C2 (issue 32, N4: endpoints took '<', '>' and '"')
    endpoint, plain = BAD_ENDPOINTS[case], f"{world.tools_url}/mcp"
    made = await call(world, "POST", "/connections", {"id": f"fresh{case}", "endpoint": endpoint})
    assert (await call(world, "POST", "/connections", {"id": f"plain{case}", "endpoint": plain})).status_code == 201
    changed = await call(world, "PATCH", f"/connections/plain{case}", {"endpoint": endpoint})
    for answer in (made, changed):
        assert answer.status_code == 400
        assert answer.json()["error"]["message"].startswith("endpoint: ")
        assert not isinstance(endpoint, str) or endpoint not in answer.text
    listed = {c["id"]: c["endpoint"] for c in (await call(world, "GET", "/connections")).json()["data"]}
    assert f"fresh{case}" not in listed and listed[f"plain{case}"] == plain


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:{port}/mcp", "http://127.0.0.1:{port}/mcp?x=1&y=%22",
                                      "http://localhost:{port}/mcp#frag"])
async def test_a_plain_http_url_is_taken(world: World, endpoint: str) -> None:
    # R: F3
    port = world.tools_url.rsplit(":", 1)[1]
    made = await call(world, "POST", "/connections", {"id": "fine", "endpoint": f"{world.tools_url}/mcp"})
    changed = await call(world, "PATCH", "/connections/fine", {"endpoint": endpoint.format(port=port)})
    assert made.status_code in (201, 409) and changed.status_code == 200, changed.text
