"""The reason a run reports for a call that gave no result (C5), from what the client stack raised."""

from __future__ import annotations

from gateway.bridge.handlers import failure_reason
from gateway.bridge.upstream import UpstreamCallFailed


def test_a_timeout_says_how_long_it_waited() -> None:
    # R: C5, F11
    assert failure_reason(UpstreamCallFailed("call t on c: timed out after 30s", timeout=30.0)) == "timed out after 30s"
    # a connection made through the REST API: no timing oracle (a filtered port told from a closed one)
    assert failure_reason(UpstreamCallFailed("x", timeout=30.0, guarded=True)) == "server unreachable"


def test_the_connections_own_json_rpc_error_is_its_text() -> None:
    # R: C5
    failed = UpstreamCallFailed("call t on c: MCP error -32602", -32602, "Invalid arguments: 'text' is required")
    assert failure_reason(failed) == "Invalid arguments: 'text' is required"


def test_an_unreachable_server_says_so_with_the_cause_only_for_a_declared_connection() -> None:
    # R: C5 (a connection made through the REST API tells no more: SSRF)
    declared = UpstreamCallFailed("call t on c: ConnectError: connection refused")
    assert failure_reason(declared) == "server unreachable (call t on c: ConnectError: connection refused)"
    assert failure_reason(UpstreamCallFailed("call t on c: ConnectError", guarded=True)) == "server unreachable"
