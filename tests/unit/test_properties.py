"""Property-based tests (hypothesis) for the two places where user-controlled data meets structure:

- Bridge graphs (F8): `parse_graph` never crashes on any JSON value, and it accepts a graph exactly
  when the F8 rules — checked here independently (`f8_problems`) — hold; a rejection names the rules
  broken and the ids involved. Inputs are random JSON, and near-valid graphs: a valid graph built
  by construction, then mutated (duplicate ids, dangling edges, back edges, bad names and ports,
  wrong shapes).
- Prefetch token substitution (B6, B8): for any user message, identity and conversation id, the
  arguments keep the JSON structure of `prefetchArguments` and every value comes out verbatim:
  nothing a user typed is evaluated as a template.

(The request-body property for G6 is in tests/integration/test_gateway_fuzz.py.)
"""

from __future__ import annotations

import copy
import graphlib
import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.bridge.validation import GraphInvalid, parse_graph
from gateway.identity import Identity
from gateway.plugins import PluginContext
from plugins.mcp_bridge.config import McpBridgeConfig
from plugins.mcp_bridge.prefetch import ContextGatherer
from plugins.mcp_bridge.templating import render_result

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SUBSTITUTION = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- JSON values -------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=16,
)

# -- F8, checked independently -----------------------------------------------------------------

KINDS = ("input", "tool", "merge", "output", "transform")
NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_-]{0,63}")
"""The tool-name pattern of the seeds, matched against the whole name."""
RULES = {
    "shape", "duplicate node id", "duplicate edge id", "duplicate pipeline id", "duplicate pipeline name", "missing node",
    "bad tool name", "bad port", "bad pipeline boundary", "bad pipeline name", "cycle", "one edge per input port",
}


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _shape_ok(data: Any) -> bool:
    """The seed's graph shape: `{"version": 1, "nodes": [...], "edges": [...], "pipelines": [...]}`
    (each key may be left out); nodes, edges and pipelines as in seed 000; editors' extra keys on
    nodes, edges and pipelines are allowed."""
    if not isinstance(data, dict) or not set(data) <= {"version", "nodes", "edges", "pipelines"}:
        return False
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, (int, float)) or version != 1:
        return False
    nodes, edges, pipelines = data.get("nodes", []), data.get("edges", []), data.get("pipelines", [])
    if not all(isinstance(x, list) and all(isinstance(i, dict) for i in x) for x in (nodes, edges, pipelines)):
        return False
    for node in nodes:
        if not _text(node.get("id")) or node.get("kind") not in KINDS:
            return False
        if any(node.get(k) is not None and not isinstance(node[k], str) for k in ("connectionId", "tool")):
            return False
        if node["kind"] == "tool" and not (_text(node.get("connectionId")) and _text(node.get("tool"))):
            return False
        if not isinstance(node.get("config", {}), dict) or not all(_str_list(node.get(k, [])) for k in ("inputs", "outputs")):
            return False
    for edge in edges:
        if not _text(edge.get("id")):
            return False
        for end in ("from", "to"):
            ref = edge.get(end)
            if not isinstance(ref, dict) or set(ref) != {"node", "port"} or not (_text(ref["node"]) and _text(ref["port"])):
                return False
    for pipeline in pipelines:
        if not all(_text(pipeline.get(k)) for k in ("id", "name", "inputNode", "outputNode")):
            return False
        if pipeline.get("description") is not None and not isinstance(pipeline["description"], str):
            return False
    return True


def _duplicates(values: list[str]) -> set[str]:
    return {v for v, n in Counter(values).items() if n > 1}


