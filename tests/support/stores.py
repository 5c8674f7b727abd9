"""A Bridge store of either kind for tests that run against both (S1): a SQLite file, or a fresh
database on the machine's PostgreSQL server (tests/support/postgres.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from gateway.bridge.store import BridgeStore
from gateway.bridge.store_factory import open_store
from tests.support import postgres

KINDS = ("sqlite", "postgresql")
"""The `kind`s of `opened_store`, for `pytest.fixture(params=KINDS)`."""


@contextlib.asynccontextmanager
async def opened_store(kind: str, folder: Path) -> AsyncIterator[BridgeStore]:
    """An opened store of `kind` ("sqlite": a file in `folder`; "postgresql": a database of its own),
    closed (and the database dropped) after."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "sqlite":
            database = str(folder / "bridge.db")
        else:
            database = await stack.enter_async_context(postgres.fresh_database())
        db = open_store(database, folder)
        await db.open()
        stack.push_async_callback(db.close)
        yield db
