"""`SqliteStore`: the Bridge store (store.py) on one SQLite file with stdlib `sqlite3`, every
statement run off the event loop (`asyncio.to_thread`). The audit table refuses UPDATE and DELETE
with triggers (F5). One process owns the file; replicas share a `PostgresStore` instead (S1).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gateway.bridge.records import (
    AuditQuery, AuditRecord, BridgeRecord, ConnectionRecord, GraphVersion, ItemKey, SavedGraph,
)
from gateway.bridge.store import (
    AUDIT_COLUMNS, AUDIT_WRITE_COLUMNS, KEPT_VERSIONS, GraphConflict, audit_conditions, audit_from_row, audit_values,
    bridge_from_row, graph_counts,
)

T = TypeVar("T")

_TABLES = {
    "connections": """(
    id TEXT NOT NULL, owner TEXT NOT NULL, endpoint TEXT NOT NULL,
    auth_header_name TEXT, auth_secret TEXT, source TEXT NOT NULL, prefix TEXT, PRIMARY KEY (owner, id))""",
    "bridges": """(
    id TEXT NOT NULL, owner TEXT NOT NULL, connections TEXT NOT NULL, source TEXT NOT NULL, PRIMARY KEY (owner, id))""",
    "graphs": """(
    bridge_id TEXT NOT NULL, graph TEXT NOT NULL, updated_at REAL NOT NULL, saved_by TEXT,
    version INTEGER NOT NULL DEFAULT 1, bridge_owner TEXT NOT NULL, PRIMARY KEY (bridge_owner, bridge_id))""",
}

_VERSIONS = """
CREATE TABLE IF NOT EXISTS graph_versions (
    bridge_owner TEXT NOT NULL, bridge_id TEXT NOT NULL, version INTEGER NOT NULL, graph TEXT NOT NULL,
    saved_at REAL NOT NULL, saved_by TEXT, nodes INTEGER NOT NULL, edges INTEGER NOT NULL,
    PRIMARY KEY (bridge_owner, bridge_id, version));
"""
"""Every saved graph of a bridge, the last `KEPT_VERSIONS` (C6)."""
"""Connections, bridges and graphs, unique by (owner, id) (tenancy.py: ids are per owner)."""

_SCHEMA = "".join(f"CREATE TABLE IF NOT EXISTS {name} {columns};\n" for name, columns in _TABLES.items()) + """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, action TEXT NOT NULL, actor_id TEXT NOT NULL,
    actor_email TEXT, resource TEXT NOT NULL, scope TEXT NOT NULL, mutating INTEGER NOT NULL,
    args TEXT NOT NULL, status TEXT NOT NULL, duration_ms REAL NOT NULL, owner TEXT);
