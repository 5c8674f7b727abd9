"""The graph rules a save checks against the bridge's connections (C7), and bridges without a
connection refused — against the real Bridge over loopback with a real MCP tool server (`echo`
takes a required `text` and an optional `prefix`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.bridge_servers import ServedBridge, edge, graph, mcp_http, node, pipeline, rest, served_bridge, tool_node


World = ServedBridge


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with served_bridge(tmp_path_factory.mktemp("rules"), lambda tools: {
        "database": "rules.db",
        "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools}/mcp"}],
        "bridges": [{"id": "rules", "owner": "alice", "connections": ["tools"]}],
    }) as found:
        yield found


call = rest


def echo(config: dict[str, Any] | None = None, wired: bool = True, tool: str = "echo", connection: str = "tools") -> dict[str, Any]:
    """in1.text → t1 (echo; `text` wired unless `wired` is False) → out1.said."""
    edges = [edge("e2", "t1.result", "out1.said")]
    if wired:
        edges.insert(0, edge("e1", "in1.text", "t1.text"))
    return graph(
        [node("in1", "input", outputs=["text"]),
         tool_node("t1", tool, connection, inputs=["text", "prefix"], outputs=["result"], config=config or {}),
         node("out1", "output", inputs=["said"])],
        edges, [pipeline("say")],
    )


async def save(world: World, data: dict[str, Any], bridge: str = "rules") -> Any:
    return await call(world, "PUT", f"/bridges/{bridge}/graph", body=data)


def errors(answer: Any) -> list[tuple[str | None, str | None, str]]:
    assert answer.status_code == 400, answer.text
    return [(e["node"], e["edge"], e["message"]) for e in answer.json()["error"]["errors"]]


async def test_a_graph_whose_tool_arguments_are_wired_or_given_saves_without_warnings(world: World) -> None:
    # R: C7
    wired = await save(world, echo())
    assert wired.status_code == 200 and wired.json()["warnings"] == []
    given = await save(world, echo({"text": "fixed", "prefix": ">"}, wired=False))
    assert given.status_code == 200 and given.json()["warnings"] == []
    again = await save(world, given.json())  # an answer sent back as it is saves again
    assert again.status_code == 200


async def test_a_required_argument_neither_wired_nor_given_is_refused_naming_the_node(world: World) -> None:
    # R: C7
    answer = await save(world, echo(wired=False))
    message = 'node "t1": required argument "text" of "echo" is neither wired by an edge nor given a constant'
    assert errors(answer) == [("t1", None, message)]
    assert answer.json()["error"]["message"] == message


async def test_a_tool_the_connection_does_not_list_is_refused(world: World) -> None:
    # R: C7
    assert errors(await save(world, echo(tool="nope"))) == [("t1", None, 'node "t1": connection "tools" has no tool "nope"')]


async def test_constants_are_type_checked_against_the_tools_schema(world: World) -> None:
    # R: C7
    answer = await save(world, echo({"text": 5, "prefix": ["x"]}, wired=False))
    assert errors(answer) == [
        ("t1", None, 'node "t1": constant "text" must be string, not number'),
        ("t1", None, 'node "t1": constant "prefix" must be string, not array'),
    ]
    unlisted = await save(world, echo({"colour": "red"}))
    assert unlisted.status_code == 200
    assert unlisted.json()["warnings"] == [
        {"node": "t1", "edge": None, "message": 'node "t1": constant "colour": "echo" does not list this argument'}]


async def test_one_edge_per_input_port_and_every_problem_listed_at_once(world: World) -> None:
    # R: C7
    data = echo(wired=True, tool="nope")
    data["edges"].append(edge("e3", "in1.text", "t1.text"))
    found = errors(await save(world, data))
    crowded = 'node "t1": input port "text" has 2 edges ("e1", "e3"); an input port takes one edge'
    assert ("t1", None, crowded) in found and (None, "e1", crowded) in found and (None, "e3", crowded) in found
    assert len(found) == 3  # the tool is not looked for while the graph's own shape is wrong
    data["edges"].pop()
    data["nodes"].append(tool_node("t2", "echo", "tools", inputs=["text"], outputs=["result"]))
    both = errors(await save(world, data))
    assert [n for n, _, _ in both] == ["t1", "t2"]


async def test_a_shape_error_names_the_node_by_its_id(world: World) -> None:
    # R: C7
    data = echo()
    data["nodes"][1] = {"id": "t1", "kind": "tool", "tool": "echo"}
    assert errors(await save(world, data)) == [
        ("t1", None, "wrong shape: node \"t1\": a tool node needs 'connectionId' and 'tool'")]


async def test_an_unreachable_connection_saves_with_a_warning_and_a_deleted_one_is_refused(world: World) -> None:
    # R: C7
    made = await call(world, "POST", "/connections", body={"id": "offline", "endpoint": "http://127.0.0.1:9/mcp"})
    assert made.status_code == 201
    assert (await call(world, "POST", "/bridges", body={"id": "away", "connections": ["offline"]})).status_code == 201
    saved = await save(world, echo(wired=False, connection="offline"), bridge="away")
    assert saved.status_code == 200
    (warning,) = saved.json()["warnings"]
    assert warning["node"] == "t1" and warning["message"].startswith('node "t1": connection "offline" could not be listed')
    assert (await call(world, "DELETE", "/connections/offline")).status_code == 204
    refused = errors(await save(world, echo(connection="offline"), bridge="away"))
    assert refused[0][0] == "t1" and 'connection "offline" does not exist' in refused[0][2]


async def test_a_bridge_needs_a_connection_on_create_and_on_change(world: World) -> None:
    # R: C7
    empty = await call(world, "POST", "/bridges", body={"id": "hollow", "connections": []})
    assert empty.status_code == 400 and "at least one connection" in empty.json()["error"]["message"]
    assert (await call(world, "POST", "/bridges", body={"id": "hollow"})).status_code == 400
    made = await call(world, "POST", "/connections", body={"id": "keep", "endpoint": f"{world.tools_url}/mcp"})
    assert made.status_code == 201
    assert (await call(world, "POST", "/bridges", body={"id": "hollow", "connections": ["keep"]})).status_code == 201
    emptied = await call(world, "PATCH", "/bridges/hollow", body={"connections": []})
    assert emptied.status_code == 400 and "at least one connection" in emptied.json()["error"]["message"]


async def test_pydantic_messages_are_readable_on_the_rest_api(world: World) -> None:
    # R: C7
    bad = await call(world, "POST", "/bridges", body={"id": "no good", "connections": ["tools"]})
    assert bad.json()["error"]["message"] == "id must be 1 to 64 letters, digits, _ or -, starting with a letter or digit"


async def listed_pipeline(world: World, name: str) -> Any:
    async with Client(streamable_http_client(f"{world.url}/mcp/rules", http_client=mcp_http("alice-key"))) as client:
        return next(t for t in (await client.list_tools()).tools if t.name == name)


def two_inputs(**fields: Any) -> dict[str, Any]:
    """in1.text → echo.text, in1.note unwired; pipeline `say` with `fields` (description, inputs, required)."""
    data = echo()
    data["nodes"][0]["outputs"] = ["text", "note"]
    data["pipelines"][0].update(fields)
    return data


async def test_a_pipeline_lists_its_description_and_typed_or_inferred_inputs(world: World) -> None:
    # R: C7, F9
    assert (await save(world, two_inputs())).status_code == 200
    inferred = await call(world, "GET", "/bridges/rules/graph/inferred-inputs?pipeline=say")
    assert inferred.status_code == 200
    assert inferred.json() == {"inputs": {"text": {"title": "Text", "type": "string"}, "note": {}}}
    plain = await listed_pipeline(world, "say")
    assert plain.description == "Pipeline say (bridge:rules)"  # the default, as before
    assert plain.input_schema == {"type": "object", "properties": {"text": {"title": "Text", "type": "string"}, "note": {}}}

    typed = two_inputs(description="Say it back", inputs={"note": {"type": "integer", "minimum": 1}}, required=["text"])
    assert (await save(world, typed)).status_code == 200
    listed = await listed_pipeline(world, "say")
    assert listed.description == "Say it back"
    assert listed.input_schema == {
        "type": "object", "required": ["text"],
        "properties": {"text": {"title": "Text", "type": "string"}, "note": {"type": "integer", "minimum": 1}},
    }


async def test_pipeline_inputs_must_name_ports_of_its_input_node(world: World) -> None:
    # R: C7
    answer = await save(world, two_inputs(inputs={"ghost": {"type": "string"}}, required=["text", "spook"]))
    assert errors(answer) == [("in1", None, 'pipeline "say": input "ghost", required input "spook" is not a port of '
                                            'its input node "in1"')]
    assert (await save(world, two_inputs(inputs={"text": "string"}))).status_code == 400  # a schema is an object


async def test_inferred_inputs_need_a_saved_pipeline_of_the_callers_bridge(world: World) -> None:
    # R: C7, F2
    assert (await call(world, "GET", "/bridges/rules/graph/inferred-inputs?pipeline=nope")).status_code == 404
    assert (await call(world, "GET", "/bridges/rules/graph/inferred-inputs?pipeline=say", key="bob-key")).status_code == 404