def f8_problems(data: Any) -> dict[str, set[str]] | None:
    """The F8 rules `data` breaks, each with the ids it names: None for a wrong shape, {} when valid.

    Written from SPEC F6–F8 and docs/bridge.md, not from the validator: ids unique; edges and
    pipelines name existing nodes; tool names match the pattern; an edge leaves an output port and
    enters an input port that exist where the node declares its ports; pipelines run from an input
    node to an output node and are named like tools (no `__`); no cycle."""
    if not _shape_ok(data):
        return None
    nodes, edges, pipelines = data.get("nodes", []), data.get("edges", []), data.get("pipelines", [])
    found: dict[str, set[str]] = {}

    def rule(name: str, *ids: str) -> None:
        found.setdefault(name, set()).update(ids)

    for what, ids in (
        ("node id", [n["id"] for n in nodes]),
        ("edge id", [e["id"] for e in edges]),
        ("pipeline id", [p["id"] for p in pipelines]),
        ("pipeline name", [p["name"] for p in pipelines]),
    ):
        if _duplicates(ids):
            rule(f"duplicate {what}", *_duplicates(ids))
    by_id = {n["id"]: n for n in nodes}  # with duplicate ids the last one stands (and the graph is refused anyway)
    for edge in edges:
        if edge["from"]["node"] not in by_id or edge["to"]["node"] not in by_id:
            rule("missing node", edge["id"])
    for p in pipelines:
        if p["inputNode"] not in by_id or p["outputNode"] not in by_id:
            rule("missing node", p["id"])
    for node in nodes:
        if node["kind"] == "tool" and not NAME.fullmatch(node["tool"]):
            rule("bad tool name", node["id"])
    for edge in edges:
        src, dst = by_id.get(edge["from"]["node"]), by_id.get(edge["to"]["node"])
        if src is not None and (
            src["kind"] == "output"
            or (src["kind"] != "transform" and src.get("outputs") and edge["from"]["port"] not in src["outputs"])
        ):
            rule("bad port", edge["id"])
        if dst is not None and (
            dst["kind"] == "input"
            or (dst["kind"] != "transform" and dst.get("inputs") and edge["to"]["port"] not in dst["inputs"])
        ):
            rule("bad port", edge["id"])
    for p in pipelines:
        start, end = by_id.get(p["inputNode"]), by_id.get(p["outputNode"])
        if (start is not None and start["kind"] != "input") or (end is not None and end["kind"] != "output"):
            rule("bad pipeline boundary", p["id"])
        if not NAME.fullmatch(p["name"]) or "__" in p["name"]:
            rule("bad pipeline name", p["id"])
    arriving: dict[tuple[str, str], list[str]] = {}  # C7: an input port takes one edge (an edge of an id used
    duplicated_edges = _duplicates([e["id"] for e in edges])  # twice, or from a missing node, is reported as that)
    for edge in edges:
        if edge["from"]["node"] in by_id and edge["id"] not in duplicated_edges:
            arriving.setdefault((edge["to"]["node"], edge["to"]["port"]), []).append(edge["id"])
    for (node_id, _), edge_ids in arriving.items():
        if len(edge_ids) > 1:
            rule("one edge per input port", node_id, *edge_ids)
    if _has_cycle(by_id, edges):
        rule("cycle")
    return found


def _has_cycle(by_id: dict[str, Any], edges: list[dict[str, Any]]) -> bool:
    """A depth-first search over the edges between existing nodes."""
    after: dict[str, list[str]] = {node: [] for node in by_id}
    for edge in edges:
        if edge["from"]["node"] in by_id and edge["to"]["node"] in by_id:
            after[edge["from"]["node"]].append(edge["to"]["node"])
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str) -> bool:
        state[node] = 1
        for nxt in after[node]:
            if state.get(nxt) == 1 or (nxt not in state and visit(nxt)):
                return True
        state[node] = 2
        return False

    return any(node not in state and visit(node) for node in after)


def check_verdict(data: Any) -> None:
    """`parse_graph(data)` raises nothing but `GraphInvalid`, accepts exactly what F8 allows, and a
    rejection names the rules broken (and, for each, the ids involved)."""
    snapshot = copy.deepcopy(data)
    expected = f8_problems(data)
    try:
        graph = parse_graph(data)
    except GraphInvalid as exc:
        problems = exc.problems
    else:
        assert expected == {}, f"accepted a graph that breaks F8: {expected or 'wrong shape'}"
        assert graph.dump() == {"version": 1, "nodes": [], "edges": [], "pipelines": [], **snapshot, "version": 1}
        return
    finally:
        assert data == snapshot, "validation changed its input"
    assert problems, "a rejection without a reason"
    assert all(p.rule in RULES and p.message and all(isinstance(i, str) for i in p.ids) for p in problems)
    rules = {p.rule for p in problems}
    if expected is None:
        assert rules == {"shape"}
        return
    assert expected != {}, f"refused a valid graph: {[p.message for p in problems]}"
    got = {p.rule: set(p.ids) for p in problems}
    if "missing node" in expected:  # an edge to a missing node may also be reported in a cycle through it
        got.pop("cycle", None)
        expected.pop("cycle", None)
    assert set(got) == set(expected), [p.message for p in problems]
    for name, ids in expected.items():
        if name == "cycle":  # the ids around one cycle, first repeated at the end
            ring = list(next(p.ids for p in problems if p.rule == "cycle"))
            links = {(e["from"]["node"], e["to"]["node"]) for e in data.get("edges", [])}
            assert len(ring) >= 2 and ring[0] == ring[-1] and all(pair in links for pair in zip(ring, ring[1:])), ring
        else:
            assert got[name] == ids, (name, got[name], ids)


