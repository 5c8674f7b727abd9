"""The rules of a graph that need the bridge's connections (C7), checked when it is saved:

- every tool node's connection is one of the bridge's, exists, and is usable by it (the bridge
  owner's view, the allow-list: federation.py);
- when the connection answers a tool listing within `LIST_SECONDS`: the tool exists, every
  *required* argument of its input schema is wired by an edge or given a constant in `config`, and
  each constant has the type the schema gives it.

A connection that cannot be listed does not block the save (offline editing): its nodes are saved
unchecked, with a warning each. Every message names its node by id (`node "t1": ...`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from gateway.bridge.graph import Graph, Node
from gateway.bridge.records import BridgeRecord, ConnectionRecord
from gateway.bridge.upstream import UpstreamCallFailed
from gateway.bridge.validation import GraphProblem, quoted
from gateway.egress import UNUSABLE

LIST_SECONDS = 5.0
"""How long a save waits for a connection's tool listing before saving unchecked."""

ListTools = Callable[[ConnectionRecord], Awaitable[list[types.Tool]]]


@dataclass
class Checked:
    """What the connection checks found: problems refuse the save, warnings go with it."""

    problems: list[GraphProblem] = field(default_factory=list)
    warnings: list[GraphProblem] = field(default_factory=list)


async def check_tools(
    graph: Graph, bridge: BridgeRecord, usable: dict[str, ConnectionRecord], list_tools: ListTools,
    seconds: float = LIST_SECONDS,
) -> Checked:
    """Problems and warnings of the graph's tool nodes; `usable`: the bridge's connections by id as
    its callers reach them (federation.py)."""
    found = Checked()
    tool_nodes = [n for n in graph.nodes if n.kind == "tool"]
    foreign = tuple(n.id for n in tool_nodes if n.connectionId not in bridge.connections)
    if foreign:  # the existing message (F8), each node named
        names = ", ".join(f"{n} ({graph.node_map()[n].connectionId})" for n in foreign)
        message = f"tool node(s) name a connection that is not part of bridge {bridge.id}: {names}"
        found.problems.append(GraphProblem("unknown connection", foreign, message, nodes=foreign))
    for node in tool_nodes:
        if node.connectionId in bridge.connections and node.connectionId not in usable:
            found.problems.append(_problem(
                "missing connection", node, f"connection {quoted(node.connectionId)} does not exist or cannot be used "
                "by this bridge (deleted, another owner's, or outside the API endpoint allow-list)"))
    wanted = sorted({n.connectionId for n in tool_nodes if n.connectionId in usable and n.connectionId})
    listings = await asyncio.gather(*(_listing(usable[c], list_tools, seconds) for c in wanted))
    tools_of = dict(zip(wanted, listings))
    for node in tool_nodes:
        listed = tools_of.get(node.connectionId or "")
        if listed is None:
            continue
        if isinstance(listed, str):
            found.warnings.append(_problem(
                "unchecked", node, f"connection {quoted(node.connectionId)} could not be listed ({listed}); "
                f"tool {quoted(node.tool)} and its arguments were not checked"))
            continue
        tool = next((t for t in listed if t.name == node.tool), None)
        if tool is None:
            found.problems.append(_problem(
                "unknown tool", node, f"connection {quoted(node.connectionId)} has no tool {quoted(node.tool)}"))
            continue
        problems, warnings = argument_problems(graph, node, tool.input_schema)
        found.problems += problems
        found.warnings += warnings
    return found


async def _listing(conn: ConnectionRecord, list_tools: ListTools, seconds: float) -> list[types.Tool] | str:
    """The connection's tools, or why they could not be had within `seconds`."""
    try:
        return await asyncio.wait_for(list_tools(conn), seconds)
    except TimeoutError:  # made through the REST API: no more than any failure says (no port oracle, SSRF)
        return UNUSABLE if conn.source == "api" else f"no answer within {seconds:g}s"
    except UpstreamCallFailed as exc:
        return exc.reason


def argument_problems(graph: Graph, node: Node, schema: dict[str, Any]) -> tuple[list[GraphProblem], list[GraphProblem]]:
    """Required arguments neither wired nor given; constants of the wrong type (problems); constants
    the schema does not list (warnings: the server may take them)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)] if isinstance(schema.get("required"), list) else []
    wired = {e.target.port for e in graph.edges if e.target.node == node.id}
    problems: list[GraphProblem] = []
    warnings: list[GraphProblem] = []
    for name in required:
        if name not in wired and name not in node.config:
            problems.append(_problem("required argument", node, f"required argument {quoted(name)} of {quoted(node.tool)} "
                                     "is neither wired by an edge nor given a constant"))
    for name, value in node.config.items():
        prop = properties.get(name)
        if not isinstance(prop, dict):
            if properties:
                warnings.append(_problem("unlisted argument", node, f"constant {quoted(name)}: {quoted(node.tool)} "
                                         "does not list this argument"))
            continue
        wrong = type_problem(value, prop)
        if wrong is not None:
            problems.append(_problem("constant type", node, f"constant {quoted(name)} {wrong}"))
    return problems, warnings


_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def type_problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` does not fit `schema` (its `type`, `enum`, `const`, and `anyOf`/`oneOf`
    branches; nested items are not checked), or None when it fits."""
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key, []) if isinstance(b, dict)]
    if branches and all(type_problem(value, b) is not None for b in branches):
        return "fits none of the types the tool takes"
    declared = schema.get("type")
    kinds = [declared] if isinstance(declared, str) else [k for k in declared if isinstance(k, str)] if isinstance(declared, list) else []
    known = [k for k in kinds if k in _TYPES]
    if known and not any(_TYPES[k](value) for k in known):
        return f"must be {' or '.join(known)}, not {_json_type(value)}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        shown = ", ".join(quoted(v) if isinstance(v, str) else str(v) for v in schema["enum"][:10])
        return f"must be one of {shown}"
    if "const" in schema and value != schema["const"]:
        return f"must be {schema['const']!r}"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array"}.get(type(value), type(value).__name__)


def _problem(rule: str, node: Node, message: str) -> GraphProblem:
    return GraphProblem(rule, (node.id,), f"node {quoted(node.id)}: {message}", nodes=(node.id,))
