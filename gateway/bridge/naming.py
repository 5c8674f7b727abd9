"""Federated tool names (F3): distinct across connections by a documented, reversible rule.

A tool `search` of connection `gh` is listed as `gh__search`. When the joined name cannot carry
the upstream name (a character outside `[a-zA-Z0-9_-]`, or longer than 64 characters in all), the
upstream name is *mapped*: invalid characters become `_`, the name is cut to fit, and `_` plus the
first 8 hex digits of the SHA-256 of the original upstream name is appended. The result depends
only on the connection id and the upstream name, so it never changes when another connection
joins; the way back is the connection's own list (`ToolNameMap`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from gateway.bridge.graph import is_tool_name

SEPARATOR = "__"
MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_LEN = 8


def federated_name(connection_id: str, upstream: str) -> str:
    """The name a connection's tool is listed under in the federation."""
    joined = f"{connection_id}{SEPARATOR}{upstream}"
    if is_tool_name(joined) and upstream and _INVALID.search(upstream) is None:
        return joined
    digest = hashlib.sha256(upstream.encode("utf-8")).hexdigest()[:_HASH_LEN]
    room = MAX_NAME - len(connection_id) - len(SEPARATOR) - 1 - _HASH_LEN
    stem = _INVALID.sub("_", upstream)[: max(room, 0)]
    return f"{connection_id}{SEPARATOR}{stem}_{digest}"


def split_name(name: str) -> tuple[str, str] | None:
    """(connection id, tool part) of a federated name, or None when it has no separator.

    The tool part is the upstream name itself unless the name was mapped; `ToolNameMap` resolves it.
    """
    connection_id, sep, rest = name.partition(SEPARATOR)
    if not sep or not connection_id or not rest:
        return None
    return connection_id, rest


@dataclass
class ToolNameMap:
    """Federated name ↔ upstream name for one connection's tool list."""

    connection_id: str
    to_upstream: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, connection_id: str, upstream_names: list[str]) -> "ToolNameMap":
        """Map every upstream name; the first of two names that map alike wins (and is logged by the caller)."""
        mapping: dict[str, str] = {}
        for upstream in upstream_names:
            mapping.setdefault(federated_name(connection_id, upstream), upstream)
        return cls(connection_id, mapping)

    def upstream(self, name: str) -> str | None:
        """The upstream name behind federated `name`, or None if this connection has no such tool."""
        return self.to_upstream.get(name)
