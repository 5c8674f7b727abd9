"""The one place that picks a Bridge store by `bridge.database` (SQLite or PostgreSQL).

A module of its own so that gateway.bridge.store (the interface both stores implement) never
imports the stores that import it.
"""

from __future__ import annotations

import pathlib

from gateway.bridge.store import BridgeStore, is_postgres, sqlite_path
from gateway.secrets import SecretSet, resolve_secret


def open_store(
    database: str, base_dir: pathlib.Path, *, password: str | None = None, secrets: SecretSet | None = None,
    pool_size: int = 10,
) -> BridgeStore:
    """The store `database` names (not opened yet). `password` is a secret reference (`env:`/`file:`),
    read now; its value is added to `secrets` so that no log or error shows it."""
    if is_postgres(database):
        from gateway.bridge.store_postgres import PostgresStore  # asyncpg is loaded only when used

        value = resolve_secret(password, base_dir, secrets) if password is not None else None
        return PostgresStore(database, password=value, pool_size=pool_size)
    from gateway.bridge.store_sqlite import SqliteStore

    return SqliteStore(sqlite_path(database, base_dir))
