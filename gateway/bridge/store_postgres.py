"""`PostgresStore`: the Bridge store (store.py) on PostgreSQL, shared by every replica (S1, S2).

- **Driver**: asyncpg (pinned in pyproject.toml; docs/deploy.md says why), with its own pool.
- **Schema migrations**: numbered steps in `MIGRATIONS`, applied in order at `open()` and recorded
  in `toolgate_schema`. All of it runs in one transaction under a transaction-level advisory lock,
  so replicas starting at once apply each step exactly once and the others wait, then see it done.
  A role that may not create tables can still start once the schema is current.
- **Audit log append-only twice**: a statement trigger refuses UPDATE, DELETE and TRUNCATE on
  `audit` for every role, its owner included; and the migration grants other roles SELECT and
  INSERT on it only (docs/deploy.md: the gateway's role is not the owner).
- **Batches**: `append_audit` writes the writer's batch (audit.py, up to 256) with one INSERT from
  arrays (`unnest`), in the batch's order, skipping records whose `record_id` is stored already
  (step 4's unique index): a batch replayed from the spool after a lost acknowledgement is stored once (O4).
- **PostgreSQL lost**: a statement that cannot reach the server raises `StoreUnavailable` (503 on the
  REST API; the audit writer keeps the batch in its spool when one is configured, else drops and
  counts it); a read is tried once more on a fresh connection, and when that fails too its last
  answer is served, so calls over bridges and connections already seen go on (writes cannot happen
  meanwhile). The pool opens new connections once the server is back. asyncpg's client-side state
  errors while the server shuts down (`InternalClientError`, `InterfaceError`: "another operation is
  in progress", "connection is closed") count as a lost connection too, and the connection that
  raised one is terminated rather than handed back to the pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg

from gateway.bridge.records import (
    AuditQuery, AuditRecord, BridgeRecord, ConnectionRecord, GraphVersion, ItemKey, SavedGraph,
)
from gateway.bridge.store import (
    AUDIT_COLUMNS, AUDIT_WRITE_COLUMNS, KEPT_VERSIONS, GraphConflict, StoreUnavailable, audit_conditions, audit_from_row,
    audit_values, bridge_from_row, graph_counts,
)

log = logging.getLogger("toolgate.bridge.store")

T = TypeVar("T")

LOCK_KEY = 0x746F6F6C67617465  # "toolgate": the advisory lock that serialises migrations
"""Held for the migration transaction only (`pg_advisory_xact_lock`)."""

AUDIT_WAIT = 300.0
"""Seconds the audit writer waits for a pooled connection (a server that is down fails at once)."""

LAST_ANSWERS = 4096
"""Reads remembered to answer while the server cannot be reached (least recently used dropped)."""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, """
CREATE TABLE connections (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, endpoint TEXT NOT NULL,
    auth_header_name TEXT, auth_secret TEXT, source TEXT NOT NULL, prefix TEXT);
CREATE INDEX connections_owner ON connections (owner);
CREATE TABLE bridges (id TEXT PRIMARY KEY, owner TEXT NOT NULL, connections TEXT NOT NULL, source TEXT NOT NULL);
CREATE INDEX bridges_owner ON bridges (owner);
CREATE TABLE graphs (
    bridge_id TEXT PRIMARY KEY, graph TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    saved_by TEXT, version INTEGER NOT NULL);
CREATE TABLE audit (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ts DOUBLE PRECISION NOT NULL, action TEXT NOT NULL,
    actor_id TEXT NOT NULL, actor_email TEXT, resource TEXT NOT NULL, scope TEXT NOT NULL, mutating BOOLEAN NOT NULL,
    args TEXT NOT NULL, status TEXT NOT NULL, duration_ms DOUBLE PRECISION NOT NULL);
