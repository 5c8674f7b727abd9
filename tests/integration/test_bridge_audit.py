"""The audit log through the Bridge endpoint: one record per tools/call, none for listing, reduced
arguments, filtering per owner, and a broken store that never breaks a call (F4, F5)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.bridge.config import BridgeConfig
from gateway.bridge.records import AuditRecord
from gateway.bridge.store_sqlite import SqliteStore
from tests.support import canary
from tests.support.bridge_servers import BridgeApp, CallLog, audit_flushed, bridge_app, fan_in_graph, mcp_http, tool_server
from tests.support.http_server import ServerThread, serve


@dataclass
class World:
    app: BridgeApp
    server: ServerThread
    tools: CallLog

    @property
    def url(self) -> str:
        return self.server.url

    async def flushed(self) -> None:
        """Wait (with a deadline) until the audit queue is drained."""
        await audit_flushed(self.app, self.server)


LOCKED = (canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN)
"""The tool server's check that the connection's canary secret arrives."""


def config_for(url: str) -> BridgeConfig:
    return BridgeConfig.model_validate(
        {
            "database": "bridge.db",
            "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{url}/mcp", **canary.connection_auth()}],
            "bridges": [{"id": "pipes", "owner": "alice", "connections": ["tools"]}],
        }
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    log = CallLog()
    with serve(tool_server(log, delay=0.01, required_header=LOCKED)) as tools:
        app = bridge_app(config_for(tools.url), tmp_path_factory.mktemp("audit"))
        with serve(app.app) as bridge:
            yield World(app, bridge, log)


def client(world: World, path: str = "/mcp", key: str = "alice-key", mode: str = "auto") -> Client:
    return Client(streamable_http_client(f"{world.url}{path}", http_client=mcp_http(key)), mode=mode)


async def audit(world: World, key: str = "alice-key", **params: str) -> list[dict[str, Any]]:
    await world.flushed()
    async with mcp_http(key) as http:
        response = await http.get(f"{world.url}/audit", params={"limit": "1000", **params})
    assert response.status_code == 200
    return response.json()["data"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_call_leaves_one_record_and_listing_leaves_none(world: World, mode: str) -> None:
    # R: F4
    async with mcp_http("alice-key") as http:
        assert (await http.put(f"{world.url}/bridges/pipes/graph", json=fan_in_graph())).status_code == 200
    await world.flushed()  # the save's own record (bridge.graph_save) is written before counting
    before = len(await audit(world))
    async with client(world, "/mcp/pipes", mode=mode) as alice:
        await alice.list_tools()
        await alice.call_tool("tools__echo", {"text": "hi"})
        await alice.call_tool("fan_in", {"query": "repo-x"})
        await alice.call_tool("tools__nope", {})
        await alice.list_tools()
    records = (await audit(world))[: 3]
    assert len(await audit(world)) == before + 3
    newest_first = [(r["action"], r["resource"], r["status"], r["scope"]) for r in records]
    assert newest_first == [
        ("mcp.tool_call", "tools__nope", "failure", "bridge:pipes"),
        ("mcp.pipeline_call", "fan_in", "success", "bridge:pipes"),
        ("mcp.tool_call", "tools__echo", "success", "bridge:pipes"),
    ]
    assert records[1]["actor"] == {"id": "alice", "email": "alice@acme.test"}
    run = records[1]["args"].pop("$run")  # R: C5 — per node status, reason and duration, no values
    assert records[1]["args"] == {"query": "repo-x", "$bridge": {"owner": "alice"}, "$graph": {"savedBy": "alice"}}
    assert [(n["id"], n["status"]) for n in run["nodes"]] == [
        ("in1", "ok"), ("ta", "ok"), ("tb", "ok"), ("m1", "ok"), ("out1", "ok")]
    assert run["durationMs"] > 0 and all(set(n) == {"id", "status", "reason", "durationMs"} for n in run["nodes"])


async def test_a_token_and_free_text_are_stored_only_as_type_and_length(world: World) -> None:
    # R: F4
    secret = "ghp_" + "x" * 36
    args = {"owner": "acme", "repo": "site", "title": "Fix the thing", "body": "Long free text " * 5, "token": secret}
    async with client(world) as alice:
        result = await alice.call_tool("tools__create_issue", args)
    assert not result.is_error
    record = (await audit(world, resource="tools__create_issue"))[0]
    assert record["args"] == {
        "owner": "acme",
        "repo": "site",
        "title": {"type": "string", "length": 13},
        "body": {"type": "string", "length": 75},
        "token": {"type": "string", "length": 40},
    }
    assert record["mutating"] is True and record["scope"] == "federation"
    assert secret not in str(await audit(world))


async def test_a_tool_name_that_is_free_text_is_stored_only_as_its_length(world: World) -> None:
    # R: F4
    name = "please delete the prod database, my password is hunter2"
    async with client(world) as alice:
        result = await alice.call_tool(name, {})
    assert result.is_error
    record = (await audit(world))[0]
    assert (record["resource"], record["status"]) == (f"(not a tool name: {len(name)} characters)", "failure")
    assert "hunter2" not in str(await audit(world))


async def test_each_user_lists_only_their_own_records_filtered_by_status_and_time(world: World) -> None:
    # R: F5
    async with client(world) as alice:
        await alice.call_tool("tools__boom", {"query": "x"})
    mine = await audit(world, status="failure", resource="tools__boom")
    assert mine and all(r["status"] == "failure" and r["actor"]["id"] == "alice" for r in mine)
    assert await audit(world, key="bob-key") == []
    assert await audit(world, since="2999-01-01T00:00:00Z") == []
    assert await audit(world, action="mcp.pipeline_call", resource="tools__boom") == []


async def test_a_bad_filter_is_refused_with_400_saying_which(world: World) -> None:
    # R: F5
    async with mcp_http("alice-key") as http:
        nan = await http.get(f"{world.url}/audit", params={"since": "nan"})
        zero = await http.get(f"{world.url}/audit", params={"limit": "0"})
    assert (nan.status_code, nan.json()["error"]["message"]) == (400, "not an ISO 8601 time or epoch seconds: 'nan'")
    assert (zero.status_code, zero.json()["error"]["message"]) == (400, "limit must be between 1 and 1000")


class BrokenStore(SqliteStore):
    """A store whose audit inserts always fail."""

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        raise OSError("disk on fire")


async def test_a_broken_audit_store_leaves_calls_succeeding_and_counts_the_drops(tmp_path: Any) -> None:
    # R: F5
    log = CallLog()
    with serve(tool_server(log, delay=0.01, required_header=LOCKED)) as tools:
        app = bridge_app(config_for(tools.url), tmp_path, store=BrokenStore(tmp_path / "broken.db"))
        with serve(app.app) as bridge:
            world = World(app, bridge, log)
            async with client(world) as alice:
                results = [await alice.call_tool("tools__echo", {"text": str(i)}) for i in range(3)]
            await world.flushed()
    assert [r.content[0].text for r in results] == ["0", "1", "2"]
    assert app.registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) == 3
    assert app.registry.get_sample_value("toolgate_bridge_calls_total", {"action": "mcp.tool_call", "status": "success"}) == 3


class StuckStore(SqliteStore):
    """A store whose audit inserts wait until the test opens the gate (a locked database)."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.gate = threading.Event()

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        await asyncio.to_thread(self.gate.wait)
        await super().append_audit(records)


async def test_calls_never_wait_for_a_stuck_audit_store(tmp_path: Any) -> None:
    # R: F5
    log = CallLog()
    store = StuckStore(tmp_path / "stuck.db")
    with serve(tool_server(log, delay=0.01, required_header=LOCKED)) as tools:
        app = bridge_app(config_for(tools.url), tmp_path, store=store)
        with serve(app.app) as bridge:
            world = World(app, bridge, log)
            try:
                async with client(world) as alice:
                    calls = [alice.call_tool("tools__echo", {"text": str(i)}) for i in range(5)]
                    results = await asyncio.wait_for(asyncio.gather(*calls), timeout=10)
            finally:
                store.gate.set()
            await world.flushed()
            async with mcp_http("alice-key") as http:
                written = (await http.get(f"{world.url}/audit")).json()["data"]
    assert sorted(r.content[0].text for r in results) == ["0", "1", "2", "3", "4"]
    assert len(written) == 5
