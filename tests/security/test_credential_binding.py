"""A connection's credential is bound to its endpoint (issue 32, N1).

alice made an org connection with her credential; carol, a member of the same org, changed only
its `endpoint` (PATCH 200, credential kept) and the gateway then sent alice's credential, and every
member's call arguments, to carol's server; alice's audit showed nothing. Now a change of endpoint
that does not write a credential in the same request drops the stored one, the answer and the audit
record say so, and every member of the owner (alice too) sees the change in their own audit listing.

A real gateway with API keys (alice and carol in org acme, bob in globex), two loopback MCP servers
(alice's, which refuses any call without her credential, and carol's), the REST API as members use it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support import canary
from tests.support.bridge_servers import CallLog, edge, graph, node, pipeline, tool_node, tool_server
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.upstream import ScriptedUpstream
from tests.support.waiting import wait_until

ALICES_CREDENTIAL = (canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN)
"""What alice writes as the org connection's credential; her server refuses calls without it."""

CAROL_KEY = canary.BOB_KEY
"""carol presents the suite's second canary key (configured as carol here; bob gets a key of his own)."""


@dataclass
class World:
    url: str
    alices_server: str
    carols_server: str
    alices_log: CallLog
    carols_log: CallLog
    bob_key: str


@pytest.fixture
def world(upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    (tmp_path / "seal.key").write_text(secrets.token_urlsafe(32))
    bob_key = "bob-" + secrets.token_hex(16)
    monkeypatch.setenv("TOOLGATE_TEST_N1_BOB_KEY", bob_key)
    auth = {"mode": "api_keys", "api_keys": [
        {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme", "email": "alice@acme.test"},
        {"key": canary.BOB_KEY_REF, "user_id": "carol", "org_id": "acme", "email": "carol@acme.test"},
        {"key": "env:TOOLGATE_TEST_N1_BOB_KEY", "user_id": "bob", "org_id": "globex", "email": "bob@globex.test"},
    ]}
    bridge = {"enabled": True, "database": str(tmp_path / "bridge.db"), "secretKey": "file:seal.key",
              "apiEndpointAllowPrivate": ["127.0.0.0/8"]}
    alices_log, carols_log = CallLog(), CallLog()
    with serve(tool_server(alices_log, delay=0, required_header=ALICES_CREDENTIAL)) as alices, \
            serve(tool_server(carols_log, delay=0)) as carols, \
            running_gateway(simple_config(upstream.url, auth=auth, bridge=bridge), tmp_path) as gw:
        yield World(gw.url, f"{alices.url}/mcp", f"{carols.url}/mcp", alices_log, carols_log, bob_key)


def call(world: World, key: str, method: str, path: str, body: Any = None, **params: str) -> httpx2.Response:
    return httpx2.request(method, f"{world.url}{path}", json=body, params=params or None,
                          headers={"Authorization": f"Bearer {key}"}, timeout=30)


def say(world: World, key: str, text: str) -> dict[str, Any]:
    """Run the org bridge's pipeline `say` (echo through the org connection) as `key`'s caller."""
    return call(world, key, "POST", "/bridges/acme-tools/run", {"name": "say", "arguments": {"text": text}}).json()


def alices_org_connection(world: World) -> None:
    """alice makes the org connection with her credential, an org bridge over it, and a pipeline."""
    made = call(world, canary.ALICE_KEY, "POST", "/connections", {
        "id": "shared", "owner": "org:acme", "endpoint": world.alices_server,
        "authHeaderName": ALICES_CREDENTIAL[0], "authSecret": ALICES_CREDENTIAL[1],
    })
    assert made.status_code == 201, made.text
    bridge = call(world, canary.ALICE_KEY, "POST", "/bridges", {"id": "acme-tools", "owner": "org:acme", "connections": ["shared"]})
    assert bridge.status_code == 201, bridge.text
    echo = graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", "shared", inputs=["text"], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.said")],
        [pipeline("say")],
    )
    assert call(world, canary.ALICE_KEY, "PUT", "/bridges/acme-tools/graph", echo).status_code == 200


def credential_values(log: CallLog) -> list[str]:
    """Every header value a server received that carries alice's credential."""
    return [value for c in log.calls for value in c.headers.values() if ALICES_CREDENTIAL[1] in value]