CREATE INDEX audit_actor_ts ON audit (actor_id, ts);
CREATE FUNCTION toolgate_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate_audit_append_only();
REVOKE ALL ON connections, bridges, graphs, audit, toolgate_schema FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON connections, bridges, graphs TO PUBLIC;
GRANT SELECT, INSERT ON audit TO PUBLIC;
GRANT SELECT ON toolgate_schema TO PUBLIC;
"""),
    (2, """
ALTER TABLE connections DROP CONSTRAINT connections_pkey, ADD PRIMARY KEY (owner, id);
ALTER TABLE bridges DROP CONSTRAINT bridges_pkey, ADD PRIMARY KEY (owner, id);
ALTER TABLE graphs ADD COLUMN bridge_owner TEXT;
UPDATE graphs SET bridge_owner = bridges.owner FROM bridges WHERE bridges.id = graphs.bridge_id;
UPDATE graphs SET bridge_owner = '' WHERE bridge_owner IS NULL;
ALTER TABLE graphs ALTER COLUMN bridge_owner SET NOT NULL, DROP CONSTRAINT graphs_pkey,
    ADD PRIMARY KEY (bridge_owner, bridge_id);
"""),
    (3, """
ALTER TABLE audit ADD COLUMN owner TEXT;
CREATE INDEX audit_owner_ts ON audit (owner, ts);
"""),
    (4, """
ALTER TABLE audit ADD COLUMN record_id TEXT;
CREATE UNIQUE INDEX audit_record_id ON audit (record_id);
"""),
    (5, """
CREATE TABLE graph_versions (
    bridge_owner TEXT NOT NULL, bridge_id TEXT NOT NULL, version INTEGER NOT NULL, graph TEXT NOT NULL,
    saved_at DOUBLE PRECISION NOT NULL, saved_by TEXT, nodes INTEGER NOT NULL, edges INTEGER NOT NULL,
    PRIMARY KEY (bridge_owner, bridge_id, version));
