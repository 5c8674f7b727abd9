"""The Bridge store, SQLite and PostgreSQL alike (S1): append-only audit table, per-owner queries,
versioned graph saves; the PostgreSQL schema's migrations and privileges; the audit writer's queue (F5).

The `store` fixture runs each test once on a SQLite file and once on a fresh database of the real
PostgreSQL server (tests/support/postgres.py)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from gateway.bridge.audit import AuditWriter
from gateway.bridge.records import AuditQuery, AuditRecord, BridgeRecord, ConnectionRecord
from gateway.bridge.store import BridgeStore, GraphConflict, StoreUnavailable
from gateway.bridge.store_factory import open_store
from gateway.bridge.store_postgres import MIGRATIONS, PostgresStore
from gateway.bridge.store_sqlite import SqliteStore
from tests.support import postgres
from tests.support.stores import KINDS, opened_store
from tests.support.faults import free_port


def record(actor: str = "alice", resource: str = "gh__echo", ts: float = 1000.0, status: str = "success") -> AuditRecord:
    return AuditRecord(ts, "mcp.tool_call", actor, f"{actor}@x.test", resource, "federation", False, {"q": "x"}, status, 1.5)  # type: ignore[arg-type]


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BridgeStore]:
    async with opened_store(request.param, tmp_path) as db:
        yield db


async def raw_execute(store: BridgeStore, sql: str) -> None:
    """Run `sql` past the store, on its own connection to the same database (as the store's own role)."""
    if isinstance(store, SqliteStore):
        raw = sqlite3.connect(store.path)
        try:
            raw.execute(sql)
        finally:
            raw.close()
    else:
        conn = await asyncpg.connect(store.url)  # type: ignore[attr-defined]
        try:
            await conn.execute(sql)
        finally:
            await conn.close()


async def test_update_and_delete_on_the_audit_table_fail(store: BridgeStore) -> None:
    # R: F5, S1 -- the trigger refuses them whoever asks (on PostgreSQL: the superuser that owns the table)
    await store.append_audit([record()])
    for statement in ("UPDATE", "DELETE"):
        sql = "UPDATE audit SET status = 'success'" if statement == "UPDATE" else "DELETE FROM audit"
        with pytest.raises((sqlite3.DatabaseError, asyncpg.PostgresError), match=f"append-only: {statement} refused"):
            await raw_execute(store, sql)
    if not isinstance(store, SqliteStore):
        with pytest.raises(asyncpg.PostgresError, match="append-only: TRUNCATE refused"):
            await raw_execute(store, "TRUNCATE audit")
    assert len(await store.query_audit(AuditQuery(actor_id="alice"))) == 1


async def test_graph_saves_are_versioned_and_a_save_based_on_an_old_version_is_refused(store: BridgeStore) -> None:
    # R: S2, F12
    await store.upsert_bridge(BridgeRecord("b1", "alice"))
    first = {"nodes": [], "edges": [], "pipelines": [], "tag": "first"}
    assert await store.saved_graph(("alice", "b1")) is None
    assert await store.save_graph(("alice", "b1"), first, 1.0, "alice", expected_version=0) == 1
    with pytest.raises(GraphConflict) as refused:
        await store.save_graph(("alice", "b1"), {**first, "tag": "late"}, 2.0, "bob", expected_version=0)
    assert (refused.value.expected, refused.value.current) == (0, 1)
    assert await store.save_graph(("alice", "b1"), {**first, "tag": "second"}, 3.0, "bob", expected_version=1) == 2
    assert await store.save_graph(("alice", "b1"), {**first, "tag": "blind"}, 4.0, "carol") == 3  # no version named: saved
    with pytest.raises(GraphConflict):
        await store.save_graph(("alice", "b1"), {**first, "tag": "stale"}, 5.0, "alice", expected_version=2)
    saved = await store.saved_graph(("alice", "b1"))
    assert saved is not None and (saved.graph["tag"], saved.version, saved.saved_by) == ("blind", 3, "carol")
    assert (await store.saved_graph(("alice", "b1"))).saved_by == "carol"
    assert (await store.load_graph(("alice", "b1"))) == saved.graph


async def test_saves_at_once_based_on_one_version_store_exactly_one_graph_whole(store: BridgeStore) -> None:
    # R: S2
    await store.upsert_bridge(BridgeRecord("b1", "alice"))
    nodes = [{"id": f"n{i}"} for i in range(50)]

    async def save(editor: str) -> int | None:
        try:
            return await store.save_graph(("alice", "b1"), {"nodes": nodes, "editor": editor}, 1.0, editor, expected_version=0)
        except GraphConflict:
            return None

    results = await asyncio.gather(*(save(f"editor-{i}") for i in range(8)))
    assert sorted(results, key=lambda v: v or 0) == [None] * 7 + [1]
    winner = f"editor-{results.index(1)}"
    saved = await store.saved_graph(("alice", "b1"))
    assert saved is not None and saved.graph == {"nodes": nodes, "editor": winner} and saved.saved_by == winner


async def test_audit_queries_filter_by_actor_time_resource_and_status(store: BridgeStore) -> None:
    # R: F5, S1
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


async def test_connections_and_bridges_are_listed_per_owner(store: BridgeStore) -> None:
    # R: F2, F3, S1
    await store.upsert_connection(ConnectionRecord("gh", "alice", "http://h/mcp", "Authorization", "env:GH", "config"))
    await store.upsert_connection(ConnectionRecord("wiki", "org:acme", "http://w/mcp"))
    await store.upsert_connection(ConnectionRecord("jira", "bob", "http://j/mcp"))
    await store.upsert_bridge(BridgeRecord("b1", "alice", ("gh", "wiki")))
    assert [c.id for c in await store.list_connections(["alice", "org:acme"])] == ["gh", "wiki"]
    assert [b.id for b in await store.list_bridges(["bob"])] == []
    assert await store.find_bridges(["alice"], "b1") == [BridgeRecord("b1", "alice", ("gh", "wiki"))]
    assert [c.auth_secret for c in await store.find_connections(["alice", "bob"], "gh")] == ["env:GH"]


async def test_ids_are_per_owner_and_each_owners_item_is_its_own(store: BridgeStore) -> None:
    # R: F2, F3, S1 (issue 15: ids were global, so creating one told whether another tenant had it)
    await store.upsert_connection(ConnectionRecord("gh", "alice", "http://a/mcp"))
    await store.upsert_connection(ConnectionRecord("gh", "bob", "http://b/mcp"))
    await store.upsert_connection(ConnectionRecord("gh", "org:acme", "http://o/mcp"))
    await store.upsert_bridge(BridgeRecord("b1", "alice", ("gh",)))
    await store.upsert_bridge(BridgeRecord("b1", "bob"))
    assert await store.save_graph(("alice", "b1"), {"of": "alice"}, 1.0, "alice") == 1
    assert await store.save_graph(("bob", "b1"), {"of": "bob"}, 1.0, "bob", expected_version=0) == 1
    found = await store.find_connections(["alice", "org:acme"], "gh")
    assert sorted((c.owner, c.endpoint) for c in found) == [("alice", "http://a/mcp"), ("org:acme", "http://o/mcp")]
    assert [c.endpoint for c in await store.list_connections(["bob"])] == ["http://b/mcp"]
    assert await store.find_bridges(["bob"], "b1") == [BridgeRecord("b1", "bob")]
    assert await store.delete_bridge(("bob", "b1")) and await store.delete_connection(("bob", "gh"))
    assert not await store.delete_connection(("bob", "gh"))
    assert (await store.load_graph(("alice", "b1")), await store.load_graph(("bob", "b1"))) == ({"of": "alice"}, None)
    assert sorted(c.owner for c in await store.find_connections(["alice", "bob", "org:acme"], "gh")) == ["alice", "org:acme"]
    assert await store.find_bridges(["alice", "bob"], "b1") == [BridgeRecord("b1", "alice", ("gh",))]


async def test_a_config_declared_item_whose_owner_changed_in_the_yaml_moves_with_its_graph(store: BridgeStore) -> None:
    # R: F2, S1 (the YAML names an id once: an owner changed there moves the item, as when ids were global)
    await store.upsert_connection(ConnectionRecord("gh", "org:acme", "http://old/mcp", source="config"))
    await store.upsert_connection(ConnectionRecord("gh", "bob", "http://bobs/mcp"))  # made through the API: kept
    await store.upsert_connection(ConnectionRecord("gh", "alice", "http://new/mcp", source="config"))
    assert sorted((c.owner, c.endpoint) for c in await store.find_connections(["alice", "bob", "org:acme"], "gh")) == [
        ("alice", "http://new/mcp"), ("bob", "http://bobs/mcp")]
    await store.upsert_bridge(BridgeRecord("b1", "org:acme", ("gh",), "config"))
    await store.save_graph(("org:acme", "b1"), {"kept": True}, 1.0, "carol")
    await store.upsert_bridge(BridgeRecord("b1", "alice", ("gh",), "config"))
    assert await store.find_bridges(["alice", "org:acme"], "b1") == [BridgeRecord("b1", "alice", ("gh",), "config")]
    saved = await store.saved_graph(("alice", "b1"))
    assert saved is not None and (saved.graph, saved.version, saved.saved_by) == ({"kept": True}, 1, "carol")
    assert await store.saved_graph(("org:acme", "b1")) is None


OLD_SQLITE_SCHEMA = """
CREATE TABLE connections (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, endpoint TEXT NOT NULL,
    auth_header_name TEXT, auth_secret TEXT, source TEXT NOT NULL, prefix TEXT);
CREATE TABLE bridges (id TEXT PRIMARY KEY, owner TEXT NOT NULL, connections TEXT NOT NULL, source TEXT NOT NULL);
CREATE TABLE graphs (bridge_id TEXT PRIMARY KEY, graph TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, action TEXT NOT NULL, actor_id TEXT NOT NULL,
    actor_email TEXT, resource TEXT NOT NULL, scope TEXT NOT NULL, mutating INTEGER NOT NULL,
    args TEXT NOT NULL, status TEXT NOT NULL, duration_ms REAL NOT NULL);
"""
"""The SQLite schema of a store made when ids were global (and before graphs had versions)."""

OLD_ROWS = """
INSERT INTO connections VALUES ('gh', 'alice', 'http://a/mcp', 'Authorization', 'env:GH', 'config', NULL);
INSERT INTO connections VALUES ('wiki', 'org:acme', 'http://w/mcp', NULL, NULL, 'api', 'w');
INSERT INTO bridges VALUES ('b1', 'org:acme', '["wiki"]', 'api');
INSERT INTO audit (ts, action, actor_id, actor_email, resource, scope, mutating, args, status, duration_ms) VALUES
    (1.0, 'mcp.tool_call', 'alice', NULL, 'gh', 'api', TRUE, '{}', 'success', 1.0),
    (2.0, 'mcp.tool_call', 'alice', NULL, 'gh', 'api', FALSE, '{}', 'failure', 2.0);
"""
OLD_GRAPH = """INSERT INTO graphs (bridge_id, graph, updated_at{}) VALUES ('b1', '{{"nodes": [], "tag": "old"}}', 1.0{});"""


@contextlib.asynccontextmanager
async def old_database(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """A database as an older toolgate left it (ids global), with rows; yields `bridge.database`."""
    if kind == "sqlite":
        path = tmp_path / "old.db"
        db = sqlite3.connect(path)
        db.executescript(OLD_SQLITE_SCHEMA + OLD_ROWS + OLD_GRAPH.format("", ""))
        db.close()
        yield str(path)
        return
    async with postgres.fresh_database() as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CREATE TABLE toolgate_schema (version INTEGER PRIMARY KEY,"
                               " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            await conn.execute(MIGRATIONS[0][1])
            await conn.execute("INSERT INTO toolgate_schema (version) VALUES (1)")
            await conn.execute(OLD_ROWS + OLD_GRAPH.format(", version", ", 1"))
        finally:
            await conn.close()
        yield url


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_store_made_when_ids_were_global_keeps_every_row_and_takes_ids_per_owner(kind: str, tmp_path: Path) -> None:
    # R: S1, F2 (the schema change to (owner, id) keys migrates existing data)
    async with old_database(kind, tmp_path) as database:
        for _ in range(2):  # opened again: nothing left to change
            store = open_store(database, tmp_path)
            await store.open()
            try:
                [gh] = await store.find_connections(["alice"], "gh")
                assert gh == ConnectionRecord("gh", "alice", "http://a/mcp", "Authorization", "env:GH", "config", None)
                assert [c.prefix for c in await store.list_connections(["org:acme"])] == ["w"]
                assert await store.find_bridges(["org:acme"], "b1") == [BridgeRecord("b1", "org:acme", ("wiki",), "api")]
                saved = await store.saved_graph(("org:acme", "b1"))
                assert saved is not None and (saved.graph["tag"], saved.version) == ("old", 1)
                await store.upsert_connection(ConnectionRecord("gh", "bob", "http://b/mcp"))
                await store.upsert_bridge(BridgeRecord("b1", "bob"))
                assert len(await store.find_connections(["alice", "bob"], "gh")) == 2
                assert len(await store.find_bridges(["org:acme", "bob"], "b1")) == 2
                # audit rows written before records had ids (O4's step) stay; a record with an id is
                # stored once, written twice in a batch and again after the store is opened again
                written = AuditRecord(3.0, "mcp.tool_call", "alice", None, "gh", "api", True, {}, "success", 3.0, record_id="r-1")
                await store.append_audit([written, written])
                listed = await store.query_audit(AuditQuery(actor_id="alice"))
                assert sorted((r.ts, r.status) for r in listed) == [(1.0, "success"), (2.0, "failure"), (3.0, "success")]
            finally:
                await store.close()
        if kind == "postgresql":
            assert postgres.scalar(database, "SELECT max(version) FROM toolgate_schema") == MIGRATIONS[-1][0]


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


# -- PostgreSQL only: migrations, privileges --------------------------------------------------------


@contextlib.asynccontextmanager
async def gateway_role(url: str) -> AsyncIterator[str]:
    """A login role set up as docs/deploy.md says for the gateway (CONNECT on the database, owns
    nothing); yields the database URL as that role. Dropped after."""
    role = f"toolgate_gw_{secrets.token_hex(4)}"
    server, _, database = url.rpartition("/")
    admin = await asyncpg.connect(server + "/postgres")
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        await admin.execute(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
        await admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
        yield url.replace(f"//{postgres.USER}@", f"//{role}@")
    finally:
        await postgres.drop_database(url)  # its grants go with it; then the role can go
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def test_replicas_starting_at_once_migrate_the_schema_once(tmp_path: Path) -> None:
    # R: S1
    async with postgres.fresh_database() as url:
        stores = [PostgresStore(url, pool_size=2) for _ in range(6)]
        await asyncio.gather(*(s.open() for s in stores))
        try:
            conn = await asyncpg.connect(url)
            versions = await conn.fetch("SELECT version FROM toolgate_schema ORDER BY version")
            await conn.close()
            assert [v["version"] for v in versions] == [version for version, _ in MIGRATIONS]
            await stores[0].append_audit([record()])
            assert len(await stores[-1].query_audit(AuditQuery(actor_id="alice"))) == 1
        finally:
            await asyncio.gather(*(s.close() for s in stores))


async def test_the_gateways_role_cannot_update_or_delete_audit_rows_but_uses_the_store(tmp_path: Path) -> None:
    # R: S1, F5 -- by privileges: refused before the trigger is even asked
    async with postgres.fresh_database() as url:
        owner = PostgresStore(url)
        await owner.open()  # the schema's owner migrates (`toolgate bridge migrate`)
        await owner.close()
        async with gateway_role(url) as as_gateway:
            store = PostgresStore(as_gateway)
            await store.open()  # the schema is current: nothing to change, so the role may start
            try:
                await store.upsert_connection(ConnectionRecord("gh", "alice", "http://h/mcp"))
                await store.upsert_bridge(BridgeRecord("b1", "alice", ("gh",)))
                assert await store.save_graph(("alice", "b1"), {"nodes": []}, 1.0, "alice") == 1
                await store.append_audit([record()])
                assert await store.delete_bridge(("alice", "b1")) and await store.delete_connection(("alice", "gh"))
                await postgres.assert_audit_untouchable(as_gateway)
                assert [r.status for r in await store.query_audit(AuditQuery(actor_id="alice"))] == ["success"]
            finally:
                await store.close()


async def test_a_role_that_may_not_create_tables_on_an_empty_database_is_told_to_migrate(tmp_path: Path) -> None:
    # R: S1
    async with postgres.fresh_database() as url, gateway_role(url) as as_gateway:
        store = PostgresStore(as_gateway)
        with pytest.raises(StoreUnavailable) as refused:
            await store.open()
        assert "has schema version 0, this toolgate needs" in str(refused.value)
        assert "run `toolgate bridge migrate` as the schema's owner" in str(refused.value)


async def test_postgresql_down_at_open_is_a_clear_error_naming_the_server(tmp_path: Path) -> None:
    # R: S1
    port = free_port()
    store = open_store(f"postgresql://toolgate@127.0.0.1:{port}/toolgate", tmp_path)
    with pytest.raises(StoreUnavailable, match=rf"^bridge.database: cannot reach PostgreSQL at 127.0.0.1:{port}/toolgate: "):
        await store.open()