# -- graphs: random JSON --------------------------------------------------------------------------

node_like = st.fixed_dictionaries(
    {"id": json_values, "kind": st.sampled_from(KINDS) | json_values},
    optional={"tool": json_values, "connectionId": json_values, "inputs": json_values, "outputs": json_values,
              "config": json_values, "label": json_values},
)
graph_like = st.fixed_dictionaries(
    {},
    optional={"version": st.just(1) | json_values, "nodes": st.lists(node_like, max_size=3) | json_values,
              "edges": st.lists(json_values, max_size=3) | json_values, "pipelines": st.lists(json_values, max_size=3) | json_values,
              "extra": json_values},
)


@SETTINGS
@given(data=json_values | graph_like)
@example(data={"version": True})
@example(data={"nodes": [{"id": "a", "kind": "input", "model_config": 1, "__dict__": {}}]})
def test_any_json_is_a_graph_or_a_graph_invalid_never_a_crash(data: Any) -> None:
    # R: F8
    check_verdict(data)


# -- graphs: near-valid, by mutation ---------------------------------------------------------------

PORTS = ("query", "result", "a", "b", "out", "ctx")
GOOD_TOOLS = ("search", "get_page", "A-1", "x" * 64)
BAD_NAMES = ("9 lives!", "a b", "x" * 65, "ok\n", "_x", "a.b", "a__b")


@st.composite
def valid_graphs(draw: st.DrawFn) -> dict[str, Any]:
    """A graph valid by construction: input → tools/merges → output, edges only forward."""
    n_middle = draw(st.integers(0, 4))
    nodes: list[dict[str, Any]] = [{"id": "in1", "kind": "input", "outputs": draw(st.lists(st.sampled_from(PORTS), min_size=1, max_size=2, unique=True))}]
    for i in range(n_middle):
        if draw(st.booleans()):
            node = {"id": f"t{i}", "kind": "tool", "connectionId": "gh", "tool": draw(st.sampled_from(GOOD_TOOLS)),
                    "inputs": ["query"], "outputs": ["result"], "config": {"per_page": i}}
        else:
            node = {"id": f"m{i}", "kind": "merge", "inputs": ["a", "b"], "outputs": ["out"]}
        nodes.append(node)
    nodes.append({"id": "out1", "kind": "output", "inputs": ["ctx"], "position": {"x": 1, "y": 2}})
    edges = []
    taken: set[tuple[str, str]] = set()  # one edge per input port (C7)
    pairs = draw(st.lists(st.tuples(st.integers(0, len(nodes) - 1), st.integers(0, len(nodes) - 1)), max_size=6))
    for n, (i, j) in enumerate(pairs):
        i, j = sorted((i, j))
        if i == j:
            continue
        src, dst = nodes[i], nodes[j]
        port = draw(st.sampled_from(dst["inputs"]))
        if (dst["id"], port) in taken:
            continue
        taken.add((dst["id"], port))
        edges.append({"id": f"e{n}", "from": {"node": src["id"], "port": draw(st.sampled_from(src["outputs"]))},
                      "to": {"node": dst["id"], "port": port}})
    names = draw(st.lists(st.sampled_from(GOOD_TOOLS), max_size=2, unique=True))
    pipelines = [{"id": f"p{k}", "name": name, "inputNode": "in1", "outputNode": "out1", "description": "d"} for k, name in enumerate(names)]
    return {"version": 1, "nodes": nodes, "edges": edges, "pipelines": pipelines}


def _pick(draw: st.DrawFn, items: list[Any]) -> Any:
    return items[draw(st.integers(0, len(items) - 1))]


