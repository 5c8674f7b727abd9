"""Per-caller limits on open Bridge MCP sessions (issue 15, finding 4).

One caller used to open 300 sessions in 0.4 s in a single global table (oldest evicted first):
at the cap others got 503, or their live sessions were evicted (404). Now each caller holds at most
`sessionsPerCaller` (its own least recently used session closes when it opens one more), and the
global cap refuses new sessions without ever evicting a live one.

With `auth.mode: none` any bearer string is accepted, and each distinct one used to be a caller of
its own (issue 32, #4: 157 made-up strings filled the session table for everyone). There the
per-caller limits count by the client's address instead (a request naming its own address in
X-Forwarded-For counts as one address with every other such request).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from gateway.bridge.config import BridgeConfig
from gateway.bridge.sessions import SessionTable, TooManyOpening, caller_key
from gateway.identity import Identity
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.upstream import ScriptedUpstream

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


@pytest.fixture
def open_gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[ServerThread]:
    """A real gateway with auth off and the Bridge on: 3 sessions per caller, 5 in all."""
    bridge = {"enabled": True, "database": str(tmp_path / "bridge.db"), "limits": {"sessionsPerCaller": 3, "sessions": 5}}
    with running_gateway(simple_config(upstream.url, bridge=bridge), tmp_path) as gw:
        yield gw


def post(gw: ServerThread, body: dict[str, object], token: str, *, source: str = "127.0.0.1", session: str | None = None,
         forwarded: str | None = None) -> httpx2.Response:
    """One MCP message from `source` (a loopback address of this machine) presenting `token`."""
    headers = {**HEADERS, "authorization": f"Bearer {token}"}
    if session is not None:
        headers["mcp-session-id"] = session
    if forwarded is not None:
        headers["x-forwarded-for"] = forwarded
    with httpx2.Client(transport=httpx2.HTTPTransport(local_address=source), timeout=30) as http:
        return http.post(f"{gw.url}/mcp", json=body, headers=headers)


def made_up() -> str:
    return f"made-up-{secrets.token_hex(8)}"


def test_with_auth_off_made_up_bearer_strings_from_one_address_are_one_caller(open_gateway: ServerThread) -> None:
    # R: F2, G3 (issue 32, #4: every distinct bearer string was a new caller and filled the table for everyone)
    opened = [post(open_gateway, INIT, made_up()) for _ in range(6)]
    assert [r.status_code for r in opened] == [200] * 6, "the global cap (5) was never reached"
    sessions = [r.headers["mcp-session-id"] for r in opened]
    assert [post(open_gateway, PING, made_up(), session=s).status_code for s in sessions] == [404, 404, 404, 200, 200, 200]


def test_with_auth_off_a_forged_forwarded_address_is_no_new_caller(open_gateway: ServerThread) -> None:
    # R: F2 (uvicorn takes X-Forwarded-For from a loopback peer: any local client could name a new address)
    opened = [post(open_gateway, INIT, made_up(), forwarded=f"10.0.0.{i}") for i in range(6)]
    assert [r.status_code for r in opened] == [200] * 6
    sessions = [r.headers["mcp-session-id"] for r in opened]
    assert [post(open_gateway, PING, made_up(), session=s, forwarded="10.0.0.9").status_code for s in sessions] == [
        404, 404, 404, 200, 200, 200]


def test_with_auth_off_another_address_keeps_its_sessions_while_one_address_opens_many(open_gateway: ServerThread) -> None:
    # R: F2 (one address's sessions never evict another's)
    other = post(open_gateway, INIT, "any", source="127.0.0.2").headers["mcp-session-id"]
    for _ in range(4):
        assert post(open_gateway, INIT, made_up()).status_code == 200
    assert post(open_gateway, PING, "any", source="127.0.0.2", session=other).status_code == 200
    assert post(open_gateway, PING, "any", session=other).status_code == 404, "a session is its address's own"


def test_the_caller_key_with_auth_off_is_the_address_whatever_the_bearer_string() -> None:
    # R: F2, F15 (sessions per caller and outbound slots per caller both count by caller_key)
    one, two = Identity(credential_fp="a" * 64, client_address="127.0.0.1"), Identity(client_address="127.0.0.1")
    assert caller_key(one) == caller_key(two) != caller_key(Identity(credential_fp="a" * 64, client_address="127.0.0.2"))
    assert caller_key(Identity(credential_fp="a" * 64)) != caller_key(Identity(credential_fp="b" * 64)), "with auth on: as before"
