"""Prefetch and resources against real MCP servers (B5–B13, B18)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.errors import GuardBlocked
from tests.support import canary
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_bridge import Inspections, context, metric, running_bridge
from tests.support.mcp_servers import McpServerState, http_app

HOSTILE = 'x"}, "evil": {{user_id}} {{org_id}} {% raw %}{{7*7}}'


@pytest.fixture
def state() -> McpServerState:
    return McpServerState(require_credential=True)  # running_bridge sends the canary credential


@pytest.fixture
def server(state: McpServerState) -> Iterator[ServerThread]:
    with serve(http_app(state, legacy_only=True)) as running:
        yield running


def ask(text: object) -> dict[str, object]:
    return {"model": "assistant", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]}


# R: B5, B6, B8, B11
async def test_the_prefetch_tool_is_called_with_tokens_substituted_and_its_result_is_injected(
    state: McpServerState, server: ServerThread
) -> None:
    inspections = Inspections()
    arguments = {"query": "{{last_user_message}}", "who": "{{user_id}}/{{org_id}}/{{display_name}}", "conv": "{{session_id}}", "n": 3}
    async with running_bridge(
        endpoint=server.url + "/mcp",
        prefetchTool="echo",
        prefetchArguments=json.dumps(arguments),
        prefetchLabel="Relevant documentation",
        prefetchResultTemplate="<docs>{{result}}</docs>",
    ) as (bridge, registry):
        out = await bridge.before_model(context("conv-7", inspect=inspections), ask(HOSTILE))
        assert metric(registry, "toolgate_mcp_tool_calls_total", server="docs", status="ok") == 1
    sent = {"conv": "conv-7", "n": 3, "query": HOSTILE, "who": "alice/acme/Alice"}
    assert state.arguments == [sent]
    echoed = json.dumps(sent, ensure_ascii=False, sort_keys=True)
    assert out["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": f"{HOSTILE}\n\n## Relevant documentation\n<docs>{echoed}</docs>"},
    ]
    assert [(i.kind, i.server, i.source, i.text) for i in inspections.items] == [("prefetch", "docs", "echo", echoed)]


# R: B7
@pytest.mark.parametrize("content", ["", "   \n", [{"type": "text", "text": ""}], None])
async def test_an_empty_last_user_message_does_not_trigger_the_prefetch(
    state: McpServerState, server: ServerThread, content: object
) -> None:
    request = ask(content)
    async with running_bridge(endpoint=server.url + "/mcp", prefetchTool="echo") as (bridge, _):
        out = await bridge.before_model(context(), request)
    assert state.calls["echo"] == 0
    assert out == request


# R: B7
async def test_a_request_without_any_user_message_does_not_trigger_the_prefetch(
    state: McpServerState, server: ServerThread
) -> None:
    request = {"messages": [{"role": "system", "content": "s"}]}
    async with running_bridge(endpoint=server.url + "/mcp", prefetchTool="echo") as (bridge, _):
        assert await bridge.before_model(context(), request) == request
    assert state.calls["echo"] == 0


# R: B10, B12
async def test_resources_by_uri_and_by_name_are_injected_with_missing_and_binary_ones_reported(
    state: McpServerState, server: ServerThread
) -> None:
    inspections = Inspections()
    resources = "docs://index\nguide\n\nno-such-thing\ndocs://gone\nlogo\n"
    async with running_bridge(endpoint=server.url + "/mcp", resources=resources) as (bridge, _):
        out = await bridge.before_model(context(inspect=inspections), ask([{"type": "text", "text": "q"}]))
    parts = out["messages"][1]["content"]
    assert parts[0] == {"type": "text", "text": "q"}
    assert parts[1] == {
        "type": "text",
        "text": "## Resource docs://index\ncontents of docs://index\n\n"
        "## Resource guide\ncontents of docs://guide\n\n"
        "## Resource no-such-thing\nthe resource could not be read: the MCP server lists no resource with that name or URI\n\n"
        "## Resource docs://gone\nthe resource could not be read: the MCP server answered with error -32002\n\n"
        "## Resource logo\n[binary content: image/png, 64 bytes]",
    }
    assert len(parts) == 2
    assert sorted((i.kind, i.source) for i in inspections.items) == [("resource", "docs://index"), ("resource", "guide"), ("resource", "logo")]
    assert state.methods["resources/list"] == 1


# R: B10
async def test_a_server_without_the_resources_capability_is_not_queried_for_them(state: McpServerState) -> None:
    with serve(http_app(state, legacy_only=True, resources=False)) as server:
        async with running_bridge(endpoint=server.url + "/mcp", resources="docs://index") as (bridge, _):
            out = await bridge.before_model(context(), ask("q"))
    assert out["messages"][1]["content"] == "q\n\n## Resource docs://index\nthe resource could not be read: the MCP server does not offer resources"
    assert state.methods["resources/list"] == 0
    assert state.methods["resources/read"] == 0


# R: B13
async def test_a_failing_prefetch_tool_injects_the_tool_failed_and_does_not_fail_the_request(
    state: McpServerState, server: ServerThread
) -> None:
    async with running_bridge(endpoint=server.url + "/mcp", prefetchTool="fail", prefetchLabel="Docs") as (bridge, _):
        out = await bridge.before_model(context(), ask("q"))
    assert out["messages"][1]["content"] == "q\n\n## Docs\nthe tool failed: boom"


# R: B13
async def test_an_unreachable_server_injects_the_tool_failed_and_unreadable_resources() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with running_bridge(endpoint=f"http://127.0.0.1:{port}/mcp", prefetchTool="echo", resources="docs://index") as (bridge, _):
        out = await bridge.before_model(context(), ask("q"))
    assert out["messages"][1]["content"] == (
        "q\n\n## echo\nthe tool failed: the MCP server could not be reached\n\n"
        "## Resource docs://index\nthe resource could not be read: the MCP server could not be reached"
    )


# R: B11, B13
async def test_content_blocked_by_an_inspector_refuses_the_request_without_echoing_it(
    state: McpServerState, server: ServerThread
) -> None:
    async with running_bridge(endpoint=server.url + "/mcp", prefetchTool="echo", resources="docs://guide") as (bridge, _):
        with pytest.raises(GuardBlocked) as refused:
            await bridge.before_model(context(inspect=Inspections(block_word="docs://guide")), ask("q"))
    assert refused.value.message == "request refused by test: content from docs/docs://guide matched t.word (score 1.00)"


# R: B18
async def test_prefetch_and_resource_reads_run_concurrently(state: McpServerState, server: ServerThread) -> None:
    state.delay = 0.2
    async with running_bridge(endpoint=server.url + "/mcp", prefetchTool="echo", resources="docs://index\nguide\nnotes") as (bridge, _):
        await bridge.before_model(context(), ask("first turn"))  # a later turn: session and listings exist
        state.note(state.spans.clear)
        await bridge.before_model(context(), ask("q"))
    spans = [span for span in state.spans if span[0] in ("echo", "docs://index", "docs://guide", "docs://notes")]
    assert len(spans) == 4
    latest_start = max(start for _, start, _ in spans)
    earliest_end = min(end for _, _, end in spans)
    assert latest_start < earliest_end  # every call was in flight at once


# R: B12
async def test_two_bridges_inject_into_the_same_user_message_in_chain_order(state: McpServerState, server: ServerThread) -> None:
    async with running_bridge(endpoint=server.url + "/mcp", id="one", resources="docs://index") as (first, _):
        async with running_bridge(endpoint=server.url + "/mcp", id="two", resources="docs://guide") as (second, _):
            request = await first.before_model(context(), ask("q"))
            request = await second.before_model(context(), request)
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == (
        "q\n\n## Resource docs://index\ncontents of docs://index\n\n## Resource docs://guide\ncontents of docs://guide"
    )


# R: B4, G8
async def test_a_server_that_echoes_the_credential_never_gets_it_to_the_model(state: McpServerState, server: ServerThread) -> None:
    inspections = Inspections()
    fields = {**canary.mcp_auth(), "prefetchTool": "whoami", "prefetchLabel": "Who"}
    async with running_bridge(endpoint=server.url + "/mcp", **fields) as (bridge, _):
        direct = await bridge.call_tool(context(), "whoami", {})
        out = await bridge.before_model(context(inspect=inspections), ask("q"))
    assert set(state.auth_headers) == {canary.MCP_CREDENTIAL}
    assert direct.text == "the tool failed: bad credential [redacted]"
    assert out["messages"][1]["content"] == "q\n\n## Who\nthe tool failed: bad credential [redacted]"
    assert [i.text for i in inspections.items] == ["bad credential [redacted]"]


# R: B6, B7, B12
async def test_a_later_bridge_prefetches_with_the_clients_message_not_the_context_an_earlier_bridge_injected(
    state: McpServerState, server: ServerThread
) -> None:
    async with running_bridge(endpoint=server.url + "/mcp", id="one", resources="docs://index") as (first, _):
        async with running_bridge(
            endpoint=server.url + "/mcp", id="two", prefetchTool="echo", prefetchArguments={"q": "{{last_user_message}}"}
        ) as (second, _):
            ctx = context()
            request = await second.before_model(ctx, await first.before_model(ctx, ask("q")))
            alone = context(request_id="r2")
            lone = await second.before_model(alone, await first.before_model(alone, {"messages": [{"role": "system", "content": "s"}]}))
    assert state.arguments == [{"q": "q"}]
    assert request["messages"][1]["content"] == 'q\n\n## Resource docs://index\ncontents of docs://index\n\n## echo\n{"q": "q"}'
    assert lone["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "## Resource docs://index\ncontents of docs://index"}]