def mutate(draw: st.DrawFn, graph: dict[str, Any]) -> None:
    """One change that may (or, by chance, may not) break an F8 rule."""
    nodes, edges, pipelines = graph["nodes"], graph["edges"], graph["pipelines"]
    if not nodes:
        return  # an earlier change dropped every node
    ids = [n["id"] for n in nodes]
    how = draw(st.sampled_from([
        "duplicate node", "drop node", "back edge", "self loop", "dangling edge", "bad port", "bad tool name",
        "duplicate edge", "pipeline boundary", "pipeline name", "duplicate pipeline", "change kind", "undeclared ports",
    ]))
    if how == "duplicate node":
        _pick(draw, nodes)["id"] = _pick(draw, ids)
    elif how == "drop node":
        nodes.remove(_pick(draw, nodes))
    elif how in ("back edge", "self loop"):
        src, dst = _pick(draw, nodes), _pick(draw, nodes)
        if how == "self loop":
            dst = src
        src_port = _pick(draw, src.get("outputs") or ["out"])
        dst_port = _pick(draw, dst.get("inputs") or ["in"])
        edges.append({"id": "back", "from": {"node": src["id"], "port": src_port}, "to": {"node": dst["id"], "port": dst_port}})
    elif how == "dangling edge" and edges:
        _pick(draw, edges)[draw(st.sampled_from(["from", "to"]))]["node"] = "ghost"
    elif how == "bad port" and edges:
        _pick(draw, edges)[draw(st.sampled_from(["from", "to"]))]["port"] = "nope"
    elif how == "bad tool name":
        tools = [n for n in nodes if n["kind"] == "tool"]
        if tools:
            _pick(draw, tools)["tool"] = draw(st.sampled_from(BAD_NAMES))
    elif how == "duplicate edge" and len(edges) > 1:
        edges[1]["id"] = edges[0]["id"]
    elif how == "pipeline boundary" and pipelines:
        _pick(draw, pipelines)[draw(st.sampled_from(["inputNode", "outputNode"]))] = _pick(draw, ids)
    elif how == "pipeline name" and pipelines:
        _pick(draw, pipelines)["name"] = draw(st.sampled_from(BAD_NAMES))
    elif how == "duplicate pipeline" and pipelines:
        pipelines.append({**pipelines[0], "id": draw(st.sampled_from(["p0", "p9"]))})
    elif how == "change kind":
        _pick(draw, nodes)["kind"] = draw(st.sampled_from(KINDS))
    elif how == "undeclared ports":
        node = _pick(draw, nodes)
        node.pop("inputs", None)
        node.pop("outputs", None)


def break_shape(draw: st.DrawFn, graph: dict[str, Any]) -> None:
    """One change to the shape (done last: the changes above expect the shape they built)."""
    how = draw(st.sampled_from(["junk field", "drop key", "version", "top-level key"]))
    owners = [item for key in ("nodes", "edges", "pipelines") for item in graph[key] if item]
    if how == "junk field" and owners:
        owner = _pick(draw, owners)
        owner[_pick(draw, sorted(owner))] = draw(json_values)
    elif how == "drop key" and owners:
        owner = _pick(draw, owners)
        del owner[_pick(draw, sorted(owner))]
    elif how == "version":
        graph["version"] = draw(st.sampled_from([2, True, "1", None, 1.0, 0]))
    elif how == "top-level key":
        graph[draw(st.sampled_from(["nodes2", "meta", "position"]))] = {}


@st.composite
def near_valid_graphs(draw: st.DrawFn) -> dict[str, Any]:
    graph = draw(valid_graphs())
    for _ in range(draw(st.integers(0, 3))):
        mutate(draw, graph)
    if draw(st.integers(0, 3)) == 0:
        break_shape(draw, graph)
    return graph


@SETTINGS
@given(data=valid_graphs())
def test_graphs_valid_by_construction_are_accepted(data: dict[str, Any]) -> None:
    # R: F6, F7, F8
    assert f8_problems(data) == {}
    check_verdict(data)


@SETTINGS
@given(data=near_valid_graphs())
@example(data={"version": 1, "nodes": [{"id": "m1", "kind": "merge", "inputs": ["a"], "outputs": ["out"]},
                                       {"id": "out1", "kind": "output", "inputs": ["ctx"]}],
               "edges": [{"id": "e1", "from": {"node": "m1", "port": "nope"}, "to": {"node": "out1", "port": "ctx"}}],
               "pipelines": []})
