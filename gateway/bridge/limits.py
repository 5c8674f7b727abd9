"""The Bridge's bounds on what a caller controls: graph size, pipeline values, connections' answers,
open MCP sessions.

`BridgeLimits` is the `bridge.limits` section of the YAML; `measure` sizes a concrete JSON value
(bytes as `json.dumps` writes it, and nesting depth) and stops as soon as a bound is passed, so a
value over the bound costs no more than the bound to reject. Merge and output nodes are sized
from the sizes of their inputs, never by walking them: a merge holds references to its inputs, and
two references to one value must count twice without being copied or walked twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

KIB = 1024
MIB = 1024 * 1024


class BridgeLimits(BaseModel):
    """`bridge.limits`: every bound a Bridge caller could otherwise push as far as memory goes."""

    model_config = ConfigDict(extra="forbid")

    graphBytes: int = Field(default=1 * MIB, ge=1 * KIB, description="largest graph (its JSON) a bridge may save")
    graphNodes: int = Field(default=500, ge=2, description="most nodes in one saved graph")
    graphEdges: int = Field(default=2000, ge=1, description="most edges in one saved graph")
    portsPerNode: int = Field(default=64, ge=1, description="most input or output ports on one node")
    valueBytes: int = Field(
        default=4 * MIB, ge=1 * KIB, description="largest value (JSON bytes) a pipeline node may produce or receive"
    )
    valueDepth: int = Field(default=64, ge=2, description="deepest nesting of a pipeline value")
    resultBytes: int = Field(
        default=4 * MIB, ge=1 * KIB,
        description="largest answer read from a connection (one JSON-RPC message as sent: a tool result's text and "
        "structuredContent together); cut while it is read, the call fails",
    )
    waveBytes: int = Field(
        default=16 * MIB, ge=1 * KIB,
        description="most bytes the tool nodes of one pipeline wave send together (refused before any is called) "
        "or get back together; at least valueBytes",
    )
    sessionsPerCaller: int = Field(default=64, ge=1, description="open Bridge MCP sessions per caller; beyond: its own oldest is closed")
    sessions: int = Field(default=10_000, ge=1, description="open Bridge MCP sessions in all; beyond: new ones get 503")
    outboundPerCaller: int = Field(
        default=16, ge=1, description="MCP operations one caller has in flight toward connections; more wait their turn"
    )
    connectionsPerOwner: int = Field(default=100, ge=1, description="connections one owner may make through the API")

    @model_validator(mode="after")
    def _wave_holds_a_value(self) -> "BridgeLimits":
        if self.waveBytes < self.valueBytes:
            raise ValueError("waveBytes must be at least valueBytes (a wave of one node may send a whole value)")
        return self


@dataclass(frozen=True)
class Size:
    """A value's JSON size in bytes and its nesting depth (a scalar has depth 0)."""

    bytes: int
    depth: int


class OverLimit(ValueError):
    """A value past a bound of `bridge.limits` (`valueBytes`, `valueDepth`, a connection's answer past
    `resultBytes`); the message says which bound and its value, in the Bridge's own words."""


def measure(value: Any, limits: BridgeLimits) -> Size:
    """The size of a concrete (tree-shaped) JSON value; raises `OverLimit` past a bound."""
    try:
        size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    except RecursionError:
        raise OverLimit(f"it is nested deeper than the limit of {limits.valueDepth} levels") from None
    check(Size(size, 0), limits)
    depth = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        if level > depth:
            depth = level
            check(Size(size, depth), limits)
        stack.extend((child, level) for child in children if isinstance(child, dict | list | tuple))
    return Size(size, depth)


def object_size(parts: dict[str, Size], limits: BridgeLimits) -> Size:
    """The size of `{key: value, ...}` from its parts' sizes (what a merge or output node builds)."""
    size = 2 + sum(len(json.dumps(key, ensure_ascii=False).encode("utf-8")) + 2 + part.bytes for key, part in parts.items())
    size += 2 * max(0, len(parts) - 1)
    result = Size(size, 1 + max((p.depth for p in parts.values()), default=0))
    check(result, limits)
    return result


def check(size: Size, limits: BridgeLimits) -> None:
    """Raise `OverLimit` when `size` passes a bound."""
    if size.bytes > limits.valueBytes:
        raise OverLimit(f"its value is over the limit of {limits.valueBytes} bytes")
    if size.depth > limits.valueDepth:
        raise OverLimit(f"its value is nested deeper than the limit of {limits.valueDepth} levels")
