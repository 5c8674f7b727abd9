"""Credentials written once through the REST API (C2): sealed in the store, used for the
connection's requests, never shown again; refused when the operator set no `bridge.secretKey`."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.bridge.config import BridgeConfig
from gateway.bridge.sealing import SealError, Sealer
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.bridge_servers import CallLog, bridge_app, edge, graph, mcp_http, node, pipeline, tool_node, tool_server
from tests.support.http_server import serve

LOCKED = (canary.CONNECTION_HEADER, canary.CONNECTION_TOKEN)
"""The tool server refuses every call without this header."""


@dataclass
class World:
    url: str
    tools_url: str
    database: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("sealed")
    (base / "seal.key").write_text(secrets.token_urlsafe(32))
    with serve(tool_server(CallLog(), delay=0.0, required_header=LOCKED)) as tools:
        config = BridgeConfig.model_validate({
            "database": "sealed.db", "secretKey": "file:seal.key", "apiEndpointAllowPrivate": ["127.0.0.0/8"],
        })
        with serve(bridge_app(config, base).app) as bridge:
            yield World(bridge.url, tools.url, base / "sealed.db")


async def call(world: World, method: str, path: str, body: Any = None, key: str = "alice-key") -> Any:
    async with mcp_http(key) as http:
        return await http.request(method, f"{world.url}{path}", json=body)


def echo_graph(connection: str) -> dict[str, Any]:
    return graph(
        [node("in1", "input", outputs=["text"]), tool_node("t1", "echo", connection, inputs=["text"], outputs=["result"]),
         node("out1", "output", inputs=["said"])],
        [edge("e1", "in1.text", "t1.text"), edge("e2", "t1.result", "out1.said")],
        [pipeline("say")],
    )


async def run_say(world: World, connection: str) -> dict[str, Any]:
    await call(world, "POST", "/bridges", {"id": f"b-{connection}", "connections": [connection]})
    assert (await call(world, "PUT", f"/bridges/b-{connection}/graph", echo_graph(connection))).status_code == 200
    answer = (await call(world, "POST", f"/bridges/b-{connection}/run", {"name": "say", "arguments": {"text": "hi"}})).json()
    answer.pop("nodes")  # what each node did (C5): test_bridge_runs.py
    return answer  # type: ignore[no-any-return]


async def test_a_written_credential_reaches_the_server_and_is_stored_sealed_and_never_shown(world: World) -> None:
    # R: C2
    made = await call(world, "POST", "/connections", {
        "id": "locked", "endpoint": f"{world.tools_url}/mcp",
        "authHeaderName": canary.CONNECTION_HEADER, "authSecret": canary.CONNECTION_TOKEN,
    })
    assert made.status_code == 201
    assert made.json()["authHeaderName"] == canary.CONNECTION_HEADER
    listed = (await call(world, "GET", "/connections")).text
    assert canary.CONNECTION_TOKEN not in made.text + listed
    assert await run_say(world, "locked") == {"isError": False, "text": '{"said": "hi"}', "structuredContent": {"said": "hi"}}
    with sqlite3.connect(world.database) as db:
        (stored,) = db.execute("SELECT auth_secret FROM connections WHERE id = 'locked'").fetchone()
    assert stored.startswith("sealed:") and canary.CONNECTION_TOKEN not in stored


async def test_a_credential_is_replaced_or_removed_but_never_read_back(world: World) -> None:
    # R: C2
    await call(world, "POST", "/connections", {"id": "swap", "endpoint": f"{world.tools_url}/mcp"})
    assert (await run_say(world, "swap"))["isError"]  # the server wants its header
    replaced = await call(world, "PATCH", "/connections/swap", {
        "authHeaderName": canary.CONNECTION_HEADER, "authSecret": canary.CONNECTION_TOKEN,
    })
    assert replaced.status_code == 200 and canary.CONNECTION_TOKEN not in replaced.text
    ran = await call(world, "POST", "/bridges/b-swap/run", {"name": "say", "arguments": {"text": "hi"}})
    assert ran.json()["isError"] is False
    removed = await call(world, "PATCH", "/connections/swap", {"authHeaderName": None})
    assert removed.status_code == 200 and removed.json()["authHeaderName"] is None
    ran = await call(world, "POST", "/bridges/b-swap/run", {"name": "say", "arguments": {"text": "hi"}})
    assert ran.json()["isError"] is True


async def test_a_written_value_that_looks_like_a_reference_is_sent_as_it_is_never_resolved(world: World) -> None:
    # R: C2, F3
    made = await call(world, "POST", "/connections", {
        "id": "refish", "endpoint": f"{world.tools_url}/mcp",
        "authHeaderName": canary.CONNECTION_HEADER, "authSecret": "env:TOOLGATE_TEST_CONNECTION_TOKEN",
    })
    assert made.status_code == 201
    assert (await run_say(world, "refish"))["isError"]  # the server got the text, not the operator's token


@pytest.mark.parametrize("credential", [
    {"authHeaderName": "Host", "authSecret": "s3cret-value-1"},
    {"authHeaderName": "X-Token\r\nEvil: 1", "authSecret": "s3cret-value-2"},
    {"authHeaderName": "X-Token", "authSecret": "s3cret\r\nvalue-3"},
    {"authHeaderName": "X-Token"},
    {"authSecret": "s3cret-value-5"},
])
async def test_a_malformed_credential_is_refused_without_echoing_it(world: World, credential: dict[str, str]) -> None:
    # R: C2
    answer = await call(world, "POST", "/connections", {"id": "bad", "endpoint": f"{world.tools_url}/mcp", **credential})
    assert answer.status_code == 400
    assert "s3cret" not in answer.text


async def test_without_a_secret_key_the_api_takes_no_credential(tmp_path: Path) -> None:
    # R: C2
    config = BridgeConfig.model_validate({"database": "plain.db", "apiEndpointAllowPrivate": ["127.0.0.0/8"]})
    with serve(bridge_app(config, tmp_path).app) as bridge:
        async with mcp_http("alice-key") as http:
            answer = await http.post(f"{bridge.url}/connections", json={
                "id": "c", "endpoint": "http://127.0.0.1:9/mcp", "authHeaderName": "X-Token", "authSecret": "s3cret-value",
            })
    assert answer.status_code == 400 and "bridge.secretKey" in answer.json()["error"]["message"]
    assert "s3cret" not in answer.text


def test_a_sealed_value_opens_only_with_its_key_and_is_scrubbed() -> None:
    # R: C2
    scrub = SecretSet()
    sealed = Sealer("k" * 32, scrub).seal("the-credential")
    assert "the-credential" not in sealed and scrub.scrub("x the-credential y") == "x [redacted] y"
    assert Sealer("k" * 32, SecretSet()).open(sealed) == "the-credential"
    with pytest.raises(SealError):
        Sealer("j" * 32, SecretSet()).open(sealed)
    with pytest.raises(ValueError):
        Sealer("short", SecretSet())
