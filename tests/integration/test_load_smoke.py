"""The load harness of bench/load.py at a small size: real `toolgate serve`, real MCP server (B14)."""

from __future__ import annotations

from bench.load import run_load
from tests.support import haproxy


def test_concurrent_conversations_keep_one_session_each_and_close_them_when_idle() -> None:
    # R: B14, B1
    result = run_load(5, 3, idle_seconds=4, seconds=60)

    assert (result.requests, result.errors, result.error_samples) == (15, 0, [])
    assert result.sessions_opened == 5  # counted by the MCP server: one per conversation
    assert result.sessions_per_conversation == {1: 5}  # and each conversation saw one session, call after call
    assert result.continuity_breaks == 0
    assert result.sessions_open_after_idle == 0  # every session was closed (DELETE) after the idle lifetime
    assert result.gateway_metrics["toolgate_mcp_sessions_open_after_idle"] == 0


def test_through_haproxy_to_three_replicas_each_conversation_keeps_one_session() -> None:
    # R: S2, B14
    haproxy.require()
    # monitor: the guard runs but does not refuse (this test is about routing, not verdicts)
    result = run_load(6, 3, idle_seconds=4, seconds=90, replicas=3, guard_mode="monitor")

    assert (result.requests, result.errors, result.error_samples) == (18, 0, [])
    assert result.sessions_opened == 6 and result.sessions_per_conversation == {1: 6}
    assert result.continuity_breaks == 0 and result.sessions_open_after_idle == 0
    assert result.gateway_metrics["toolgate_requests_total"] == 18  # summed over the replicas' own /metrics
    assert len(result.peak_rss_kib) == 3
