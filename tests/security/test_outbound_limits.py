"""Per-caller bounds on outbound MCP operations (issue 15, finding 6: six tools/list calls to a
tarpit held 300 outbound sockets for 30 s; issue 32, #12: the REST tool listing was not bounded,
one caller held 60 sockets) and on connections made through the API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.bridge.gate import CallerGate
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.secrets import SecretSet
from tests.support.bridge_servers import CallLog, tool_server
from tests.support.http_server import serve


class Tarpit:
    """A loopback TCP server that accepts and never answers; counts the sockets held open."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0
        self.accepted = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.accepted += 1
        self.most = max(self.most, self.open)
        try:
            while await reader.read(65536):
                pass
        finally:
            self.open -= 1
            writer.close()


@pytest.fixture
async def tarpit() -> AsyncIterator[tuple[Tarpit, str]]:
    pit = Tarpit()
    server = await asyncio.start_server(pit.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield pit, f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()


async def test_one_callers_operations_toward_a_tarpit_hold_at_most_its_slots_and_others_pass(
    tarpit: tuple[Tarpit, str],
) -> None:
    # R: F10, F15 (one caller's slow servers never hold more than outboundPerCaller sockets)
    pit, url = tarpit
    gate = CallerGate(per_caller=2)
    with serve(tool_server(CallLog(), delay=0)) as tools:
        upstreams = Upstreams(base_dir=Path("."), secrets=SecretSet(), list_ttl=30, timeout=1.0)
        try:
            stuck = [ConnectionRecord(f"pit{i}", "alice", url, source="config") for i in range(6)]

            async def alice() -> list[BaseException | object]:
                with gate.caller(("user", "alice", "acme")):
                    return await asyncio.gather(*(upstreams.list_tools(c) for c in stuck), return_exceptions=True)

            async def bob() -> list[str]:
                with gate.caller(("user", "bob", "globex")):
                    return [t.name for t in await upstreams.list_tools(ConnectionRecord("ok", "bob", f"{tools.url}/mcp", source="config"))]

            alices, bobs = await asyncio.gather(alice(), bob())
        finally:
            await upstreams.close()
    assert all(isinstance(r, UpstreamCallFailed) for r in alices)
    assert pit.most == 2, "alice never held more than her 2 slots toward the tarpit"
    assert "echo" in bobs, "bob's call did not wait for alice's slots"


class HeldTarpit:
    """A loopback TCP server that accepts and never answers; the test releases (closes) the sockets
    it holds, oldest first. `most`: the most sockets held at once."""

    def __init__(self) -> None:
        self.held: list[asyncio.StreamWriter] = []
        self.accepted = 0
        self.most = 0
        self.changed = asyncio.Condition()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.held.append(writer)
        self.accepted += 1
        self.most = max(self.most, len(self.held))
        async with self.changed:
            self.changed.notify_all()
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            if writer in self.held:  # the client gave up first
                self.held.remove(writer)
            writer.close()

    def release(self) -> None:
        """Close the oldest held socket: the request on it fails, and its caller's slot is free."""
        self.held.pop(0).close()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout=10)


async def test_the_rest_tool_listing_waits_for_the_callers_outbound_slots_and_others_pass(tmp_path: Path) -> None:
    # R: F10, F15, C3 (issue 32, #12: GET /connections/{id}/tools was not under the per-caller cap)
    from gateway.bridge.config import BridgeConfig
    from tests.support.bridge_servers import bridge_app, mcp_http

    pit = HeldTarpit()
    server = await asyncio.start_server(pit.handle, "127.0.0.1", 0)
    pit_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    try:
        with serve(tool_server(CallLog(), delay=0)) as tools:
            config = BridgeConfig.model_validate({"database": ":memory:", "limits": {"outboundPerCaller": 2}, "connections": [
                *({"id": f"pit{i}", "owner": "alice", "endpoint": pit_url} for i in range(6)),
                {"id": "ok", "owner": "bob", "endpoint": f"{tools.url}/mcp"},
            ]})
            with serve(bridge_app(config, tmp_path).app) as bridge:
                async with mcp_http("alice-key") as alice, mcp_http("bob-key") as bob:
                    listings = [asyncio.create_task(alice.get(f"{bridge.url}/connections/pit{i}/tools")) for i in range(6)]
                    await pit.until(lambda: len(pit.held) >= 2)
                    bobs = await bob.get(f"{bridge.url}/connections/ok/tools")  # while alice's slots are taken
                    for n in range(6):  # one socket released at a time: each lets one waiting listing go out
                        await pit.until(lambda: pit.accepted > n)
                        pit.release()
                    alices = await asyncio.gather(*listings)
    finally:
        server.close()
    assert pit.most == 2, f"alice held {pit.most} sockets at once; her outboundPerCaller is 2"
    assert [r.status_code for r in alices] == [502] * 6
    assert bobs.status_code == 200 and "echo" in [t["name"] for t in bobs.json()["data"]]


async def test_a_caller_cannot_make_more_connections_than_the_owner_limit(tmp_path: Path) -> None:
    # R: F3
    from gateway.bridge.config import BridgeConfig
    from tests.support.bridge_servers import bridge_app, mcp_http

    config = BridgeConfig.model_validate({"database": ":memory:", "limits": {"connectionsPerOwner": 2}})
    with serve(bridge_app(config, tmp_path).app) as bridge:
        async with mcp_http("alice-key") as http:
            made = [await http.post(f"{bridge.url}/connections", json={"id": f"c{i}", "endpoint": "https://mcp.example.com/mcp"})
                    for i in range(3)]
            org_made = await http.post(f"{bridge.url}/connections", json={"id": "c9", "owner": "org:acme", "endpoint": "https://mcp.example.com/mcp"})
    assert [r.status_code for r in made] == [201, 201, 403]
    assert made[2].json()["error"]["message"] == (
        "alice has 2 connections made through the API; the limit is 2 (bridge.limits.connectionsPerOwner)"
    )
    assert org_made.status_code == 201, "the org is another owner with its own count"