def audit(world: World, key: str, **params: str) -> list[dict[str, Any]]:
    return call(world, key, "GET", "/audit", **params).json()["data"]


def test_a_member_who_repoints_an_org_connection_never_receives_the_credential_another_member_wrote(world: World) -> None:
    # R: F3, F2, C2 (issue 32, N1: carol's PATCH of the endpoint alone sent alice's credential to carol's server)
    alices_org_connection(world)
    assert say(world, CAROL_KEY, "before")["isError"] is False  # alice's server got her credential
    patched = call(world, CAROL_KEY, "PATCH", "/connections/shared", {"endpoint": world.carols_server})
    assert patched.status_code == 200
    ran = [say(world, who, f"after {i}") for i, who in enumerate((CAROL_KEY, canary.ALICE_KEY))]
    assert [r["isError"] for r in ran] == [False, False]  # the calls now reach carol's server...
    assert [c.arguments["text"] for c in world.carols_log.of("echo")] == ["after 0", "after 1"]
    assert credential_values(world.carols_log) == [], "alice's credential reached carol's server"  # ...without it
    assert patched.json() == {"id": "shared", "owner": "org:acme", "endpoint": world.carols_server, "authHeaderName": None,
                              "prefix": "shared", "source": "api", "credential": "dropped"}
    listed = call(world, CAROL_KEY, "GET", "/connections").json()["data"]
    assert [(c["id"], c["authHeaderName"]) for c in listed] == [("shared", None)]


def test_the_owner_sees_another_members_change_and_the_dropped_credential_in_their_own_audit(world: World) -> None:
    # R: F4, F5 (issue 32, N1: alice's audit showed nothing of carol's change)
    alices_org_connection(world)
    assert call(world, CAROL_KEY, "PATCH", "/connections/shared", {"endpoint": world.carols_server}).status_code == 200
    assert wait_until(lambda: audit(world, canary.ALICE_KEY, action="connection.update") != [])
    (record,) = audit(world, canary.ALICE_KEY, action="connection.update")
    assert (record["actor"], record["resource"], record["scope"], record["mutating"]) == (
        {"id": "carol", "email": "carol@acme.test"}, "shared", "connection:shared", True)
    assert record["args"] == {"owner": "org:acme", "fields": ["authHeaderName", "authSecret", "endpoint"],
                              "credential": "dropped"}
    assert [r["action"] for r in audit(world, CAROL_KEY, resource="shared")] == ["connection.update", "connection.create"]
    assert audit(world, world.bob_key) == [], "another org sees none of it"


def test_a_new_endpoint_with_a_credential_written_in_the_same_request_carries_that_credential(world: World) -> None:
    # R: F3, C2
    alices_org_connection(world)
    carols_own = f"carol-{secrets.token_hex(8)}"
    patched = call(world, CAROL_KEY, "PATCH", "/connections/shared", {
        "endpoint": world.carols_server, "authHeaderName": ALICES_CREDENTIAL[0], "authSecret": carols_own,
    })
    assert (patched.status_code, patched.json()["credential"], patched.json()["authHeaderName"]) == (
        200, "written", ALICES_CREDENTIAL[0])
    assert carols_own not in patched.text
    assert say(world, CAROL_KEY, "hi")["isError"] is False
    assert [c.headers[ALICES_CREDENTIAL[0].lower()] for c in world.carols_log.of("echo")] == [carols_own]
    assert credential_values(world.carols_log) == []


def test_a_change_that_keeps_the_endpoint_keeps_the_credential_and_a_new_header_needs_a_new_credential(world: World) -> None:
    # R: F3, C2 (the credential is bound to its endpoint and header, and to nothing else)
    alices_org_connection(world)
    renamed = call(world, CAROL_KEY, "PATCH", "/connections/shared", {"prefix": "acme", "endpoint": world.alices_server})
    assert (renamed.status_code, renamed.json()["authHeaderName"], "credential" in renamed.json()) == (
        200, ALICES_CREDENTIAL[0], False)
    header_only = call(world, CAROL_KEY, "PATCH", "/connections/shared", {"authHeaderName": "X-Other"})
    assert header_only.status_code == 400
    assert say(world, CAROL_KEY, "still")["isError"] is False
    assert [c.arguments["text"] for c in world.alices_log.of("echo")] == ["still"]
