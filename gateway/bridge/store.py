"""Where the Bridge keeps connections, bridges, graphs and the audit log (F5, S1).

`BridgeStore` is the repository interface the rest of the Bridge uses. Two implement it:
`SqliteStore` (store_sqlite.py: one file, one process) and `PostgresStore` (store_postgres.py:
shared by every replica). `open_store` (store_factory.py, so this module never imports the stores
that import it) picks one from `bridge.database`:

    ./toolgate.db, /var/lib/toolgate.db, :memory:                 SQLite
    sqlite:///toolgate.db (relative), sqlite:////var/lib/toolgate.db    SQLite, SQLAlchemy's spelling
    postgresql://user@host:5432/db                                         PostgreSQL
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gateway.bridge.records import (
    AuditQuery, AuditRecord, BridgeRecord, ConnectionRecord, GraphVersion, ItemKey, SavedGraph,
)
from gateway.errors import Unavailable

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StoreUnavailable(Unavailable):
    """The store cannot be reached (PostgreSQL down, a connection lost): 503 on the REST API. The
    message names the server, never a password."""


class GraphConflict(Exception):
    """A save that named a version (`If-Match`) other than the one stored: someone else saved first."""

    def __init__(self, bridge: ItemKey, expected: int, current: int) -> None:
        super().__init__(f"bridge {bridge[1]}: graph version {current} is stored, the save was based on {expected}")
        self.expected = expected
        self.current = current


class BridgeStore(Protocol):
    """The repository the Bridge talks to. Connections and bridges are unique by (owner, id)
    (`ItemKey`): an id is per owner (tenancy.py), so reads by id take the owners a caller acts for
    and may find one item per owner."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def upsert_connection(self, record: ConnectionRecord) -> None:
        """Insert or replace the connection of `record.key`. A config-declared one also replaces
        config-declared ones of its id under other owners (the YAML names an id once: an owner
        changed there moves the item)."""
        ...
    async def find_connections(self, owners: Sequence[str], connection_id: str) -> list[ConnectionRecord]:
        """The connections of that id owned by any of `owners` (at most one per owner)."""
        ...
    async def list_connections(self, owners: Sequence[str]) -> list[ConnectionRecord]: ...
    async def delete_connection(self, key: ItemKey) -> bool: ...
    async def upsert_bridge(self, record: BridgeRecord) -> None:
        """Insert or replace the bridge of `record.key` (its graph is kept); a config-declared one
        moves a config-declared bridge of its id from another owner, with its graph."""
        ...
    async def find_bridges(self, owners: Sequence[str], bridge_id: str) -> list[BridgeRecord]:
        """The bridges of that id owned by any of `owners` (at most one per owner)."""
        ...
    async def list_bridges(self, owners: Sequence[str]) -> list[BridgeRecord]: ...
    async def delete_bridge(self, key: ItemKey) -> bool: ...
    async def save_graph(
        self, bridge: ItemKey, graph: dict[str, Any], updated_at: float, saved_by: str | None = None,
        expected_version: int | None = None,
    ) -> int:
        """Replace the graph whole and return its new version (1 for the first save). With
        `expected_version` the save happens only if that version is the stored one (0: none saved
        yet); otherwise `GraphConflict`. Every saved graph is kept as a version too (the last
        `KEPT_VERSIONS`; C6), the one it replaces included."""
        ...
    async def saved_graph(self, bridge: ItemKey) -> SavedGraph | None: ...
    async def graph_versions(self, bridge: ItemKey) -> list[GraphVersion]:
        """The bridge's kept graph versions, newest first."""
        ...
    async def graph_version(self, bridge: ItemKey, version: int) -> SavedGraph | None:
        """One kept version's graph (None: not kept, or never saved)."""
        ...
    async def load_graph(self, bridge: ItemKey) -> dict[str, Any] | None: ...
    async def append_audit(self, records: Sequence[AuditRecord]) -> None: ...
    async def query_audit(self, query: AuditQuery) -> list[AuditRecord]: ...


def is_postgres(database: str) -> bool:
    """Does `bridge.database` name a PostgreSQL server?"""
    return database.startswith(POSTGRES_SCHEMES)


def sqlite_path(database: str, base_dir: pathlib.Path) -> str:
    """The SQLite file `bridge.database` names (relative paths are read from the config's folder)."""
    if database == ":memory:":
        return database
    path = pathlib.Path(database.removeprefix("sqlite:///")).expanduser()
    return str(path if path.is_absolute() else base_dir / path)


KEPT_VERSIONS = 50
"""How many saved graphs a bridge keeps (C6): older versions are dropped at the next save."""


def graph_counts(graph: dict[str, Any]) -> tuple[int, int]:
    """A graph's node and edge counts (what its version list shows)."""
    nodes, edges = graph.get("nodes"), graph.get("edges")
    return (len(nodes) if isinstance(nodes, list) else 0, len(edges) if isinstance(edges, list) else 0)


def bridge_from_row(row: Sequence[Any]) -> BridgeRecord:
    """A `bridges` row (id, owner, connections as JSON, source) of either store."""
    return BridgeRecord(row[0], row[1], tuple(json.loads(row[2])), row[3])


def audit_from_row(row: Sequence[Any]) -> AuditRecord:
    """An `audit` row (its columns in table order) of either store."""
    seq, ts, action, actor_id, email, resource, scope, mutating, args, status, duration, owner = row
    return AuditRecord(
        ts, action, actor_id, email, resource, scope, bool(mutating), json.loads(args), status, duration, seq, owner
    )


AUDIT_COLUMNS = ("ts", "action", "actor_id", "actor_email", "resource", "scope", "mutating", "args", "status",
                 "duration_ms", "owner")
"""The columns a read returns after `seq`."""

AUDIT_WRITE_COLUMNS = (*AUDIT_COLUMNS, "record_id")
"""The columns an append writes, in the order of `audit_values`: a record's id too, unique, so that
a batch written twice (O4: committed, its acknowledgement lost, replayed from the spool) is stored once."""


def audit_values(record: AuditRecord) -> tuple[Any, ...]:
    """A record's values for `AUDIT_WRITE_COLUMNS` (`args` as JSON; each store converts `mutating` as it needs)."""
    r = record
    return (r.ts, r.action, r.actor_id, r.actor_email, r.resource, r.scope, r.mutating, json.dumps(r.args), r.status,
            r.duration_ms, r.owner, r.record_id)


def audit_conditions(query: AuditQuery, mark: Callable[[Any], str]) -> list[str]:
    """The SQL conditions of `query` (all must hold); `mark(value)` adds a parameter and returns its
    placeholder, so each store writes its own. The actor's records include, with `query.owners`,
    the records of changes to connections those owners own (`AuditRecord.owner`)."""
    conditions = []
    if query.actor_id is not None:
        own = f"actor_id = {mark(query.actor_id)}"
        if query.owners:
            own = f"({own} OR owner IN ({', '.join(mark(o) for o in query.owners)}))"
        conditions.append(own)
    conditions += [
        f"{column} {op} {mark(value)}" for column, op, value in (
            ("ts", ">=", query.since), ("ts", "<", query.until), ("action", "=", query.action),
            ("resource", "=", query.resource), ("status", "=", query.status), ("scope", "=", query.scope),
            ("seq", "<", query.before),
        ) if value is not None
    ]
    return conditions
