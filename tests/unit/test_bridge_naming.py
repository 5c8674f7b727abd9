"""Federated tool names (F3): distinct, reversible, mapped when the pattern cannot carry them, stable."""

from __future__ import annotations

import hashlib

from gateway.bridge.graph import TOOL_NAME
from gateway.bridge.naming import ToolNameMap, federated_name, split_name


def test_a_plain_tool_is_listed_as_connection_double_underscore_tool() -> None:
    # R: F3
    assert federated_name("gh", "search_repositories") == "gh__search_repositories"
    assert split_name("gh__search_repositories") == ("gh", "search_repositories")


def test_the_same_tool_on_two_connections_gets_two_names() -> None:
    # R: F3
    assert federated_name("gh", "search") != federated_name("gl", "search")


def test_a_name_the_pattern_cannot_carry_is_mapped_to_a_valid_stable_name() -> None:
    # R: F3
    for upstream in ("weird.tool/v2", "имя", "x" * 80, "a b", ""):
        name = federated_name("conn-1", upstream)
        assert TOOL_NAME.match(name), name
        assert name.startswith("conn-1__")
        assert federated_name("conn-1", upstream) == name
    digest = hashlib.sha256(b"weird.tool/v2").hexdigest()[:8]
    assert federated_name("c", "weird.tool/v2") == f"c__weird_tool_v2_{digest}"


def test_mapped_names_of_similar_upstream_names_stay_distinct_and_reversible() -> None:
    # R: F3
    upstream = ["a.b", "a/b", "a_b"]
    mapping = ToolNameMap.build("c", upstream)
    assert len(mapping.to_upstream) == 3
    assert sorted(mapping.to_upstream.values()) == sorted(upstream)
    assert mapping.upstream("c__a_b") == "a_b"


def test_a_mapping_does_not_change_when_another_connection_joins() -> None:
    # R: F3
    before = ToolNameMap.build("one", ["x.y", "z"]).to_upstream
    ToolNameMap.build("two", ["x.y", "z"])
    assert ToolNameMap.build("one", ["x.y", "z"]).to_upstream == before
