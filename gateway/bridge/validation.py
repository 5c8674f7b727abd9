"""Graph validation (F8): one problem per rule, each naming the rule and the ids involved."""

from __future__ import annotations

import graphlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.bridge.graph import TOOL_NAME, Graph, is_tool_name
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.messages import joined, readable


@dataclass(frozen=True)
class GraphProblem:
    """Why a graph was rejected: the rule broken, the ids involved, and a sentence saying so.
    `nodes` and `edges`: the ids among `ids` that are a node's or an edge's (where the editor shows it)."""

    rule: str
    ids: tuple[str, ...]
    message: str
    nodes: tuple[str, ...] = ()
    edges: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.message

    def entries(self) -> list[dict[str, str | None]]:
        """`{"node", "edge", "message"}` per node and edge it names (one with both None when it
        names neither): the REST API's `errors` and `warnings` (C7)."""
        named = [{"node": n, "edge": None, "message": self.message} for n in self.nodes]
        named += [{"node": None, "edge": e, "message": self.message} for e in self.edges]
        return named or [{"node": None, "edge": None, "message": self.message}]


class GraphInvalid(ValueError):
    """A graph that cannot be saved; `problems` holds one entry per broken rule."""

    def __init__(self, problems: list[GraphProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems

    def entries(self) -> list[dict[str, str | None]]:
        """Every problem as `{"node", "edge", "message"}` entries (`GraphProblem.entries`)."""
        return [entry for p in self.problems for entry in p.entries()]


GRAPH_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}")
"""What node ids and port names are: 1 to 64 letters, digits, `_ . : -`, not
starting with `. : -` (what the editor writes: `in1`, `t2`, `e3`; ports named after a tool's
arguments). Every page and selector that shows one can then use it as it is; a stored graph saved
before the rule still loads and runs."""


def quoted(value: object) -> str:
    """A value from a graph as a message shows it: JSON-quoted and ASCII-escaped (a quote, `<` or a
    control character in an id reads as data, never as markup), cut at 64 characters."""
    text = value if isinstance(value, str) else str(value)
    return json.dumps(text[:64] + ("…" if len(text) > 64 else ""))


def shown(node_id: str) -> str:
    """A node id in a message: as it is when it matches `GRAPH_ID`, else `quoted`."""
    return node_id if GRAPH_ID.fullmatch(node_id) else quoted(node_id)


def parse_graph(data: Any, limits: BridgeLimits | None = None) -> Graph:
    """Validate `data` (parsed JSON) and return the graph, or raise `GraphInvalid`. A graph past
    `limits` (bytes, nodes, edges, ports per node) is refused before anything else is read."""
    too_large = size_problems(data, limits or BridgeLimits())
    if too_large:
        raise GraphInvalid(too_large)
    try:
        graph = Graph.model_validate(data)
    except ValidationError as exc:
        raise GraphInvalid([shape_problem(data, err) for err in exc.errors()]) from None
    problems = graph_problems(graph)
    if problems:
        raise GraphInvalid(problems)
    return graph


def shape_problem(data: Any, err: Any) -> GraphProblem:
    """A pydantic error of the graph's shape as a problem: a node's or edge's by its id when it has
    one (`node "t1": tool: required`, not `nodes.1.tool`), its message readable (messages.py)."""
    loc = tuple(err["loc"])
    msg = readable(err)
    if len(loc) >= 2 and loc[0] in ("nodes", "edges", "pipelines") and isinstance(loc[1], int):
        items = data.get(loc[0]) if isinstance(data, dict) else None
        item = items[loc[1]] if isinstance(items, list) and loc[1] < len(items) else None
        item_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(item_id, str) and item_id:
            kind = loc[0][:-1]
            field = ".".join(str(p) for p in loc[2:])
            text = f"wrong shape: {kind} {quoted(item_id)}: {joined(field, msg) if field else msg}"
            return GraphProblem("shape", (item_id,), text, nodes=(item_id,) if kind == "node" else (),
                                edges=(item_id,) if kind == "edge" else ())
    where = ".".join(str(p) for p in loc) or "(top level)"
    return GraphProblem("shape", (where,), f"wrong shape: {joined(where, msg)}")


def size_problems(data: Any, limits: BridgeLimits) -> list[GraphProblem]:
    """The bounds of `bridge.limits` a raw graph passes (cheap checks first: counts, then bytes)."""
    if not isinstance(data, dict):
        return []
    problems: list[GraphProblem] = []
    for key, bound in (("nodes", limits.graphNodes), ("edges", limits.graphEdges)):
        items = data.get(key)
        if isinstance(items, list) and len(items) > bound:
            problems.append(GraphProblem("too large", (key,), f"too large: {len(items)} {key}; at most {bound}"))
    nodes = data.get("nodes")
    crowded = [
        str(n.get("id"))
        for n in (nodes if isinstance(nodes, list) else [])[: limits.graphNodes]
        if isinstance(n, dict)
        and any(isinstance(n.get(k), list) and len(n[k]) > limits.portsPerNode for k in ("inputs", "outputs"))
    ]
    if crowded:
        problems.append(
            GraphProblem("too large", tuple(crowded), f"too large: node(s) {', '.join(map(shown, crowded[:10]))} have more than "
                         f"{limits.portsPerNode} input or output ports", nodes=tuple(crowded[:10]))
        )
    if not problems:
        try:
            size = len(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8"))
        except (RecursionError, ValueError):
            size = limits.graphBytes + 1
        if size > limits.graphBytes:
            problems.append(GraphProblem("too large", ("(graph)",), f"too large: the graph is over {limits.graphBytes} bytes"))
    return problems


def graph_problems(graph: Graph) -> list[GraphProblem]:
    """Every rule of F8 the (well-shaped) graph breaks, in a fixed order. Ids and port names come
    first: while one is malformed, only those problems are reported (no other message quotes it)."""
    problems = name_problems(graph)
    if problems:
        return problems
    for what, ids in (
        ("node id", [n.id for n in graph.nodes]),
        ("edge id", [e.id for e in graph.edges]),
        ("pipeline id", [p.id for p in graph.pipelines]),
        ("pipeline name", [p.name for p in graph.pipelines]),
    ):
        dup = _duplicates(ids)
        if dup:
            problems.append(GraphProblem(f"duplicate {what}", dup, f"duplicate {what}s: {', '.join(dup)}",
                                         nodes=dup if what == "node id" else (), edges=dup if what == "edge id" else ()))
    nodes = graph.node_map()
    missing = [("edge", e.id, ref.node) for e in graph.edges for ref in (e.source, e.target) if ref.node not in nodes]
    missing += [
        ("pipeline", p.id, ref) for p in graph.pipelines for ref in (p.inputNode, p.outputNode) if ref not in nodes
    ]
    if missing:
        ids = tuple(dict.fromkeys(owner for _, owner, _ in missing))
        text = "; ".join(f"{kind} {owner} -> {ref}" for kind, owner, ref in missing)
        edges = tuple(dict.fromkeys(owner for kind, owner, _ in missing if kind == "edge"))
        problems.append(GraphProblem("missing node", ids, f"reference to a missing node: {text}", edges=edges))
    bad_tools = tuple(n.id for n in graph.nodes if n.kind == "tool" and not is_tool_name(n.tool))
    if bad_tools:
        names = ", ".join(f"{i} ({nodes[i].tool!r})" for i in bad_tools)
        problems.append(GraphProblem("bad tool name", bad_tools, f"tool name must match {TOOL_NAME.pattern}: {names}",
                                     nodes=bad_tools))
    bad_ports = _bad_ports(graph)
    if bad_ports:
        ids = tuple(dict.fromkeys(edge_id for edge_id, _ in bad_ports))
        text = "; ".join(f"edge {edge_id}: {why}" for edge_id, why in bad_ports)
        problems.append(GraphProblem("bad port", ids, f"edge joins ports that do not exist: {text}", edges=ids))
    problems += crowded_ports(graph)
    boundary = _bad_boundaries(graph)
    if boundary:
        ids = tuple(dict.fromkeys(pipeline_id for pipeline_id, _ in boundary))
        text = "; ".join(f"pipeline {pipeline_id}: {why}" for pipeline_id, why in boundary)
        problems.append(GraphProblem("bad pipeline boundary", ids, f"bad pipeline boundary: {text}"))
    bad_names = tuple(p.id for p in graph.pipelines if not is_tool_name(p.name) or "__" in p.name)
    if bad_names:
        problems.append(
            GraphProblem(
                "bad pipeline name",
                bad_names,
                f"pipeline name must match {TOOL_NAME.pattern} without '__': {', '.join(bad_names)}",
            )
        )
    problems += typed_input_problems(graph)
    cycle = find_cycle(graph)
    if cycle:
        problems.append(GraphProblem("cycle", tuple(cycle), f"cycle: {' -> '.join(cycle)}",
                                     nodes=tuple(dict.fromkeys(cycle))))
    return problems


def typed_input_problems(graph: Graph) -> list[GraphProblem]:
    """A pipeline's `inputs` and `required` name output ports of its input node (C7)."""
    nodes = graph.node_map()
    problems = []
    for p in graph.pipelines:
        start = nodes.get(p.inputNode)
        if start is None or start.kind != "input":
            continue  # reported as a boundary problem
        named = [(f"input {quoted(port)}", port) for port in (p.inputs or {})]
        named += [(f"required input {quoted(port)}", port) for port in (p.required or [])]
        unknown = [what for what, port in named if port not in start.outputs]
        if unknown:
            problems.append(GraphProblem(
                "unknown pipeline input", (p.id,),
                f"pipeline {quoted(p.name)}: {', '.join(unknown[:10])} is not a port of its input node {quoted(start.id)}",
                nodes=(start.id,)))
    return problems


def name_problems(graph: Graph) -> list[GraphProblem]:
    """Node ids and port names that do not match `GRAPH_ID`, each problem naming the node involved
    (or the edge, for a port it names), ids and names JSON-quoted (`quoted`)."""
    problems: list[GraphProblem] = []
    bad_ids = tuple(dict.fromkeys(n.id for n in graph.nodes if not GRAPH_ID.fullmatch(n.id)))
    if bad_ids:
        problems.append(GraphProblem("bad node id", bad_ids, f"bad node ids ({_GRAPH_ID_TEXT}): "
                                     f"{', '.join(map(quoted, bad_ids[:10]))}", nodes=bad_ids[:10]))
    ports = [(f"node {quoted(n.id)}", n.id, p) for n in graph.nodes for p in (*n.inputs, *n.outputs)]
    ports += [(f"edge {quoted(e.id)}", e.id, ref.port) for e in graph.edges for ref in (e.source, e.target)]
    bad_ports = [(where, owner, port) for where, owner, port in ports if not GRAPH_ID.fullmatch(port)]
    if bad_ports:
        text = ", ".join(f"{where} port {quoted(port)}" for where, _, port in bad_ports[:10])
        shown_ports = bad_ports[:10]
        problems.append(GraphProblem(
            "bad port name", tuple(dict.fromkeys(o for _, o, _ in bad_ports)), f"bad port names ({_GRAPH_ID_TEXT}): {text}",
            nodes=tuple(dict.fromkeys(o for w, o, _ in shown_ports if w.startswith("node "))),
            edges=tuple(dict.fromkeys(o for w, o, _ in shown_ports if w.startswith("edge "))),
        ))
    return problems


_GRAPH_ID_TEXT = "1 to 64 letters, digits or _ . : -, not starting with . : -"


def find_cycle(graph: Graph) -> list[str]:
    """Node ids around one cycle of the graph (first id repeated at the end), or []."""
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for node in graph.nodes:
        sorter.add(node.id)
    for edge in graph.edges:
        sorter.add(edge.target.node, edge.source.node)
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        ring = list(exc.args[1][:-1])  # in edge order: each node feeds the next
        order = {node.id: i for i, node in enumerate(graph.nodes)}
        first = min(range(len(ring)), key=lambda i: order.get(ring[i], len(order)))
        ring = ring[first:] + ring[:first]  # start at the node the graph lists first
        return [*ring, ring[0]]
    return []


def crowded_ports(graph: Graph) -> list[GraphProblem]:
    """One problem per input port that more than one edge arrives at (C7: which value would win
    is not the editor's to guess), naming the node and the edges."""
    arriving: dict[tuple[str, str], list[str]] = {}
    nodes = graph.node_map()
    twice = set(_duplicates([e.id for e in graph.edges]))
    for edge in graph.edges:  # an edge from a missing node, or of an id used twice, is reported as that
        if edge.source.node in nodes and edge.id not in twice:
            arriving.setdefault((edge.target.node, edge.target.port), []).append(edge.id)
    return [
        GraphProblem("one edge per input port", (node_id, *edge_ids),
                     f"node {quoted(node_id)}: input port {quoted(port)} has {len(edge_ids)} edges "
                     f"({', '.join(map(quoted, edge_ids[:10]))}); an input port takes one edge",
                     nodes=(node_id,), edges=tuple(edge_ids[:10]))
        for (node_id, port), edge_ids in arriving.items() if len(edge_ids) > 1
    ]


def _duplicates(ids: list[str]) -> tuple[str, ...]:
    return tuple(sorted(i for i, n in Counter(ids).items() if n > 1))


def _bad_ports(graph: Graph) -> list[tuple[str, str]]:
    """(edge id, why) for every edge end on a port its node does not have."""
    nodes = graph.node_map()
    bad: list[tuple[str, str]] = []
    for edge in graph.edges:
        src, dst = nodes.get(edge.source.node), nodes.get(edge.target.node)
        if src is not None:
            if src.kind == "output":
                bad.append((edge.id, f"output node {src.id} has no output ports"))
            elif src.kind in ("input", "tool", "merge") and src.outputs and edge.source.port not in src.outputs:
                bad.append((edge.id, f"node {src.id} has no output port {edge.source.port!r}"))
        if dst is not None:
            if dst.kind == "input":
                bad.append((edge.id, f"input node {dst.id} has no input ports"))
            elif dst.kind != "transform" and dst.inputs and edge.target.port not in dst.inputs:
                bad.append((edge.id, f"node {dst.id} has no input port {edge.target.port!r}"))
    return bad


def _bad_boundaries(graph: Graph) -> list[tuple[str, str]]:
    """(pipeline id, why) for every pipeline end that is not a node of the right kind."""
    nodes = graph.node_map()
    bad: list[tuple[str, str]] = []
    for p in graph.pipelines:
        start, end = nodes.get(p.inputNode), nodes.get(p.outputNode)
        if start is not None and start.kind != "input":
            bad.append((p.id, f"inputNode {start.id} is a {start.kind} node, not an input node"))
        if end is not None and end.kind != "output":
            bad.append((p.id, f"outputNode {end.id} is a {end.kind} node, not an output node"))
    return bad
