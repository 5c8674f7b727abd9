"""Federation of everything a connection offers (F13): resources, templates, prompts, completions,
named per connection like tools, against the TypeScript server-everything and the Python SDK
test server; and capabilities announced exactly as the caller's connections have them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import PromptReference

from gateway.bridge.config import BridgeConfig
from gateway.bridge.offerings import template_pattern
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.node_servers import EverythingServer

DOC = "demo://resource/static/document/architecture.md"


@pytest.fixture
def everything() -> Iterator[EverythingServer]:
    server = EverythingServer().start()
    try:
        yield server
    finally:
        server.stop()


def client(url: str, key: str = "alice-key", mode: str = "auto") -> Client:
    return Client(streamable_http_client(url, http_client=mcp_http(key)), mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_resources_templates_prompts_and_completions_of_a_typescript_server_pass_through(
    everything: EverythingServer, tmp_path: Path, mode: str
) -> None:
    # R: F13
    config = BridgeConfig.model_validate(
        {"database": "o.db", "connections": [{"id": "every", "owner": "alice", "endpoint": everything.url}]}
    )
    with serve(bridge_app(config, tmp_path).app) as bridge:
        async with client(f"{bridge.url}/mcp", mode=mode) as alice:
            caps = alice.server_capabilities
            resources = (await alice.list_resources()).resources
            templates = (await alice.list_resource_templates()).resource_templates
            doc = await alice.read_resource(DOC)
            dynamic = await alice.read_resource("demo://resource/dynamic/text/7")
            prompts = {p.name for p in (await alice.list_prompts()).prompts}
            prompt = await alice.get_prompt("every__args-prompt", {"city": "Oslo"})
            completed = await alice.complete(PromptReference(type="ref/prompt", name="every__completable-prompt"),
                                             {"name": "department", "value": "Eng"})
            with pytest.raises(MCPError) as unknown:
                await alice.read_resource("elsewhere://nothing")
    assert caps is not None and caps.resources is not None and caps.prompts is not None and caps.completions is not None
    assert DOC in {str(r.uri) for r in resources}, "URIs pass unchanged"
    assert all(r.name.startswith("every__") for r in resources), "names are per connection like tools"
    assert "every__architecture.md" in {r.name for r in resources}, "a resource name is shown, not mapped"
    assert {t.uri_template for t in templates} >= {"demo://resource/dynamic/text/{resourceId}"}
    assert "Everything Server – Architecture" in doc.contents[0].text  # type: ignore[union-attr]
    assert "7" in str(dynamic.contents[0])
    assert {"every__simple-prompt", "every__args-prompt", "every__completable-prompt"} <= prompts
    assert "Oslo" in str(prompt.messages[0].content)
    assert completed.completion.values == ["Engineering"]
    # The only connection offering resources gets the read; its own error comes back as it is.
    assert (unknown.value.code, unknown.value.message) == (-32602, "MCP error -32602: Resource elsewhere://nothing not found")


async def test_only_the_capabilities_the_callers_connections_have_are_announced(tmp_path: Path) -> None:
    # R: F13
    with_resources, tools_only = McpServerState(), McpServerState()
    with serve(http_app(with_resources)) as docs, serve(http_app(tools_only, resources=False)) as bare:
        config = BridgeConfig.model_validate(
            {
                "database": "c.db",
                "connections": [
                    {"id": "docs", "owner": "alice", "endpoint": f"{docs.url}/mcp"},
                    {"id": "bare", "owner": "bob", "endpoint": f"{bare.url}/mcp"},
                ],
            }
        )
        with serve(bridge_app(config, tmp_path).app) as bridge:
            seen: dict[str, Any] = {}
            for key in ("alice-key", "bob-key"):
                for mode in ("legacy", "auto"):
                    async with client(f"{bridge.url}/mcp", key, mode) as caller:
                        seen[f"{key}/{mode}"] = caller.server_capabilities
            async with client(f"{bridge.url}/mcp", "alice-key", "legacy") as alice:
                listed = {str(r.uri): r.name for r in (await alice.list_resources()).resources}
                read = await alice.read_resource("docs://guide")
            async with client(f"{bridge.url}/mcp", "bob-key", "legacy") as bob:
                with pytest.raises(MCPError) as foreign:
                    await bob.read_resource("docs://guide")
    for mode in ("legacy", "auto"):
        alice, bob = seen[f"alice-key/{mode}"], seen[f"bob-key/{mode}"]
        assert alice.tools is not None and alice.resources is not None, mode
        assert alice.prompts is None and alice.completions is None, f"{mode}: no connection of alice's has them"
        assert bob.tools is not None and bob.resources is None and bob.prompts is None, mode
    assert listed["docs://guide"] == "docs__guide"
    assert read.contents[0].text == "contents of docs://guide"  # type: ignore[union-attr]
    assert foreign.value.code == -32002, "another caller's resource is not found"
    assert with_resources.methods["resources/read"] == 1, "bob's read never reached alice's connection"


def test_a_uri_template_matches_the_uris_it_expands_to() -> None:
    # R: F13
    assert template_pattern("demo://resource/dynamic/text/{id}").fullmatch("demo://resource/dynamic/text/7")
    assert not template_pattern("demo://resource/dynamic/text/{id}").fullmatch("demo://resource/dynamic/text/7/x")
    assert template_pattern("file://{+path}").fullmatch("file://a/b/c.txt")
    assert template_pattern("search://q{?term,limit}").fullmatch("search://q?term=x&limit=2")
    assert not template_pattern("a://x.{id}").fullmatch("a://xy7"), "literal parts are literal"