def test_a_near_valid_graph_is_accepted_exactly_when_f8_holds_and_a_rejection_names_rules_and_ids(data: dict[str, Any]) -> None:
    # R: F8
    check_verdict(data)


def test_the_graph_oracle_itself_tells_broken_graphs_apart() -> None:
    # the independent checker must be able to say no, or the properties above prove nothing
    base: dict[str, Any] = {"version": 1, "nodes": [{"id": "a", "kind": "input", "outputs": ["q"]},
                                                    {"id": "b", "kind": "output", "inputs": ["r"]}],
                            "edges": [{"id": "e", "from": {"node": "a", "port": "q"}, "to": {"node": "b", "port": "r"}}],
                            "pipelines": [{"id": "p", "name": "go", "inputNode": "a", "outputNode": "b"}]}
    assert f8_problems(base) == {}
    cyclic = copy.deepcopy(base)
    cyclic["nodes"].append({"id": "c", "kind": "merge"})
    cyclic["edges"] += [{"id": "e2", "from": {"node": "b", "port": "x"}, "to": {"node": "c", "port": "y"}},
                        {"id": "e3", "from": {"node": "c", "port": "x"}, "to": {"node": "a", "port": "y"}}]
    assert set(f8_problems(cyclic) or {}) == {"cycle", "bad port"}
    assert f8_problems({**base, "version": True}) is None
    assert f8_problems({**base, "pipelines": [{"id": "p", "name": "a__b", "inputNode": "b", "outputNode": "a"}]}) == {
        "bad pipeline name": {"p"}, "bad pipeline boundary": {"p"}}
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter({"a": {"c"}, "c": {"b"}, "b": {"a"}})
    with pytest.raises(graphlib.CycleError):
        sorter.prepare()


# -- prefetch token substitution (B6, B8) ------------------------------------------------------------

TOKENS = ("last_user_message", "user_id", "org_id", "display_name", "session_id")
HOSTILE = ["{{user_id}}", "{{ session_id }}", "{% for x in y %}{{ x }}{% endfor %}", "{{ 7*7 }}", "${7*7}", '"}, "admin": true, "x": "',
           "{{result}}", "\\u0000\x00", "{{last_user_message}}{{last_user_message}}"]
user_text = st.text() | st.sampled_from(HOSTILE) | st.lists(st.sampled_from(HOSTILE) | st.text(max_size=5), max_size=4).map("".join)
literal = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=6)
"""Template text that cannot take part in a token, so the expected result can be built piece by piece."""


@st.composite
def templates(draw: st.DrawFn) -> tuple[list[str], list[str | None]]:
    """(pieces, token names): a string value of `prefetchArguments` as literal pieces and tokens
    (`{{user_id}}`, also written `{{ user_id }}`); the names line up with the pieces (None: literal)."""
    pieces: list[str] = []
    names: list[str | None] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            name = draw(st.sampled_from(TOKENS))
            pieces.append(draw(st.sampled_from(["{{%s}}", "{{ %s }}", "{{%s }}"])) % name)
            names.append(name)
        else:
            pieces.append(draw(literal))
            names.append(None)
    return pieces, names


def gatherer(arguments: dict[str, Any]) -> ContextGatherer:
    # The arguments are set after validation: the config refuses unknown `{{tokens}}` (A4), and
    # these properties check that substitution leaves any that got past it as written.
    config = McpBridgeConfig.model_validate({"type": "mcp_bridge", "endpoint": "http://127.0.0.1:9/mcp", "prefetchTool": "search"})
    config = config.model_copy(update={"prefetchArguments": arguments})

    async def unused(*args: Any) -> Any:
        raise AssertionError("no call is made to build the arguments")

    return ContextGatherer(config, unused, lambda text: text, lambda status: None)


def request_context(values: dict[str, str]) -> PluginContext:
    async def inspect(item: Any) -> None:
        return None

    identity = Identity(user_id=values["user_id"], org_id=values["org_id"], display_name=values["display_name"])
    return PluginContext(identity=identity, conversation_key=values["session_id"], request_id="r", route="assistant",
                         deadline=0.0, inspect=inspect)


