"""Graph validation (F6–F8): the seed's graph passes; each broken rule is its own problem naming its ids."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.bridge.validation import GraphInvalid, parse_graph

SEED_GRAPH: dict[str, Any] = {
    "version": 1,
    "nodes": [
        {"id": "in1", "kind": "input", "outputs": ["query"], "position": {"x": 280, "y": 40}, "label": "Input"},
        {"id": "t1", "kind": "tool", "connectionId": "gh", "tool": "search_repositories", "inputs": ["query"], "outputs": ["result"]},
        {"id": "out1", "kind": "output", "inputs": ["ctx"]},
    ],
    "edges": [
        {"id": "e1", "from": {"node": "in1", "port": "query"}, "to": {"node": "t1", "port": "query"}},
        {"id": "e2", "from": {"node": "t1", "port": "result"}, "to": {"node": "out1", "port": "ctx"}},
    ],
    "pipelines": [{"id": "p1", "name": "find", "inputNode": "in1", "outputNode": "out1"}],
}


def problems(data: dict[str, Any]) -> list[tuple[str, tuple[str, ...], str]]:
    with pytest.raises(GraphInvalid) as caught:
        parse_graph(data)
    return [(p.rule, p.ids, p.message) for p in caught.value.problems]


def seed() -> dict[str, Any]:
    return copy.deepcopy(SEED_GRAPH)


def test_the_seed_graph_is_valid_and_keeps_editor_fields() -> None:
    # R: F6, F7, F8
    graph = parse_graph(seed())
    assert graph.dump() == SEED_GRAPH


def test_a_cycle_names_the_nodes_around_it() -> None:
    # R: F8
    data = seed()
    data["edges"] = [e for e in data["edges"] if e["id"] != "e1"]  # t1.query takes one edge (C7): the loop's
    data["edges"].append({"id": "e3", "from": {"node": "t1", "port": "result"}, "to": {"node": "t1", "port": "query"}})
    assert problems(data) == [("cycle", ("t1", "t1"), "cycle: t1 -> t1")]


def test_duplicate_ids_are_one_problem_per_kind() -> None:
    # R: F8
    data = seed()
    data["nodes"].append(dict(data["nodes"][2]))
    data["edges"].append(dict(data["edges"][1]))
    assert problems(data) == [
        ("duplicate node id", ("out1",), "duplicate node ids: out1"),
        ("duplicate edge id", ("e2",), "duplicate edge ids: e2"),
    ]


def test_edges_and_pipelines_naming_missing_nodes_are_one_problem_naming_them() -> None:
    # R: F8
    data = seed()
    data["edges"][0]["from"]["node"] = "nowhere"
    data["pipelines"][0]["outputNode"] = "gone"
    assert problems(data) == [
        ("missing node", ("e1", "p1"), "reference to a missing node: edge e1 -> nowhere; pipeline p1 -> gone")
    ]


@pytest.mark.parametrize("name", ["1abc", "has space", "dot.ted", "x" * 65, ""])
def test_a_tool_name_outside_the_pattern_is_rejected(name: str) -> None:
    # R: F8
    data = seed()
    data["nodes"][1]["tool"] = name
    found = problems(data)
    assert [p[0] for p in found] == (["shape"] if name == "" else ["bad tool name"])


def test_pipeline_ends_must_be_an_input_and_an_output_node() -> None:
    # R: F8
    data = seed()
    data["pipelines"][0]["inputNode"] = "t1"
    assert problems(data) == [
        ("bad pipeline boundary", ("p1",), "bad pipeline boundary: pipeline p1: inputNode t1 is a tool node, not an input node")
    ]


def test_wrong_shapes_are_reported_with_their_path() -> None:
    # R: F8
    assert problems({"version": 2, "nodes": "many"}) == [
        ("shape", ("version",), "wrong shape: version must be 1"),  # R: C7 — readable, not pydantic's words
        ("shape", ("nodes",), "wrong shape: nodes must be a list"),
    ]
    assert problems({"nodes": [{"id": "t", "kind": "tool"}]})[0][1:] == (  # R: C7 — the node by its id
        ("t",), "wrong shape: node \"t\": a tool node needs 'connectionId' and 'tool'"
    )
    assert problems({"nodes": [{"kind": "tool"}]})[0][2] == "wrong shape: nodes.0.id is required"


def test_an_edge_to_a_port_the_node_does_not_declare_is_rejected() -> None:
    # R: F7
    data = seed()
    data["edges"][0]["to"]["port"] = "q"
    assert problems(data) == [("bad port", ("e1",), "edge joins ports that do not exist: edge e1: node t1 has no input port 'q'")]


def test_pipeline_names_must_be_unique_tool_names() -> None:
    # R: F8, F12
    data = seed()
    data["pipelines"].append({"id": "p2", "name": "find", "inputNode": "in1", "outputNode": "out1"})
    data["pipelines"].append({"id": "p3", "name": "gh__find", "inputNode": "in1", "outputNode": "out1"})
    assert [p[0] for p in problems(data)] == ["duplicate pipeline name", "bad pipeline name"]


def test_a_transform_node_is_accepted_in_a_saved_graph() -> None:
    # R: F6
    data = seed()
    data["nodes"].append({"id": "x1", "kind": "transform"})
    assert [n.kind for n in parse_graph(data).nodes][-1] == "transform"


def test_a_tool_or_pipeline_name_with_a_trailing_newline_is_rejected() -> None:
    # R: F8
    data = seed()
    data["nodes"][1]["tool"] = "search_repositories\n"
    data["pipelines"][0]["name"] = "find\n"
    assert [(p[0], p[1]) for p in problems(data)] == [("bad tool name", ("t1",)), ("bad pipeline name", ("p1",))]


def test_problems_name_ids_that_hold_spaces_and_colons_whole() -> None:
    # R: F8
    data = seed()
    data["edges"][0]["id"] = "edge one: a"
    data["edges"][0]["from"]["node"] = "nowhere"
    data["edges"][1]["id"] = "e:2"
    data["edges"][1]["to"]["port"] = "nope"
    data["pipelines"][0]["id"] = "p: 1"
    data["pipelines"][0]["inputNode"] = "t1"
    assert [(p[0], p[1]) for p in problems(data)] == [
        ("missing node", ("edge one: a",)),
        ("bad port", ("e:2",)),
        ("bad pipeline boundary", ("p: 1",)),
    ]
