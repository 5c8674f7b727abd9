"""Types for a pipeline's arguments inferred from the graph (C7): an input port wired to a tool's
argument takes that argument's JSON Schema, as the connection lists it. The `tools/list` entry of a
pipeline uses them for ports its `inputs` does not type; the editor reads them to prefill `inputs`
(`GET /bridges/{id}/graph/inferred-inputs`)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from gateway.bridge.graph import Graph, Pipeline

ToolsOf = Callable[[str], Awaitable[list[types.Tool] | None]]
"""A connection id's tools as listed (cached), or None when they cannot be had."""


def wired_arguments(graph: Graph, pipeline: Pipeline) -> dict[str, list[tuple[str, str, str]]]:
    """Per output port of the pipeline's input node: the (connection, tool, argument) it feeds."""
    nodes = graph.node_map()
    wired: dict[str, list[tuple[str, str, str]]] = {}
    for edge in graph.edges:
        target = nodes.get(edge.target.node)
        if edge.source.node != pipeline.inputNode or target is None or target.kind != "tool":
            continue
        if target.connectionId and target.tool:
            wired.setdefault(edge.source.port, []).append((target.connectionId, target.tool, edge.target.port))
    return wired


async def inferred_inputs(graph: Graph, pipeline: Pipeline, tools_of: ToolsOf) -> dict[str, dict[str, Any]]:
    """A schema per input port of the pipeline: the first wired tool argument's that its
    connection lists (`{}` for a port wired to none, or whose connection cannot be listed)."""
    node = graph.node_map().get(pipeline.inputNode)
    ports = node.outputs if node is not None else []
    wired = wired_arguments(graph, pipeline)
    connections = sorted({c for feeds in wired.values() for c, _, _ in feeds})
    listed = dict(zip(connections, await asyncio.gather(*(tools_of(c) for c in connections))))
    inferred: dict[str, dict[str, Any]] = {}
    for port in ports:
        inferred[port] = {}
        for connection, tool_name, argument in wired.get(port, []):
            tool = next((t for t in listed.get(connection) or [] if t.name == tool_name), None)
            properties = tool.input_schema.get("properties") if tool is not None else None
            if isinstance(properties, dict) and isinstance(properties.get(argument), dict):
                inferred[port] = copy.deepcopy(properties[argument])
                break
    return inferred