CREATE INDEX IF NOT EXISTS audit_actor_ts ON audit (actor_id, ts);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: DELETE refused'); END;
"""

_REKEY = "".join(
    f"CREATE TABLE {name}_rekeyed {_TABLES[name]};\nINSERT INTO {name}_rekeyed ({columns}) {select};\n"
    for name, columns, select in (
        # graphs first: each takes its bridge's owner (ids were global, so the join finds one at most)
        ("graphs", "bridge_id, graph, updated_at, saved_by, version, bridge_owner",
         "SELECT g.bridge_id, g.graph, g.updated_at, g.saved_by, g.version, coalesce(b.owner, '')"
         " FROM graphs g LEFT JOIN bridges b ON b.id = g.bridge_id"),
        ("connections", "id, owner, endpoint, auth_header_name, auth_secret, source, prefix",
         "SELECT id, owner, endpoint, auth_header_name, auth_secret, source, prefix FROM connections"),
        ("bridges", "id, owner, connections, source", "SELECT id, owner, connections, source FROM bridges"),
    )
) + "".join(f"DROP TABLE {name};\nALTER TABLE {name}_rekeyed RENAME TO {name};\n" for name in _TABLES)
"""A store made when ids were global (unique by id alone) to (owner, id) keys, every row kept."""

_MOVED = "SELECT owner FROM bridges WHERE id = ? AND source = 'config' AND owner <> ?"
"""The owner a config-declared bridge had before its owner was changed in the YAML."""


class SqliteStore:
    """`BridgeStore` on one SQLite file (`:memory:` for a throw-away store)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def open(self) -> None:
        """Create the file, the tables and the append-only triggers if needed."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = await asyncio.to_thread(sqlite3.connect, self.path, check_same_thread=False, isolation_level=None)
        def create(db: sqlite3.Connection) -> None:
            db.execute("PRAGMA journal_mode=WAL").fetchall()  # an unread row would keep a statement open
            db.executescript(_SCHEMA)
            _add_column(db, "connections", "prefix", "TEXT")  # a store made before connections had a name prefix (F15)
            _add_column(db, "graphs", "saved_by", "TEXT")  # a store made before graphs recorded their editor
            _add_column(db, "graphs", "version", "INTEGER NOT NULL DEFAULT 1")  # before saves were versioned (S2)
            _add_column(db, "audit", "owner", "TEXT")  # before a connection's owner saw others' changes to it
            db.execute("CREATE INDEX IF NOT EXISTS audit_owner_ts ON audit (owner, ts)")
            _add_column(db, "audit", "record_id", "TEXT")  # before a record had an id (O4: written once)
            db.execute("CREATE UNIQUE INDEX IF NOT EXISTS audit_record_id ON audit (record_id)")
            _rekey(db)  # a store made when ids were global
            db.executescript(_VERSIONS)  # after the rekey: a store made before graphs kept their versions

        await self._run(create)

    async def close(self) -> None:
        """Close the file once no statement is running; later calls fail."""
        db, self._db = self._db, None
        if db is not None:

            def close() -> None:
                with self._lock:
                    db.close()

            await asyncio.to_thread(close)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            if self._db is None:
                raise RuntimeError("the bridge store is not open")
            with self._lock:
                return fn(self._db)

        return await asyncio.to_thread(locked)

    async def upsert_connection(self, record: ConnectionRecord) -> None:
        """Insert or replace a connection (store.py: a config-declared one moves)."""
        sql = (
            "INSERT OR REPLACE INTO connections (id, owner, endpoint, auth_header_name, auth_secret, source, prefix)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        row = (record.id, record.owner, record.endpoint, record.auth_header_name, record.auth_secret, record.source,
               record.prefix)

        def upsert(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                if record.source == "config":
                    db.execute("DELETE FROM connections WHERE id = ? AND source = 'config' AND owner <> ?",
                               (record.id, record.owner))
                db.execute(sql, row)

        await self._run(upsert)

    async def find_connections(self, owners: Sequence[str], connection_id: str) -> list[ConnectionRecord]:
        """The connections of that id owned by any of `owners`."""
        sql = f"SELECT * FROM connections WHERE id = ? AND owner IN ({_marks(owners)})"
        rows = await self._run(lambda db: db.execute(sql, (connection_id, *owners)).fetchall())
        return [ConnectionRecord(*row) for row in rows]

    async def list_connections(self, owners: Sequence[str]) -> list[ConnectionRecord]:
        """Connections owned by any of `owners`, by id."""
        sql = f"SELECT * FROM connections WHERE owner IN ({_marks(owners)}) ORDER BY id, owner"
        rows = await self._run(lambda db: db.execute(sql, tuple(owners)).fetchall())
        return [ConnectionRecord(*row) for row in rows]

    async def delete_connection(self, key: ItemKey) -> bool:
        """Remove a connection; True if it existed."""
        cur = await self._run(lambda db: db.execute("DELETE FROM connections WHERE owner = ? AND id = ?", key))
        return cur.rowcount > 0

    async def upsert_bridge(self, record: BridgeRecord) -> None:
        """Insert or replace a bridge (its graph is kept; store.py: a config-declared one moves)."""
        row = (record.id, record.owner, json.dumps(list(record.connections)), record.source)

        def upsert(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                if record.source == "config":
                    owner, bridge_id = record.key
                    db.execute(
                        f"UPDATE graphs SET bridge_owner = ? WHERE bridge_id = ? AND bridge_owner IN ({_MOVED})"
                        " AND NOT EXISTS (SELECT 1 FROM graphs WHERE bridge_owner = ? AND bridge_id = ?)",
                        (owner, bridge_id, bridge_id, owner, owner, bridge_id),
                    )
                    db.execute(f"DELETE FROM graphs WHERE bridge_id = ? AND bridge_owner IN ({_MOVED})",
                               (bridge_id, bridge_id, owner))
                    db.execute(  # its versions move with it, unless the new owner has versions of its own
                        f"UPDATE graph_versions SET bridge_owner = ? WHERE bridge_id = ? AND bridge_owner IN ({_MOVED})"
                        " AND NOT EXISTS (SELECT 1 FROM graph_versions WHERE bridge_owner = ? AND bridge_id = ?)",
                        (owner, bridge_id, bridge_id, owner, owner, bridge_id),
                    )
                    db.execute(f"DELETE FROM graph_versions WHERE bridge_id = ? AND bridge_owner IN ({_MOVED})",
                               (bridge_id, bridge_id, owner))
                    db.execute("DELETE FROM bridges WHERE id = ? AND source = 'config' AND owner <> ?", (bridge_id, owner))
                db.execute("INSERT OR REPLACE INTO bridges (id, owner, connections, source) VALUES (?, ?, ?, ?)", row)

        await self._run(upsert)

    async def find_bridges(self, owners: Sequence[str], bridge_id: str) -> list[BridgeRecord]:
        """The bridges of that id owned by any of `owners`."""
        sql = f"SELECT id, owner, connections, source FROM bridges WHERE id = ? AND owner IN ({_marks(owners)})"
        rows = await self._run(lambda db: db.execute(sql, (bridge_id, *owners)).fetchall())
        return [bridge_from_row(row) for row in rows]

    async def list_bridges(self, owners: Sequence[str]) -> list[BridgeRecord]:
        """Bridges owned by any of `owners`, by id."""
        sql = f"SELECT id, owner, connections, source FROM bridges WHERE owner IN ({_marks(owners)}) ORDER BY id, owner"
        rows = await self._run(lambda db: db.execute(sql, tuple(owners)).fetchall())
        return [bridge_from_row(row) for row in rows]

    async def delete_bridge(self, key: ItemKey) -> bool:
        """Remove a bridge and its graph; True if it existed."""

        def delete(db: sqlite3.Connection) -> int:
            db.execute("DELETE FROM graphs WHERE bridge_owner = ? AND bridge_id = ?", key)
            db.execute("DELETE FROM graph_versions WHERE bridge_owner = ? AND bridge_id = ?", key)
            return db.execute("DELETE FROM bridges WHERE owner = ? AND id = ?", key).rowcount

        return await self._run(delete) > 0

    async def save_graph(
        self, bridge: ItemKey, graph: dict[str, Any], updated_at: float, saved_by: str | None = None,
        expected_version: int | None = None,
    ) -> int:
        """Replace a bridge's graph (validated by the caller) whole; its new version (store.py)."""
        text = json.dumps(graph)
        nodes, edges = graph_counts(graph)

        def save(db: sqlite3.Connection) -> int:
            with db:
                db.execute("BEGIN IMMEDIATE")  # the read and the write below are one step for other writers
                rows = db.execute(f"SELECT version, graph, updated_at, saved_by FROM graphs WHERE {_GRAPH}", bridge).fetchall()
                current = rows[0][0] if rows else 0
                if expected_version is not None and expected_version != current:
                    raise GraphConflict(bridge, expected_version, current)
                if rows:  # the graph replaced is kept (one saved before versions were kept has no row yet)
                    old_nodes, old_edges = graph_counts(json.loads(rows[0][1]))
                    db.execute(f"INSERT OR IGNORE INTO graph_versions {_VERSION_ROW}",
                               (*bridge, current, rows[0][1], rows[0][2], rows[0][3], old_nodes, old_edges))
                db.execute(
                    "INSERT OR REPLACE INTO graphs (bridge_owner, bridge_id, graph, updated_at, saved_by, version)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (*bridge, text, updated_at, saved_by, current + 1),
                )
                db.execute(f"INSERT OR REPLACE INTO graph_versions {_VERSION_ROW}",
                           (*bridge, current + 1, text, updated_at, saved_by, nodes, edges))
                db.execute(f"DELETE FROM graph_versions WHERE {_GRAPH} AND version <= ?",
                           (*bridge, current + 1 - KEPT_VERSIONS))
                return current + 1

        return await self._run(save)

    async def saved_graph(self, bridge: ItemKey) -> SavedGraph | None:
        """A bridge's graph with its version and editor, or None before the first save."""
        sql = f"SELECT graph, version, saved_by FROM graphs WHERE {_GRAPH}"
        rows = await self._run(lambda db: db.execute(sql, bridge).fetchall())
        return SavedGraph(json.loads(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    async def graph_versions(self, bridge: ItemKey) -> list[GraphVersion]:
        """The bridge's kept graph versions, newest first."""
        sql = f"SELECT version, saved_at, saved_by, nodes, edges FROM graph_versions WHERE {_GRAPH} ORDER BY version DESC"
        rows = await self._run(lambda db: db.execute(sql, bridge).fetchall())
        return [GraphVersion(*row) for row in rows]

    async def graph_version(self, bridge: ItemKey, version: int) -> SavedGraph | None:
        """One kept version's graph."""
        sql = f"SELECT graph, version, saved_by FROM graph_versions WHERE {_GRAPH} AND version = ?"
        rows = await self._run(lambda db: db.execute(sql, (*bridge, version)).fetchall())
        return SavedGraph(json.loads(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    async def load_graph(self, bridge: ItemKey) -> dict[str, Any] | None:
        """A bridge's graph as saved, or None."""
        sql = f"SELECT graph FROM graphs WHERE {_GRAPH}"
        rows = await self._run(lambda db: db.execute(sql, bridge).fetchall())
        return json.loads(rows[0][0]) if rows else None

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        """Append records in one transaction, in their order; a record whose `record_id` is stored
        already is skipped (O4: a batch written again is stored once)."""
        sql = (f"INSERT INTO audit ({', '.join(AUDIT_WRITE_COLUMNS)}) VALUES ({_marks(AUDIT_WRITE_COLUMNS)})"
               " ON CONFLICT (record_id) DO NOTHING")
        rows = [audit_values(r) for r in records]

        def insert(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN")
                db.executemany(sql, rows)

        await self._run(insert)

    async def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """An actor's records (all actors when `actor_id` is None), newest first."""
        params: list[Any] = []

        def mark(value: Any) -> str:
            params.append(value)
            return "?"

        where = ["1 = 1", *audit_conditions(query, mark)]
        sql = f"SELECT {', '.join(_AUDIT_READ)} FROM audit WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"
        params.append(query.limit)
        rows = await self._run(lambda db: db.execute(sql, tuple(params)).fetchall())
        return [audit_from_row(row) for row in rows]


_AUDIT_READ = ("seq", *AUDIT_COLUMNS)
"""Read by name: a store whose `owner` column was added later has it last, like a new one."""

_GRAPH = "bridge_owner = ? AND bridge_id = ?"

_VERSION_ROW = ("(bridge_owner, bridge_id, version, graph, saved_at, saved_by, nodes, edges)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def _marks(values: Sequence[str]) -> str:
    """Placeholders for `IN (...)` (NULL for none: matches nothing)."""
    return ",".join("?" * len(values)) or "NULL"


def _rekey(db: sqlite3.Connection) -> None:
    """Bring a store made when ids were global to (owner, id) keys, in one transaction (no-op when done)."""
    if any(row[1] == "owner" and row[5] for row in db.execute("PRAGMA table_info(connections)").fetchall()):
        return
    try:
        db.executescript("BEGIN IMMEDIATE;\n" + _REKEY + "COMMIT;")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _add_column(db: sqlite3.Connection, table: str, column: str, kind: str) -> None:
    """Add `column` to a table of a store made before it existed (no-op when it is there)."""
    columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})").fetchall()}
    if column not in columns:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
