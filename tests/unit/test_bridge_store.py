"""The SQLite store: append-only audit table, per-owner queries, and the audit writer's queue (F5)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.bridge.audit import AuditWriter
from gateway.bridge.records import AuditQuery, AuditRecord, BridgeRecord, ConnectionRecord
from gateway.bridge.store import SqliteStore


def record(actor: str = "alice", resource: str = "gh__echo", ts: float = 1000.0, status: str = "success") -> AuditRecord:
    return AuditRecord(ts, "mcp.tool_call", actor, f"{actor}@x.test", resource, "federation", False, {"q": "x"}, status, 1.5)  # type: ignore[arg-type]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    db = SqliteStore(tmp_path / "bridge.db")
    await db.open()
    yield db
    await db.close()


async def test_update_and_delete_on_the_audit_table_fail(store: SqliteStore) -> None:
    # R: F5
    await store.append_audit([record()])
    raw = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only: UPDATE refused"):
        raw.execute("UPDATE audit SET status = 'success'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only: DELETE refused"):
        raw.execute("DELETE FROM audit")
    raw.close()
    assert len(await store.query_audit(AuditQuery(actor_id="alice"))) == 1


async def test_audit_queries_filter_by_actor_time_resource_and_status(store: SqliteStore) -> None:
    # R: F5
    await store.append_audit(
        [record(ts=1), record(ts=2, status="failure"), record(ts=3, resource="other"), record(actor="bob", ts=4)]
    )
    alice = await store.query_audit(AuditQuery(actor_id="alice"))
    assert [r.ts for r in alice] == [3, 2, 1]
    assert [r.ts for r in await store.query_audit(AuditQuery(actor_id="alice", since=2))] == [3, 2]
    assert [r.ts for r in await store.query_audit(AuditQuery(actor_id="alice", until=2))] == [1]
    assert [r.ts for r in await store.query_audit(AuditQuery(actor_id="alice", status="failure"))] == [2]
    assert [r.ts for r in await store.query_audit(AuditQuery(actor_id="alice", resource="other"))] == [3]
    assert [r.args for r in await store.query_audit(AuditQuery(actor_id="bob"))] == [{"q": "x"}]


async def test_connections_and_bridges_are_listed_per_owner(store: SqliteStore) -> None:
    # R: F2, F3
    await store.upsert_connection(ConnectionRecord("gh", "alice", "http://h/mcp", "Authorization", "env:GH", "config"))
    await store.upsert_connection(ConnectionRecord("wiki", "org:acme", "http://w/mcp"))
    await store.upsert_connection(ConnectionRecord("jira", "bob", "http://j/mcp"))
    await store.upsert_bridge(BridgeRecord("b1", "alice", ("gh", "wiki")))
    assert [c.id for c in await store.list_connections(["alice", "org:acme"])] == ["gh", "wiki"]
    assert [b.id for b in await store.list_bridges(["bob"])] == []
    assert await store.get_bridge("b1") == BridgeRecord("b1", "alice", ("gh", "wiki"))
    assert (await store.get_connection("gh")).auth_secret == "env:GH"  # type: ignore[union-attr]


class SlowStore(SqliteStore):
    """A store whose inserts wait until released."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = asyncio.Event()

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        await self.release.wait()
        await super().append_audit(records)


async def test_a_full_queue_drops_and_counts_without_waiting(tmp_path: Path) -> None:
    # R: F5
    store = SlowStore(tmp_path / "slow.db")
    await store.open()
    registry = CollectorRegistry()
    writer = AuditWriter(store, queue_size=2, registry=registry)
    writer.start()
    for i in range(10):
        writer.submit(record(ts=i))  # never blocks, never raises
    store.release.set()
    await asyncio.wait_for(writer.flushed(), timeout=5)
    await writer.stop()
    written = len(await store.query_audit(AuditQuery(actor_id="alice")))
    dropped = registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "queue_full"})
    assert written + dropped == 10
    assert dropped >= 7
    await store.close()


class StuckStore(SqliteStore):
    """A store whose audit inserts never finish (a locked or unreachable database)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = asyncio.Event()

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        self.entered.set()
        await asyncio.Event().wait()


async def test_stopping_over_a_stuck_store_returns_and_counts_what_was_not_written(tmp_path: Path) -> None:
    # R: F5
    store = StuckStore(tmp_path / "stuck.db")
    registry = CollectorRegistry()
    writer = AuditWriter(store, queue_size=300, registry=registry)
    writer.start()
    for i in range(300):
        writer.submit(record(ts=i))
    await asyncio.wait_for(store.entered.wait(), timeout=5)
    await asyncio.wait_for(writer.stop(timeout=0.05), timeout=5)
    writer.submit(record(ts=301))
    dropped = {r: registry.get_sample_value("toolgate_audit_dropped_total", {"reason": r}) for r in ("shutdown", "stopped")}
    assert dropped == {"shutdown": 300, "stopped": 1}
