"""The audit log loses nothing across a PostgreSQL outage (O4): a real `toolgate serve` with a
Bridge over a throwaway cluster (tests/support/postgres.Cluster) that the test stops and starts,
and a loopback MCP tool server. Calls go on from cached definitions during the outage; once the
cluster is back every call's record is in `audit` exactly once, in the order of the calls (seq).
A replica stopped during the outage writes its spool when it starts again."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.loadkit import Gateway
from tests.integration.test_bridge_postgres import PASSWORD, PASSWORD_ENV, serve_config
from tests.support import postgres
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.waiting import wait_until


@pytest.fixture
def cluster() -> Iterator[postgres.Cluster]:
    server = postgres.Cluster(password=PASSWORD)
    try:
        yield server
    finally:
        server.close()


def spool_config(url: str, mcp_url: str, spool: Path) -> dict[str, object]:
    config = serve_config(url, mcp_url)
    config["bridge"] = {**config["bridge"], "auditSpool": {"path": str(spool)}}  # type: ignore[dict-item]
    return config


def recorded_ids(url: str) -> list[int]:
    """The `id` argument of every tool call record, in seq order."""
    rows = postgres.scalar(
        url, "SELECT coalesce(json_agg((args::json->>'id')::int ORDER BY seq), '[]'::json)::text FROM audit"
        " WHERE action = 'mcp.tool_call'", PASSWORD,
    )
    return list(json.loads(str(rows)))


async def call_echo(client: Client, n: int) -> bool:
    result = await client.call_tool("tools__echo", {"id": n})
    return not result.is_error


def mcp_client(gateway: Gateway) -> Client:
    return Client(streamable_http_client(gateway.url + "/mcp/b1", http_client=httpx2.AsyncClient(timeout=30)),
                  mode="legacy")


def metric_value(gateway: Gateway, sample: str) -> float:
    for line in httpx2.get(gateway.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_every_call_of_a_postgresql_outage_is_in_the_audit_log_once_and_in_order_when_it_returns(
    cluster: postgres.Cluster, tmp_path: Path,
) -> None:
    # R: O4, S1, F5
    url = cluster.create_database("toolgate")
    os.environ[PASSWORD_ENV] = PASSWORD
    with serve(http_app(McpServerState(), legacy_only=True)) as mcp:
        gateway = Gateway(spool_config(url, mcp.url, tmp_path / "spool"))
        try:
            gateway.wait_ready()
            async with mcp_client(gateway) as client:
                ok = [await call_echo(client, n) for n in range(20)]
                assert wait_until(lambda: len(recorded_ids(url)) == 20, timeout=15)

                cluster.stop()
                ok += [await call_echo(client, n) for n in range(20, 220)]  # from cached definitions
                assert wait_until(lambda: metric_value(gateway, "toolgate_audit_spool_bytes") > 0, timeout=15)
                assert any((tmp_path / "spool").glob("*.jsonl"))

                cluster.start()
                ok += [await call_echo(client, n) for n in range(220, 240)]
                assert wait_until(lambda: len(recorded_ids(url)) >= 240, timeout=60)
                assert wait_until(lambda: metric_value(gateway, "toolgate_audit_spool_bytes") == 0, timeout=15)
            assert ok == [True] * 240
            assert recorded_ids(url) == list(range(240))  # none lost, none twice, in the calls' order
            dropped = [line for line in httpx2.get(gateway.url + "/metrics", timeout=10).text.splitlines()
                       if line.startswith("toolgate_audit_dropped_total")]
            assert dropped == []
            assert PASSWORD not in gateway.log_tail(10_000)
        finally:
            gateway.stop()


async def test_a_replica_stopped_during_an_outage_writes_its_spool_when_it_starts_again(
    cluster: postgres.Cluster, tmp_path: Path,
) -> None:
    # R: O4
    url = cluster.create_database("toolgate")
    os.environ[PASSWORD_ENV] = PASSWORD
    spool = tmp_path / "spool"
    with serve(http_app(McpServerState(), legacy_only=True)) as mcp:
        gateway = Gateway(spool_config(url, mcp.url, spool))
        try:
            gateway.wait_ready()
            async with mcp_client(gateway) as client:
                assert await call_echo(client, 0)
                assert wait_until(lambda: recorded_ids(url) == [0], timeout=15)
                cluster.stop()
                assert [await call_echo(client, n) for n in range(1, 31)] == [True] * 30
                assert wait_until(lambda: metric_value(gateway, "toolgate_audit_spool_bytes") > 0, timeout=15)
        finally:
            gateway.stop()  # SIGTERM while PostgreSQL is down: what is queued goes to the spool
        assert any(spool.glob("*.jsonl"))
        cluster.start()
        assert recorded_ids(url) == [0]
        again = Gateway(spool_config(url, mcp.url, spool))
        try:
            again.wait_ready()
            assert wait_until(lambda: len(recorded_ids(url)) >= 31, timeout=30)
            assert recorded_ids(url) == list(range(31))
            assert wait_until(lambda: not any(spool.glob("*.jsonl")), timeout=15)
        finally:
            again.stop()
