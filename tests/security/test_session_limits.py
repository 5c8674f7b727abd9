"""Per-caller limits on open Bridge MCP sessions (issue 15, finding 4).

One caller used to open 300 sessions in 0.4 s in a single global table (oldest evicted first):
at the cap others got 503, or their live sessions were evicted (404). Now each caller holds at most
`sessionsPerCaller` (its own least recently used session closes when it opens one more), and the
global cap refuses new sessions without ever evicting a live one.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from gateway.bridge.config import BridgeConfig
from gateway.bridge.sessions import SessionTable, TooManyOpening
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import ServerThread, serve

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    config = BridgeConfig.model_validate({"database": ":memory:", "limits": {"sessionsPerCaller": 3, "sessions": 5}})
    with serve(bridge_app(config, tmp_path_factory.mktemp("sessions")).app) as server:
        yield server


async def open_session(bridge: ServerThread, who: str) -> httpx2.Response:
    async with mcp_http(who) as http:
        return await http.post(f"{bridge.url}/mcp", json=INIT, headers=HEADERS)


async def ping(bridge: ServerThread, who: str, session: str) -> int:
    async with mcp_http(who) as http:
        response = await http.post(f"{bridge.url}/mcp", json=PING, headers={**HEADERS, "mcp-session-id": session})
    return response.status_code


async def test_a_caller_past_its_limit_closes_its_own_oldest_sessions_never_anothers(bridge: ServerThread) -> None:
    # R: F2 (issue 15: one caller's sessions evicted other callers' live sessions)
    bobs = (await open_session(bridge, "bob-key")).headers["mcp-session-id"]
    alices = [(await open_session(bridge, "alice-key")).headers["mcp-session-id"] for _ in range(5)]
    assert [await ping(bridge, "alice-key", s) for s in alices] == [404, 404, 200, 200, 200]
    assert await ping(bridge, "bob-key", bobs) == 200


async def test_a_recently_used_session_outlives_an_idle_newer_one(bridge: ServerThread) -> None:
    # R: F2
    first, second, third = [(await open_session(bridge, "alice-key")).headers["mcp-session-id"] for _ in range(3)]
    assert await ping(bridge, "alice-key", first) == 200  # first is now the most recently used
    await open_session(bridge, "alice-key")
    assert [await ping(bridge, "alice-key", s) for s in (first, second, third)] == [200, 404, 200]


async def test_at_the_global_cap_new_sessions_get_503_and_no_live_session_is_evicted(bridge: ServerThread) -> None:
    # R: F2
    alices = [(await open_session(bridge, "alice-key")).headers["mcp-session-id"] for _ in range(3)]
    bobs = [(await open_session(bridge, "bob-key")).headers["mcp-session-id"] for _ in range(2)]
    refused = await open_session(bridge, "bob-key")
    assert refused.status_code == 503
    assert [await ping(bridge, "alice-key", s) for s in alices] == [200, 200, 200]
    assert [await ping(bridge, "bob-key", s) for s in bobs] == [200, 200]


def test_opening_requests_in_flight_are_capped_per_caller() -> None:
    # R: F2 (a burst of concurrent opens cannot pass the cap)
    table = SessionTable(per_caller=2)
    alice, bob = ("user", "alice", "acme", None), ("user", "bob", "globex", None)
    table.begin_open(alice)
    table.begin_open(alice)
    with pytest.raises(TooManyOpening):
        table.begin_open(alice)
    table.begin_open(bob)  # another caller is not held up
    assert table.end_open(alice, "s1", lambda s: True) == []
    table.begin_open(alice)
