"""Several mcp_bridge nodes in one chain through the real gateway (B18, B19)."""

from __future__ import annotations

from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.http_server import serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import ScriptedUpstream


def test_two_bridges_gather_their_context_at_the_same_time(upstream: ScriptedUpstream) -> None:
    # R: B18, B19
    one, two = McpServerState(require_credential=True), McpServerState(require_credential=True)
    with serve(http_app(one)) as first, serve(http_app(two)) as second:
        plugins = [
            {"type": "mcp_bridge", "id": "one", "endpoint": first.url + "/mcp", **canary.mcp_auth(), "prefetchTool": "echo",
             "prefetchArguments": {"text": "{{last_user_message}}"}, "prefetchLabel": "One"},
            {"type": "mcp_bridge", "id": "two", "endpoint": second.url + "/mcp", **canary.mcp_auth(), "prefetchTool": "echo",
             "prefetchArguments": {"text": "{{last_user_message}}"}, "prefetchLabel": "Two"},
        ]
        with running_gateway(simple_config(upstream.url, plugins)) as gw:
            sdk = client(gw, **{"X-Conversation-Id": "c1"})
            sdk.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "warm up"}])
            for state in (one, two):
                state.note(state.spans.clear)
                state.delay = 0.3
            sdk.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "question"}])
    spans = [span for state in (one, two) for span in state.spans if span[0] == "echo"]
    assert len(spans) == 2
    assert max(start for _, start, _ in spans) < min(end for _, _, end in spans)  # both in flight at once
    sent = upstream.requests[-1]["messages"][-1]["content"]
    assert sent.startswith("question\n\n## One\n") and "\n\n## Two\n" in sent
    assert sent.index("## One") < sent.index("## Two")  # injected in chain order
    echoed = [args for state in (one, two) for args in state.arguments if args.get("text")]
    assert all(args["text"] in ("warm up", "question") for args in echoed)  # never the other bridge's block
    offered = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
    assert "one__echo" in offered and "two__echo" in offered  # colliding names made distinct
