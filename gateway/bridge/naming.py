"""Federated tool names (F3, F15): distinct across connections by a documented, reversible rule.

A tool `search` of a connection whose prefix is `gh` (by default its id) is listed as `gh__search`;
with the prefix `""` it is listed as `search`. When the joined name cannot carry
the upstream name (a character outside `[a-zA-Z0-9_-]`, or longer than 64 characters in all), the
upstream name is *mapped*: invalid characters become `_`, the name is cut to fit, and `_` plus the
first 8 hex digits of the SHA-256 of the original upstream name is appended. The result depends
only on the prefix and the upstream name, so it never changes when another connection joins;
the way back is the connection's own list (`ToolNameMap`). Prefixes that could make two
connections' names meet are refused where connections are declared (`prefix_problems`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.bridge.graph import is_tool_name

SEPARATOR = "__"
MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_LEN = 8


def federated_name(prefix: str, upstream: str) -> str:
    """The name a connection's tool (or prompt) is listed under in the federation."""
    head = f"{prefix}{SEPARATOR}" if prefix else ""
    joined = f"{head}{upstream}"
    if is_tool_name(joined) and upstream and _INVALID.search(upstream) is None:
        return joined
    digest = hashlib.sha256(upstream.encode("utf-8")).hexdigest()[:_HASH_LEN]
    stem = _INVALID.sub("_", upstream)
    if not head and not stem[:1].isalpha():
        stem = f"t_{stem}"  # a bare name must start with a letter
    room = MAX_NAME - len(head) - 1 - _HASH_LEN
    return f"{head}{stem[: max(room, 0)]}_{digest}"


def may_meet(owner_a: str, owner_b: str) -> bool:
    """Can one caller see connections of both owners? The same owner, or a user and an org (the user
    may belong to it); two users, or two orgs, never."""
    if owner_a == owner_b:
        return True
    return owner_a.startswith("org:") != owner_b.startswith("org:")


def prefix_problems(connections: Sequence[tuple[str, str, str]], *, same_caller: bool = False) -> list[str]:
    """Why `(id, owner, name prefix)` connections that may be seen together could list colliding
    names: the same prefix twice, or an empty prefix next to another connection. [] when none.
    `same_caller`: they are seen together whoever owns them (the connections of one bridge)."""
    problems: list[str] = []
    for i, (a_id, a_owner, a_prefix) in enumerate(connections):
        for b_id, b_owner, b_prefix in connections[i + 1 :]:
            if not same_caller and not may_meet(a_owner, b_owner):
                continue
            if a_prefix == b_prefix and a_prefix:
                problems.append(f"connections {a_id} and {b_id} share the prefix {a_prefix!r}")
            elif not a_prefix or not b_prefix:
                bare = a_id if not a_prefix else b_id
                other = b_id if bare == a_id else a_id
                problems.append(f"connection {bare} has the empty prefix and could collide with connection {other}")
    return problems


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

    prefix: str
    to_upstream: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, prefix: str, upstream_names: list[str]) -> "ToolNameMap":
        """Map every upstream name; the first of two names that map alike wins (and is logged by the caller)."""
        mapping: dict[str, str] = {}
        for upstream in upstream_names:
            mapping.setdefault(federated_name(prefix, upstream), upstream)
        return cls(prefix, mapping)

    def upstream(self, name: str) -> str | None:
        """The upstream name behind federated `name`, or None if this connection has no such tool."""
        return self.to_upstream.get(name)
