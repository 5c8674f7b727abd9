"""A burst of federated calls through the Bridge endpoint leaves one record each, in the order the
calls ended, with the audit writer gathering them into batches (issue 35; F4, F5)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.records import AuditRecord
from gateway.bridge.store_sqlite import SqliteStore
from tests.integration.test_bridge_audit import LOCKED, World, config_for
from tests.support.bridge_servers import CallLog, bridge_app, mcp_http, tool_server
from tests.support.http_server import serve

BURST = 40


class CountingStore(SqliteStore):
    """The real SQLite store, noting the size of each audit batch it is given."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.batches: list[int] = []

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        self.batches.append(len(records))
        await super().append_audit(records)


@pytest.fixture
def world(tmp_path: Any) -> Iterator[tuple[World, CountingStore]]:
    log = CallLog()
    store = CountingStore(tmp_path / "bridge.db")
    with serve(tool_server(log, required_header=LOCKED)) as tools:
        app = bridge_app(config_for(tools.url), tmp_path, store=store)
        with serve(app.app) as bridge:
            yield World(app, bridge, log), store


async def test_a_burst_of_calls_leaves_one_record_each_in_the_order_they_ended(world: tuple[World, CountingStore]) -> None:
    # R: F4, F5
    bridge, store = world
    clients = [Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) for _ in range(BURST)]

    async def call(client: Client, n: int) -> None:
        async with client:
            assert not (await client.call_tool("tools__echo", {"text": "x" * n})).is_error

    await asyncio.gather(*(call(c, n) for n, c in enumerate(clients, start=1)))
    await bridge.flushed()
    async with mcp_http("alice-key") as http:
        records = (await http.get(f"{bridge.url}/audit", params={"limit": "1000"})).json()["data"]
    calls = [r for r in reversed(records) if r["resource"] == "tools__echo"]  # oldest first, by seq
    assert sorted(r["args"]["text"]["length"] for r in calls) == list(range(1, BURST + 1))  # each call once
    assert [r["ts"] for r in calls] == sorted(r["ts"] for r in calls)  # stored in the order they were queued
    assert sum(store.batches) == len(records)  # every record written, none twice
    assert bridge.app.registry.get_sample_value("toolgate_audit_written_total") == len(records)
    assert bridge.app.registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) is None
