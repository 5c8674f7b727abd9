"""Connections you can test (C8): `POST /connections/{id}/test` lists the tools now, `POST
/connections/{id}/call` calls one (scrubbed, bounded, audited), and `GET /connections` shows each
connection's last outcome — against the real Bridge over loopback with a real MCP tool server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.bridge.editor_api import CALL_CHARS
from gateway.egress import UNUSABLE
from tests.support import canary
from tests.support.bridge_servers import ServedBridge, rest, served_bridge


World = ServedBridge


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with served_bridge(tmp_path_factory.mktemp("health"), lambda tools: {
        "database": "health.db",
        "connections": [{"id": "declared", "owner": "alice", "endpoint": f"{tools}/mcp", **canary.connection_auth()}],
    }) as found:
        yield found


call = rest


async def health_of(world: World, connection: str) -> Any:
    listed = (await call(world, "GET", "/connections")).json()["data"]
    return next(c for c in listed if c["id"] == connection)["health"]


async def test_a_reachable_connection_tests_ok_with_its_tools(world: World) -> None:
    # R: C8
    answer = await call(world, "POST", "/connections/declared/test")
    assert answer.status_code == 200
    tested = answer.json()
    assert tested["ok"] is True and tested["error"] is None and tested["latencyMs"] >= 0
    echo = next(t for t in tested["tools"] if t["name"] == "echo")
    assert echo["inputSchema"]["required"] == ["text"]
    health = await health_of(world, "declared")
    assert health["ok"] is True and health["error"] is None and health["checkedAt"].endswith("Z")


async def test_an_unreachable_connection_tests_not_ok_and_its_health_says_why(world: World) -> None:
    # R: C8
    made = await call(world, "POST", "/connections", body={"id": "down", "endpoint": "http://127.0.0.1:9/mcp"})
    assert made.status_code == 201
    assert await health_of(world, "down") is None  # nothing tried yet
    answer = await call(world, "POST", "/connections/down/test")
    assert answer.status_code == 200
    assert {k: v for k, v in answer.json().items() if k != "latencyMs"} == {"ok": False, "tools": [], "error": UNUSABLE}
    health = await health_of(world, "down")
    assert (health["ok"], health["error"]) == (False, UNUSABLE) and health["checkedAt"].endswith("Z")
    tried = await call(world, "POST", "/connections/down/call", body={"name": "echo", "arguments": {"text": "x"}})
    assert tried.json() == {"isError": True, "text": f"tool echo failed: {UNUSABLE}", "structuredContent": None}


async def test_another_accounts_connection_is_not_found(world: World) -> None:
    # R: C8, F2
    assert (await call(world, "POST", "/connections/declared/test", key="bob-key")).status_code == 404
    call_it = await call(world, "POST", "/connections/declared/call", key="bob-key", body={"name": "echo", "arguments": {}})
    assert call_it.status_code == 404


async def test_a_tool_is_called_with_its_answer_scrubbed_bounded_and_audited(world: World) -> None:
    # R: C8, B4, F4
    said = await call(world, "POST", "/connections/declared/call", body={"name": "echo", "arguments": {"text": "hi"}})
    assert said.status_code == 200
    assert said.json() == {"isError": False, "text": "hi", "structuredContent": {"result": "hi"}}
    failed = (await call(world, "POST", "/connections/declared/call", body={"name": "boom"})).json()
    assert failed["isError"] is True and "kaboom" in failed["text"]
    secret = await call(world, "POST", "/connections/declared/call",
                        body={"name": "echo", "arguments": {"text": canary.CONNECTION_TOKEN}})
    assert canary.CONNECTION_TOKEN not in secret.text and secret.json()["text"] == "[redacted]"
    big = (await call(world, "POST", "/connections/declared/call",
                      body={"name": "echo", "arguments": {"text": "y" * (CALL_CHARS + 10)}})).json()
    assert big["text"].startswith("yyy") and big["text"].endswith(f"…[cut: {CALL_CHARS + 10} bytes in all]")
    assert isinstance(big["structuredContent"], str) and "…[cut: " in big["structuredContent"]

    await world.flushed()
    records = (await call(world, "GET", "/audit?action=connection.tool_call&scope=connection:declared")).json()["data"]
    assert [(r["resource"], r["status"]) for r in records[:4]] == [
        ("echo", "success"), ("echo", "success"), ("boom", "failure"), ("echo", "success")]
    assert records[-1]["args"] == {"text": {"type": "string", "length": 2}, "$connection": {"owner": "alice"}}
    assert (await health_of(world, "declared"))["ok"] is True


async def test_a_call_needs_a_tool_name_and_an_argument_object(world: World) -> None:
    # R: C8
    for body in ({}, {"name": ""}, {"name": "echo", "arguments": [1]}, {"name": "echo", "extra": 1}):
        answer = await call(world, "POST", "/connections/declared/call", body=body)
        assert answer.status_code == 400, body
