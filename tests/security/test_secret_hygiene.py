"""Secrets never leave through the Bridge or the logs (issue 15, findings 2 and 7; B4, G6).

A connection whose server echoes the request headers used to hand its `authSecret` to every caller
who may use it: results were not scrubbed (only errors were), and scrubbing matched the exact value
only. The MCP SDK's own loggers printed tracebacks to stderr outside our scrubbed JSON lines.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import Completion

from gateway.logs import configure_logging
from gateway.secrets import SecretSet, secret_forms
from tests.support import canary
from tests.support.bridge_servers import bridge_over, mcp_http
from tests.support.http_server import ServerThread

ENCODINGS = {
    "plain": lambda text: text,
    "base64": lambda text: base64.b64encode(text.encode()).decode(),
    "base64url": lambda text: base64.urlsafe_b64encode(text.encode()).decode(),
    "hex": lambda text: text.encode().hex(),
    "url": lambda text: quote(text, safe=""),
    "reversed": lambda text: text[::-1],
}


def headers_server() -> Any:
    """An MCP server whose tools send back the request headers they received, in some encoding."""
    server = MCPServer("header-echo")

    def received(ctx: Context) -> dict[str, str]:
        request = ctx.request_context.request
        return dict(request.headers) if request is not None else {}

    @server.tool()
    async def headers(encoding: str, prefix: str, ctx: Context) -> str:
        return ENCODINGS[encoding](prefix + json.dumps(received(ctx)))

    @server.tool()
    async def headers_structured(ctx: Context) -> dict[str, Any]:
        return {"received": received(ctx), "nested": [{"again": received(ctx)}]}

    @server.tool()
    async def headers_error(ctx: Context) -> str:
        raise ToolError(f"refused; you sent {json.dumps(received(ctx))}")

    # the offerings the Bridge federates too (F13): a listing naming the secret, and answers echoing it
    @server.resource("headers://{encoding}", description=f"made with {ENCODINGS['base64'](canary.CONNECTION_TOKEN)}")
    async def headers_resource(encoding: str, ctx: Context) -> str:
        return ENCODINGS[encoding](json.dumps(received(ctx)))

    @server.prompt(description=f"made with {ENCODINGS['hex'](canary.CONNECTION_TOKEN)}")
    async def headers_prompt(encoding: str, ctx: Context) -> str:
        return ENCODINGS[encoding](json.dumps(received(ctx)))

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion:
        return Completion(values=[canary.CONNECTION_TOKEN, ENCODINGS["url"](canary.CONNECTION_TOKEN)])

    return server.streamable_http_app()


def leaked_forms(text: str) -> list[str]:
    return sorted(form for form in secret_forms(canary.CONNECTION_TOKEN) if form in text)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("prefix", ["", "a", "ab"])  # every base64 alignment of the secret
def test_the_scrubber_finds_a_secret_in_its_encoded_forms(encoding: str, prefix: str) -> None:
    # R: B4, G6
    secrets = SecretSet()
    secrets.add(canary.CONNECTION_TOKEN)
    text = ENCODINGS[encoding](prefix + json.dumps({"x-api-token": canary.CONNECTION_TOKEN, "host": "h"}))
    scrubbed = secrets.scrub(text)
    assert "[redacted]" in scrubbed
    assert leaked_forms(scrubbed) == []


def test_the_scrubber_walks_json_values_keys_included_and_leaves_other_values_alone() -> None:
    # R: B4
    secrets = SecretSet()
    secrets.add(canary.CONNECTION_TOKEN)
    value = {"a": [canary.CONNECTION_TOKEN, {canary.CONNECTION_TOKEN: 1}], "n": 2, "t": None}
    assert secrets.scrub_json(value) == {"a": ["[redacted]", {"[redacted]": 1}], "n": 2, "t": None}
    assert value["a"][0] == canary.CONNECTION_TOKEN, "the original is not changed"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base_dir = tmp_path_factory.mktemp("secrets")
    with bridge_over(headers_server(), base_dir, connection="echo", owner="org:acme", bridge="acme-tools") as server:
        yield server


async def call(bridge: ServerThread, path: str, name: str, arguments: dict[str, Any]) -> str:
    async with Client(streamable_http_client(f"{bridge.url}{path}", http_client=mcp_http("alice-key"))) as client:
        result = await client.call_tool(name, arguments)
    return result.model_dump_json()


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("prefix", ["", "a", "ab"])
async def test_a_server_echoing_its_credential_in_a_result_never_shows_it_to_the_caller(
    bridge: ServerThread, encoding: str, prefix: str
) -> None:
    # R: B4, F1 (issue 15: an org connection showed its authSecret to every member)
    text = await call(bridge, "/mcp", "echo__headers", {"encoding": encoding, "prefix": prefix})
    assert leaked_forms(text) == []
    assert "[redacted]" in text


async def test_structured_content_and_error_results_are_scrubbed_too(bridge: ServerThread) -> None:
    # R: B4
    structured = await call(bridge, "/mcp/acme-tools", "echo__headers_structured", {})
    failed = await call(bridge, "/mcp", "echo__headers_error", {})
    assert leaked_forms(structured) == [] and leaked_forms(failed) == []
    assert json.loads(structured)["structured_content"]["received"]["x-api-token"] == "[redacted]"
    assert "[redacted]" in failed


@pytest.mark.parametrize("encoding", ["plain", "base64", "hex"])
async def test_resources_prompts_and_completions_of_a_connection_are_scrubbed_like_tool_results(
    bridge: ServerThread, encoding: str
) -> None:
    # R: B4, F13 (issue 15 x issue 11: every text that leaves the gateway from a connection)
    async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as client:
        templates = (await client.list_resource_templates()).model_dump_json()
        prompts = (await client.list_prompts()).model_dump_json()
        read = (await client.read_resource(f"headers://{encoding}")).model_dump_json()
        prompt = (await client.get_prompt("echo__headers_prompt", {"encoding": encoding})).model_dump_json()
        completed = (await client.complete(
            types.PromptReference(type="ref/prompt", name="echo__headers_prompt"), {"name": "encoding", "value": ""}
        )).model_dump_json()
    for text in (templates, prompts, read, prompt, completed):
        assert leaked_forms(text) == [] and "[redacted]" in text, text[:200]
    assert "echo__headers_prompt" in prompts and "headers://{encoding}" in templates


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """configure_logging changes process-wide loggers: put them back after the test."""
    names = ["", "toolgate", "uvicorn", "uvicorn.error", "uvicorn.access"]
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate,
                 logging.getLogger(n).disabled) for n in names}
    yield
    for name, (handlers, level, propagate, disabled) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.level, logger.propagate, logger.disabled = handlers, level, propagate, disabled


def test_the_mcp_sdks_own_tracebacks_reach_stderr_as_scrubbed_json(
    restored_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R: B4, G9 (issue 15: the SDK's logger printed tracebacks with secret values to stderr)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    secrets = SecretSet()
    secrets.add(canary.CONNECTION_TOKEN)
    configure_logging("info", secrets)
    # only the product's handler may see this record: the suite's own log scanner (unscrubbed) is lifted off
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if type(h).__module__ != "tests.support.canary"]
    try:
        raise RuntimeError(f"server said: {base64.b64encode(canary.CONNECTION_TOKEN.encode()).decode()}")
    except RuntimeError:
        logging.getLogger("mcp.client.streamable_http").exception("Error in post_writer with %s", canary.CONNECTION_TOKEN)
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["logger"] == "mcp.client.streamable_http" and entry["level"] == "error"
    assert "Traceback" in entry["exception"] and "[redacted]" in entry["exception"]
    assert leaked_forms(lines[0]) == []


def test_a_header_value_with_a_scheme_is_scrubbed_with_its_credential_alone_too() -> None:
    # R: B4 (a server may echo the token without its `Bearer ` scheme)
    secrets = SecretSet()
    secrets.add(canary.MCP_CREDENTIAL)
    token = canary.MCP_CREDENTIAL.removeprefix("Bearer ")
    echoed = base64.b64encode(f"token={token}".encode()).decode()
    assert secrets.scrub(f"you sent {token}") == "you sent [redacted]"
    assert "[redacted]" in secrets.scrub(echoed)