def chat_request(message: str, as_parts: bool) -> dict[str, Any]:
    content: Any = [{"type": "text", "text": message}] if as_parts else message
    return {"model": "assistant", "messages": [{"role": "system", "content": "{{user_id}}"}, {"role": "user", "content": "earlier"},
                                               {"role": "assistant", "content": "{{org_id}}"}, {"role": "user", "content": content}]}


def same_shape(before: Any, after: Any, path: str = "$") -> None:
    """`after` has the JSON structure of `before`: same keys in the same order, same list lengths,
    the same type at every node, and every non-string leaf unchanged."""
    assert type(before) is type(after), f"{path}: {type(before).__name__} became {type(after).__name__}"
    if isinstance(before, dict):
        assert list(before) == list(after), f"{path}: keys changed"
        for key in before:
            same_shape(before[key], after[key], f"{path}.{key}")
    elif isinstance(before, list):
        assert len(before) == len(after), f"{path}: length changed"
        for i, (a, b) in enumerate(zip(before, after)):
            same_shape(a, b, f"{path}[{i}]")
    elif not isinstance(before, str):
        assert before == after, f"{path}: a non-string value changed"


token_strings = templates().map(lambda t: "".join(t[0]))
argument_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | token_strings | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6) | token_strings, children, max_size=3),
    max_leaves=12,
)
identity_values = st.fixed_dictionaries({name: user_text for name in TOKENS})


@SUBSTITUTION
@given(arguments=st.dictionaries(st.text(max_size=6) | token_strings, argument_values, max_size=4), values=identity_values,
       as_parts=st.booleans())
@example(arguments={"q": "{{last_user_message}}", "{{user_id}}": ["{{org_id}}", 1, True, None, 1.5]},
         values={name: '"}, "admin": true, "{{user_id}}": "' for name in TOKENS}, as_parts=False)
def test_substitution_never_changes_the_structure_of_the_prefetch_arguments(
    arguments: dict[str, Any], values: dict[str, str], as_parts: bool
) -> None:
    # R: B6
    result = gatherer(arguments).prefetch_arguments(request_context(values), chat_request(values["last_user_message"], as_parts))
    same_shape(arguments, result)
    assert json.loads(json.dumps(result)) == result
    text_without_tokens = [s for s in _strings(arguments) if "{{" not in s]
    assert all(s in _strings(result) for s in text_without_tokens)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


@SUBSTITUTION
@given(template=templates(), values=identity_values, as_parts=st.booleans())
@example(template=(["{{last_user_message}}"], ["last_user_message"]), values={name: "{{ 7*7 }}{{user_id}}{% if %}" for name in TOKENS},
         as_parts=True)
def test_every_token_is_replaced_by_its_value_verbatim_and_values_are_never_read_as_templates(
    template: tuple[list[str], list[str | None]], values: dict[str, str], as_parts: bool
) -> None:
    # R: B6
    pieces, names = template
    arguments = {"value": "".join(pieces), "nested": [{"value": "".join(pieces)}]}
    result = gatherer(arguments).prefetch_arguments(request_context(values), chat_request(values["last_user_message"], as_parts))
    expected = "".join(values[name] if name else piece for piece, name in zip(pieces, names))
    assert result == {"value": expected, "nested": [{"value": expected}]}


inert = st.sampled_from(["{{nope}}", "{% if x %}", "{{ 7*7 }}", "{{}}", "{{ User_Id }}", "{{result}}", "{{user-id}}"])
"""Brace text that is not one of the B6 tokens; none of them ends in `{{`, so with brace-free text
between them no token can form."""


@SUBSTITUTION
@given(pieces=st.lists(inert | literal, max_size=6), values=identity_values)
def test_text_that_is_not_a_known_token_is_left_as_written(pieces: list[str], values: dict[str, str]) -> None:
    # R: B6
    template = "".join(pieces)
    result = gatherer({"q": template}).prefetch_arguments(request_context(values), chat_request(values["last_user_message"], False))
    assert result == {"q": template}


@SUBSTITUTION
@given(before=literal, after=literal, result=user_text)
def test_the_result_template_wraps_any_tool_output_verbatim(before: str, after: str, result: str) -> None:
    # R: B8
    assert render_result(before + "{{result}}" + after, result) == before + result + after
    assert render_result(before + "{{ result }}" + after + "{{user_id}}", result) == before + result + after + "{{user_id}}"
