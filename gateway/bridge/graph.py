"""The graph a bridge stores (F6–F8): nodes, ports, edges and the pipelines drawn on it.

Shape as in seed 000: `{"version": 1, "nodes": [...], "edges": [...], "pipelines": [...]}`.
Extra keys the editor keeps (`position`, `label`, ...) are accepted and stored as given.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")
"""The tool-name pattern of the seeds: tool nodes' tools and pipeline names must match it.
Use `is_tool_name` (or `fullmatch`): with `match`, `$` also accepts a trailing newline."""


def is_tool_name(name: str | None) -> bool:
    """True when the whole of `name` matches the tool-name pattern (no trailing newline)."""
    return name is not None and TOOL_NAME.fullmatch(name) is not None

NodeKind = Literal["input", "tool", "merge", "output", "transform"]


class Node(BaseModel):
    """One node. `input` outputs are the caller's arguments; `output` inputs are what the caller gets;
    a `tool` node calls `tool` on connection `connectionId` with `{...config, ...inputs}`."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    kind: NodeKind
    connectionId: str | None = None
    tool: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tool_fields(self) -> "Node":
        if self.kind == "tool" and (not self.connectionId or not self.tool):
            raise ValueError("a tool node needs 'connectionId' and 'tool'")
        return self


class PortRef(BaseModel):
    """One end of an edge: a node id and one of its ports."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1)
    port: str = Field(min_length=1)


class Edge(BaseModel):
    """Joins an output port of one node to an input port of another (F7)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str = Field(min_length=1)
    source: PortRef = Field(alias="from")
    target: PortRef = Field(alias="to")


class Pipeline(BaseModel):
    """A named subgraph: called as tool `name`, runs what `outputNode` depends on (F9). `inputs`
    types its arguments (a JSON Schema per output port of its input node) and `required` names
    those a caller must give (C7); both shown in the `tools/list` entry."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    description: str | None = Field(default=None, max_length=4096)
    inputNode: str = Field(min_length=1)
    outputNode: str = Field(min_length=1)
    inputs: dict[str, dict[str, Any]] | None = None
    required: list[str] | None = None


class Graph(BaseModel):
    """The one graph object a bridge stores."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    nodes: list[Node] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
    pipelines: list[Pipeline] = Field(default_factory=list)

    @field_validator("version", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):  # JSON `true` is not the number 1 (Python's `True == 1` would let it pass)
            raise ValueError("Input should be 1")
        return value

    def node_map(self) -> dict[str, Node]:
        """Nodes by id (a validated graph has unique ids)."""
        return {n.id: n for n in self.nodes}

    def pipeline_named(self, name: str) -> Pipeline | None:
        """The pipeline listed under `name`, if any."""
        return next((p for p in self.pipelines if p.name == name), None)

    def dump(self) -> dict[str, Any]:
        """JSON-ready form as it was given (defaults not spelled out), edges written `from`/`to`."""
        data = self.model_dump(by_alias=True, exclude_unset=True)
        return {"version": self.version, "nodes": [], "edges": [], "pipelines": [], **data}


def pipeline_input_schema(
    graph: Graph, pipeline: Pipeline, inferred: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The pipeline's arguments: one property per output port of its input node, typed by the
    pipeline's `inputs`, else by `inferred` (the schemas of the tool arguments the port is wired to:
    inputs.py), else untyped; `required` as the pipeline names them, else none (an argument the
    caller leaves out produces no value and is dropped, F10)."""
    node = graph.node_map().get(pipeline.inputNode)
    ports = node.outputs if node is not None else []
    given, guessed = pipeline.inputs or {}, inferred or {}
    schema: dict[str, Any] = {"type": "object", "properties": {port: given.get(port, guessed.get(port, {})) for port in ports}}
    if pipeline.required:
        schema["required"] = [port for port in pipeline.required if port in ports]
    return schema


def empty_graph() -> Graph:
    """The graph of a bridge nobody has drawn on yet."""
    return Graph()
