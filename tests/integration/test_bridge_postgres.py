"""The Bridge on a PostgreSQL server that goes away (S1, "Bad input and faults" of issue 13): down at
start, `toolgate serve` exits non-zero saying which server; lost mid-run, calls go on, their audit
records are dropped and counted, never waited for, and once the server is back the store
reconnects and writes again. With `bridge.storeDownAtStart: serve`, a replica started while it is
down serves chat, answers 503 on the Bridge's routes and `/readyz/bridge`, and connects once it is
back (O4); asyncpg's client-side state errors count as a lost connection (O4). A throwaway cluster
of our own (tests/support/postgres.py) that the test stops and starts; `toolgate serve` as a real
process; the password by secret reference. The audit spool across an outage:
tests/integration/test_audit_spool.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import mcp_types as types
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.loadkit import Gateway
from tests.support import postgres
from tests.support.faults import free_port
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PASSWORD_ENV = "TOOLGATE_TEST_PG_PASSWORD"
PASSWORD = "pg-canary-7d1f0c55e2"


def serve_config(database: str, mcp_url: str | None = None) -> dict[str, object]:
    bridge: dict[str, object] = {"database": database, "databasePassword": f"env:{PASSWORD_ENV}"}
    if mcp_url is not None:
        bridge["connections"] = [{"id": "tools", "owner": "anonymous", "endpoint": mcp_url + "/mcp"}]
        bridge["bridges"] = [{"id": "b1", "owner": "anonymous", "connections": ["tools"]}]
    return {
        "server": {"metrics_public": True},  # dropped() reads /metrics
        "auth": {"mode": "none"},
        "upstreams": [{"name": "model", "kind": "openai", "api_base": "http://127.0.0.1:9/v1"}],
        "routes": [{"model": "assistant", "upstream": "model", "upstream_model": "m"}],
        "bridge": bridge,
    }


@pytest.fixture
def cluster() -> Iterator[postgres.Cluster]:
    server = postgres.Cluster(password=PASSWORD)
    try:
        yield server
    finally:
        server.close()


def test_postgresql_down_at_start_ends_serve_with_a_clear_message_and_a_non_zero_exit(tmp_path: Path) -> None:
    # R: S1
    port = free_port()
    config = tmp_path / "toolgate.yaml"
    config.write_text(yaml.safe_dump(serve_config(f"postgresql://toolgate@127.0.0.1:{port}/toolgate")))
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, PASSWORD_ENV: PASSWORD})
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines()
             if '"logger": "toolgate.bridge"' in line and '"level": "error"' in line]
    assert len(lines) == 1, done.stdout + done.stderr
    assert (f"the Bridge cannot start: bridge.database: cannot reach PostgreSQL at 127.0.0.1:{port}/toolgate: "
            "ConnectionRefusedError") in lines[0]
    assert PASSWORD not in done.stdout + done.stderr


def audited(url: str) -> int:
    return int(postgres.scalar(url, "SELECT count(*) FROM audit WHERE action = 'mcp.tool_call'", PASSWORD))  # type: ignore[call-overload]


def dropped(gateway: Gateway) -> float:
    text = httpx2.get(gateway.url + "/metrics", timeout=10).text
    found = re.search(r'^toolgate_audit_dropped_total\{reason="store_error"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def call_count(client: Client) -> types.CallToolResult:
    return await client.call_tool("tools__count", {})


async def test_postgresql_lost_mid_run_costs_only_audit_records_counted_and_the_store_reconnects(
    cluster: postgres.Cluster,
) -> None:
    # R: S1, F5
    url = cluster.create_database("toolgate")
    state = McpServerState()
    os.environ[PASSWORD_ENV] = PASSWORD  # the replica reads it by reference (bridge.databasePassword)
    with serve(http_app(state, legacy_only=True)) as mcp:
        gateway = Gateway(serve_config(url, mcp.url))
        try:
            gateway.wait_ready()
            async with Client(streamable_http_client(gateway.url + "/mcp/b1",
                                                     http_client=httpx2.AsyncClient(timeout=30)), mode="legacy") as client:
                before = [await call_count(client) for _ in range(3)]
                assert wait_until(lambda: audited(url) == 3, timeout=15)

                cluster.stop()
                during = [await call_count(client) for _ in range(3)]  # the MCP session and the bridge go on
                assert wait_until(lambda: dropped(gateway) == 3, timeout=15)  # each record counted, none waited for

                cluster.start()
                after = [await call_count(client) for _ in range(3)]
                assert wait_until(lambda: audited(url) == 6, timeout=30)  # the pool opened new connections
            assert [r.is_error for r in before + during + after] == [False] * 9
            with state.cond:
                assert state.calls["count"] == 9
            assert dropped(gateway) == 3
            assert PASSWORD not in gateway.log_tail(10_000)
        finally:
            gateway.stop()


def test_a_replica_started_while_postgresql_is_down_serves_chat_says_the_bridge_is_not_ready_and_connects_later(
    cluster: postgres.Cluster,
) -> None:
    # R: O4, S1
    url = cluster.create_database("toolgate")
    cluster.stop()
    os.environ[PASSWORD_ENV] = PASSWORD
    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as mcp:
        config = serve_config(url, mcp.url)
        config["bridge"] = {**config["bridge"], "storeDownAtStart": "serve"}  # type: ignore[dict-item]
        gateway = Gateway(config)
        try:
            gateway.wait_ready()  # /readyz: 200, chat is served
            where = f"PostgreSQL at 127.0.0.1:{cluster.port}/toolgate"
            ready = httpx2.get(gateway.url + "/readyz", timeout=10)
            assert ready.status_code == 200 and where in ready.json()["bridge"]
            bridge_ready = httpx2.get(gateway.url + "/readyz/bridge", timeout=10)
            assert bridge_ready.status_code == 503 and where in bridge_ready.json()["bridge"]
            models = httpx2.get(gateway.url + "/v1/models", timeout=10)
            assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == ["assistant"]
            for path in ("/mcp/b1", "/bridges", "/audit"):
                refused = httpx2.get(gateway.url + path, timeout=10)
                assert refused.status_code == 503, path
                assert "the Bridge is not ready" in refused.text and where in refused.text, path

            cluster.start()
            assert wait_until(lambda: httpx2.get(gateway.url + "/readyz/bridge", timeout=10).status_code == 200,
                              timeout=60)  # retried with backoff, no restart
            assert httpx2.get(gateway.url + "/readyz", timeout=10).json()["bridge"] == "ready"
            with httpx2.Client(timeout=30) as http:
                listed = http.get(gateway.url + "/bridges")
            assert listed.status_code == 200 and [b["id"] for b in listed.json()["data"]] == ["b1"]
            assert gateway.process.poll() is None
            assert PASSWORD not in gateway.log_tail(10_000)
        finally:
            gateway.stop()


async def test_asyncpg_client_state_errors_count_as_a_lost_connection_retried_on_a_fresh_one_or_served_from_cache(
    cluster: postgres.Cluster,
) -> None:
    # R: O4, S1
    import asyncpg

    from gateway.bridge.store import StoreUnavailable
    from gateway.bridge.store_postgres import PostgresStore

    url = cluster.create_database("toolgate")
    store = PostgresStore(url, password=PASSWORD)
    await store.open()
    try:
        pids: list[int] = []
        faults: list[Exception] = [asyncpg.InternalClientError("waiter is not done while handling critical protocol error")]

        async def read(db: asyncpg.Connection) -> int:
            pids.append(db.get_server_pid())
            if faults:
                raise faults.pop(0)
            return int(await db.fetchval("SELECT 41 + 1"))

        assert await store._read(("answer",), read) == 42  # InternalClientError: retried, then served
        assert len(pids) == 2 and pids[0] != pids[1]  # the connection that raised it was not reused
        faults.append(asyncpg.InterfaceError("cannot perform operation: another operation is in progress"))
        assert await store._read(("answer",), read) == 42
        faults.extend([asyncpg.InternalClientError("x"), asyncpg.InternalClientError("y")])
        assert await store._read(("answer",), read) == 42  # both tries failed: the last answer
        assert faults == []
        with pytest.raises(StoreUnavailable, match="cannot be reached: InternalClientError"):
            faults.extend([asyncpg.InternalClientError("x"), asyncpg.InternalClientError("y")])
            await store._read(("never answered",), read)
    finally:
        await store.close()