REVOKE ALL ON graph_versions FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON graph_versions TO PUBLIC;
"""),
)
"""(version, SQL). Never edit a shipped step: add the next one. Step 2 makes ids per owner
(tenancy.py): connections and bridges unique by (owner, id), a graph by its bridge's (owner, id)
(ids were global before, so each graph takes the owner of the one bridge of its id). Step 3 gives an
audit record the owner of the connection a change concerns (`AuditRecord.owner`). Step 4 gives a
record its writer's id, unique (rows written before it have none), so a batch written twice is
stored once (O4). Step 5 keeps every saved graph of a bridge (the last `KEPT_VERSIONS`, C6). The grants go to PUBLIC, i.e. every
role that may connect to the database (docs/deploy.md: grant CONNECT to the gateway's role only)."""

LATEST = MIGRATIONS[-1][0]

_CONNECTION_LOST = (
    OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # the server shutting down, or not accepting connections yet
    asyncpg.InternalClientError,  # the protocol's state broken by a server going away mid-statement
)
"""What counts as the server lost. `InterfaceError` covers the client-side state errors a shutdown
leaves behind ("another operation is in progress", "connection is closed"); `InternalClientError`
(not an `InterfaceError`) is what asyncpg raises when the connection breaks while a statement waits
("waiter is not done while handling critical protocol error")."""

_WRITE_AUDIT = (
    f"INSERT INTO audit ({', '.join(AUDIT_WRITE_COLUMNS)})"
    f" SELECT {', '.join(AUDIT_WRITE_COLUMNS)} FROM unnest("
    "$1::float8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bool[], $8::text[], $9::text[],"
    " $10::float8[], $11::text[], $12::text[]"
    f") WITH ORDINALITY AS batch ({', '.join(AUDIT_WRITE_COLUMNS)}, n) ORDER BY n"
    " ON CONFLICT (record_id) DO NOTHING"
)
"""One batch, in its order (identity values are drawn row by row in `ORDER BY n`), skipping ids stored already."""


class PostgresStore:
    """`BridgeStore` on the PostgreSQL server of `url` (`postgresql://user@host:port/db`)."""

    def __init__(self, url: str, *, password: str | None = None, pool_size: int = 10,
                 connect_timeout: float = 5.0, statement_timeout: float = 10.0) -> None:
        self.url = url
        self._password = password
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._pool: asyncpg.Pool | None = None
        self._last: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    @property
    def where(self) -> str:
        """The server and database, for messages (no user, no password)."""
        parts = urlsplit(self.url)
        return f"PostgreSQL at {parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}"

    async def open(self) -> None:
        """Connect the pool and bring the schema to `LATEST` (under the advisory lock)."""
        try:
            self._pool = await asyncpg.create_pool(
                self.url, password=self._password, min_size=1, max_size=self._pool_size,
                timeout=self._connect_timeout, command_timeout=self._statement_timeout,
            )
        except _CONNECTION_LOST as exc:
            raise StoreUnavailable(f"bridge.database: cannot reach {self.where}: {_reason(exc)}") from None
        except asyncpg.PostgresError as exc:  # a wrong password, an unknown database or role
            raise StoreUnavailable(f"bridge.database: {self.where} refused the connection: {exc}") from None
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        assert self._pool is not None
        async with self._pool.acquire(timeout=self._connect_timeout) as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
            if await conn.fetchval("SELECT to_regclass('toolgate_schema')") is None:
                current = 0
            else:
                current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM toolgate_schema")
            if current > LATEST:
                raise StoreUnavailable(
                    f"bridge.database: {self.where} has schema version {current}, newer than this toolgate's "
                    f"({LATEST}); run the newer toolgate"
                )
            try:
                for version, sql in MIGRATIONS[current:]:
                    if version == 1:
                        await conn.execute(
                            "CREATE TABLE toolgate_schema (version INTEGER PRIMARY KEY,"
                            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                        )
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO toolgate_schema (version) VALUES ($1)", version)
                    log.info("bridge store: %s migrated to schema version %d", self.where, version)
            except asyncpg.InsufficientPrivilegeError as exc:
                raise StoreUnavailable(
                    f"bridge.database: {self.where} has schema version {current}, this toolgate needs {LATEST}, "
                    f"and this role may not change the schema ({exc}); run `toolgate bridge migrate` as the "
                    "schema's owner (docs/deploy.md)"
                ) from None

    async def close(self) -> None:
        """Close the pool (waiting for statements in progress, up to the statement timeout)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self._statement_timeout)
            except (TimeoutError, *_CONNECTION_LOST):
                pool.terminate()

    async def _run(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], *, wait: float | None = None) -> T:
        """`fn` on a pooled connection; a server that cannot be reached, or no pooled connection free
        within `wait` seconds (default: the connect timeout), is `StoreUnavailable`."""
        if self._pool is None:
            raise RuntimeError("the bridge store is not open")
        try:
            async with self._pool.acquire(timeout=self._connect_timeout if wait is None else wait) as conn:
                try:
                    return await fn(conn)
                except _CONNECTION_LOST:
                    conn.terminate()  # its state is unknown: the pool opens a fresh one for the next caller
                    raise
        except _CONNECTION_LOST as exc:
            raise StoreUnavailable(f"the Bridge store ({self.where}) cannot be reached: {_reason(exc)}") from None

    async def _read(self, key: tuple[Any, ...], fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """A read: tried twice (the first connection may be one the server dropped), and when the
        server cannot be reached, the last answer to the same read if there was one."""
        try:
            try:
                value = await self._run(fn)
            except StoreUnavailable:
                value = await self._run(fn)
        except StoreUnavailable:
            if key in self._last:
                log.warning("bridge store unreachable; %s served from its last answer", key[0])
                return self._last[key]  # type: ignore[no-any-return]
            raise
        self._last[key] = value
        self._last.move_to_end(key)
        while len(self._last) > LAST_ANSWERS:
            self._last.popitem(last=False)
        return value

    async def upsert_connection(self, record: ConnectionRecord) -> None:
        """Insert or replace a connection (store.py: a config-declared one moves)."""
        sql = (
            "INSERT INTO connections (id, owner, endpoint, auth_header_name, auth_secret, source, prefix)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (owner, id) DO UPDATE SET"
            " endpoint = EXCLUDED.endpoint, auth_header_name = EXCLUDED.auth_header_name,"
            " auth_secret = EXCLUDED.auth_secret, source = EXCLUDED.source, prefix = EXCLUDED.prefix"
        )
        row = (record.id, record.owner, record.endpoint, record.auth_header_name, record.auth_secret, record.source,
               record.prefix)

        async def upsert(db: asyncpg.Connection) -> None:
            async with db.transaction():
                if record.source == "config":
                    await db.execute("DELETE FROM connections WHERE id = $1 AND source = 'config' AND owner <> $2",
                                     record.id, record.owner)
                await db.execute(sql, *row)

        await self._run(upsert)

    async def find_connections(self, owners: Sequence[str], connection_id: str) -> list[ConnectionRecord]:
        """The connections of that id owned by any of `owners`."""
        sql = ("SELECT id, owner, endpoint, auth_header_name, auth_secret, source, prefix"
               " FROM connections WHERE id = $1 AND owner = ANY($2::text[])")
        rows = await self._read(("find_connections", tuple(owners), connection_id),
                                lambda db: db.fetch(sql, connection_id, list(owners)))
        return [ConnectionRecord(*row) for row in rows]

    async def list_connections(self, owners: Sequence[str]) -> list[ConnectionRecord]:
        """Connections owned by any of `owners`, by id."""
        sql = ("SELECT id, owner, endpoint, auth_header_name, auth_secret, source, prefix"
               " FROM connections WHERE owner = ANY($1::text[]) ORDER BY id, owner")
        rows = await self._read(("list_connections", tuple(owners)), lambda db: db.fetch(sql, list(owners)))
        return [ConnectionRecord(*row) for row in rows]

    async def delete_connection(self, key: ItemKey) -> bool:
        """Remove a connection; True if it existed."""
        status = await self._run(lambda db: db.execute("DELETE FROM connections WHERE owner = $1 AND id = $2", *key))
        return _count(status) > 0

    async def upsert_bridge(self, record: BridgeRecord) -> None:
        """Insert or replace a bridge (its graph is kept; store.py: a config-declared one moves)."""
        sql = (
            "INSERT INTO bridges (id, owner, connections, source) VALUES ($1, $2, $3, $4) ON CONFLICT (owner, id)"
            " DO UPDATE SET connections = EXCLUDED.connections, source = EXCLUDED.source"
        )
        row = (record.id, record.owner, json.dumps(list(record.connections)), record.source)
        moved = "SELECT owner FROM bridges WHERE id = $1 AND source = 'config' AND owner <> $2"

        async def upsert(db: asyncpg.Connection) -> None:
            async with db.transaction():
                if record.source == "config":
                    await db.execute(
                        f"UPDATE graphs SET bridge_owner = $2 WHERE bridge_id = $1 AND bridge_owner IN ({moved})"
                        " AND NOT EXISTS (SELECT 1 FROM graphs WHERE bridge_owner = $2 AND bridge_id = $1)",
                        record.id, record.owner,
                    )
                    await db.execute(f"DELETE FROM graphs WHERE bridge_id = $1 AND bridge_owner IN ({moved})",
                                     record.id, record.owner)
                    await db.execute(  # its versions move with it, unless the new owner has versions of its own
                        f"UPDATE graph_versions SET bridge_owner = $2 WHERE bridge_id = $1 AND bridge_owner IN ({moved})"
                        " AND NOT EXISTS (SELECT 1 FROM graph_versions WHERE bridge_owner = $2 AND bridge_id = $1)",
                        record.id, record.owner,
                    )
                    await db.execute(f"DELETE FROM graph_versions WHERE bridge_id = $1 AND bridge_owner IN ({moved})",
                                     record.id, record.owner)
                    await db.execute("DELETE FROM bridges WHERE id = $1 AND source = 'config' AND owner <> $2",
                                     record.id, record.owner)
                await db.execute(sql, *row)

        await self._run(upsert)

    async def find_bridges(self, owners: Sequence[str], bridge_id: str) -> list[BridgeRecord]:
        """The bridges of that id owned by any of `owners`."""
        sql = "SELECT id, owner, connections, source FROM bridges WHERE id = $1 AND owner = ANY($2::text[])"
        rows = await self._read(("find_bridges", tuple(owners), bridge_id), lambda db: db.fetch(sql, bridge_id, list(owners)))
        return [bridge_from_row(row) for row in rows]

    async def list_bridges(self, owners: Sequence[str]) -> list[BridgeRecord]:
        """Bridges owned by any of `owners`, by id."""
        sql = "SELECT id, owner, connections, source FROM bridges WHERE owner = ANY($1::text[]) ORDER BY id, owner"
        rows = await self._read(("list_bridges", tuple(owners)), lambda db: db.fetch(sql, list(owners)))
        return [bridge_from_row(row) for row in rows]

    async def delete_bridge(self, key: ItemKey) -> bool:
        """Remove a bridge and its graph; True if it existed."""

        async def delete(db: asyncpg.Connection) -> str:
            async with db.transaction():
                await db.execute(f"DELETE FROM graphs WHERE {_GRAPH}", *key)
                await db.execute(f"DELETE FROM graph_versions WHERE {_GRAPH}", *key)
                return await db.execute("DELETE FROM bridges WHERE owner = $1 AND id = $2", *key)  # type: ignore[no-any-return]

        return _count(await self._run(delete)) > 0

    async def save_graph(
        self, bridge: ItemKey, graph: dict[str, Any], updated_at: float, saved_by: str | None = None,
        expected_version: int | None = None,
    ) -> int:
        """Replace a bridge's graph whole, keeping it (and the graph it replaces) as versions, in one
        transaction; its new version (store.py). Two saves at once: the stored row's lock (`FOR
        UPDATE`) orders them, and the second reads the version the first wrote (a save based on
        the old one is refused). Two first saves at once: the second finds the row the first
        inserted and, without `expected_version`, saves over it."""
        text = json.dumps(graph)
        nodes, edges = graph_counts(graph)

        async def save(db: asyncpg.Connection) -> int | None:
            async with db.transaction():
                row = await db.fetchrow(
                    f"SELECT version, graph, updated_at, saved_by FROM graphs WHERE {_GRAPH} FOR UPDATE", *bridge)
                current = row["version"] if row is not None else 0
                if expected_version is not None and expected_version != current:
                    raise GraphConflict(bridge, expected_version, current)
                if row is not None:  # the graph replaced is kept (one saved before versions were kept has no row yet)
                    old_nodes, old_edges = graph_counts(json.loads(row["graph"]))
                    await db.execute(f"{_INSERT_VERSION} ON CONFLICT DO NOTHING", *bridge, current, row["graph"],
                                     row["updated_at"], row["saved_by"], old_nodes, old_edges)
                    await db.execute(f"UPDATE graphs SET graph = $3, updated_at = $4, saved_by = $5, version = $6"
                                     f" WHERE {_GRAPH}", *bridge, text, updated_at, saved_by, current + 1)
                else:
                    inserted = await db.fetchval(
                        "INSERT INTO graphs (bridge_owner, bridge_id, graph, updated_at, saved_by, version)"
                        " VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT (bridge_owner, bridge_id) DO NOTHING RETURNING version",
                        *bridge, text, updated_at, saved_by)
                    if inserted is None:  # another first save won the race
                        if expected_version is not None:
                            raise GraphConflict(bridge, expected_version, 1)
                        return None
                await db.execute(f"{_INSERT_VERSION} ON CONFLICT (bridge_owner, bridge_id, version) DO UPDATE SET"
                                 " graph = EXCLUDED.graph, saved_at = EXCLUDED.saved_at, saved_by = EXCLUDED.saved_by,"
                                 " nodes = EXCLUDED.nodes, edges = EXCLUDED.edges",
                                 *bridge, current + 1, text, updated_at, saved_by, nodes, edges)
                await db.execute(f"DELETE FROM graph_versions WHERE {_GRAPH} AND version <= $3",
                                 *bridge, current + 1 - KEPT_VERSIONS)
                return current + 1

        version = await self._run(save)
        if version is None:
            version = await self._run(save)  # the row exists now: saved over it
        assert version is not None
        return version

    async def graph_versions(self, bridge: ItemKey) -> list[GraphVersion]:
        """The bridge's kept graph versions, newest first."""
        sql = f"SELECT version, saved_at, saved_by, nodes, edges FROM graph_versions WHERE {_GRAPH} ORDER BY version DESC"
        rows = await self._run(lambda db: db.fetch(sql, *bridge))
        return [GraphVersion(*row) for row in rows]

    async def graph_version(self, bridge: ItemKey, version: int) -> SavedGraph | None:
        """One kept version's graph."""
        sql = f"SELECT graph, version, saved_by FROM graph_versions WHERE {_GRAPH} AND version = $3"
        row = await self._run(lambda db: db.fetchrow(sql, *bridge, version))
        return SavedGraph(json.loads(row[0]), row[1], row[2]) if row is not None else None

    async def saved_graph(self, bridge: ItemKey) -> SavedGraph | None:
        """A bridge's graph with its version and editor, or None before the first save."""
        sql = f"SELECT graph, version, saved_by FROM graphs WHERE {_GRAPH}"
        row = await self._read(("saved_graph", bridge), lambda db: db.fetchrow(sql, *bridge))
        return SavedGraph(json.loads(row[0]), row[1], row[2]) if row is not None else None

    async def load_graph(self, bridge: ItemKey) -> dict[str, Any] | None:
        """A bridge's graph as saved, or None."""
        sql = f"SELECT graph FROM graphs WHERE {_GRAPH}"
        text = await self._read(("load_graph", bridge), lambda db: db.fetchval(sql, *bridge))
        return json.loads(text) if text is not None else None

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        """Append a batch in its order with one statement (all of it or none); records whose
        `record_id` is stored already are skipped."""
        columns = list(zip(*(audit_values(r) for r in records))) if records else [()] * len(AUDIT_WRITE_COLUMNS)
        # the writer runs in the background: a pool busy with calls' reads is waited for, not a reason to drop
        await self._run(lambda db: db.execute(_WRITE_AUDIT, *(list(c) for c in columns)), wait=AUDIT_WAIT)

    async def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """An actor's records (all actors when `actor_id` is None), newest first."""
        params: list[Any] = []

        def mark(value: Any) -> str:
            params.append(value)
            return f"${len(params)}"

        where = ["TRUE", *audit_conditions(query, mark)]
        params.append(query.limit)
        sql = (
            f"SELECT seq, {', '.join(AUDIT_COLUMNS)}"
            f" FROM audit WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ${len(params)}"
        )
        rows = await self._run(lambda db: db.fetch(sql, *params))
        return [audit_from_row(row) for row in rows]


_GRAPH = "bridge_owner = $1 AND bridge_id = $2"

_INSERT_VERSION = ("INSERT INTO graph_versions (bridge_owner, bridge_id, version, graph, saved_at, saved_by, nodes, edges)"
                   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")


def _count(status: str) -> int:
    """The row count of a command tag (`DELETE 1`)."""
    return int(status.rsplit(" ", 1)[-1])


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

