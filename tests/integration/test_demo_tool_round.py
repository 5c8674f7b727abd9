"""The demo config's `demo` model shows a tool round with no API key (D1): the real gateway on
config/demo.yaml's routes, the real demo MCP server over stdio, the official SDKs as clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from gateway.yaml_document import read_yaml
from tests.support.gateway import client, running_gateway
from tests.support.http_server import ServerThread

DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.yaml"
ASKED = "How does toolgate pool MCP sessions?"
FROM_THE_SERVER = "mcp_bridge keeps one MCP session per conversation in a pool"
"""Words of the demo server's `mcp-bridge` page: only a real `search_docs` call brings them."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A gateway serving config/demo.yaml's upstreams and routes (its Bridge left out: no database here)."""
    data: dict[str, Any] = read_yaml(DEMO).data
    config = {key: value for key, value in data.items() if key != "bridge"}
    with running_gateway(config, base_dir=tmp_path_factory.mktemp("demo")) as gw:
        yield gw


def _verdicts(gw: ServerThread) -> float:
    """toolgate_guard_verdicts_total for tool results, summed over verdicts."""
    total = 0.0
    for line in httpx2.get(gw.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("toolgate_guard_verdicts_total{") and 'kind="tool_result"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


# R: D1, B1, P1
def test_the_demo_model_calls_search_docs_through_mcp_bridge_and_answers_from_the_result(demo: ServerThread) -> None:
    before = _verdicts(demo)
    answer = client(demo, **{"X-Conversation-Id": "demo-round"}).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": ASKED}])
    text = answer.choices[0].message.content or ""
    assert text.startswith(f'I called `search_docs` with {{"query": "{ASKED}"}}; it returned:\n> ')
    assert FROM_THE_SERVER in text
    assert "Context the gateway added to your message: Relevant documentation; Resource docs://toolgate/overview" in text
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    assert (answer.model_extra or {})["toolgate"] == {"tool_calls": 1, "rounds": 2, "tool_cap_reached": False}
    assert _verdicts(demo) == before + 1  # prompt_guard (monitor) inspected the tool's result


# R: D1, B2
def test_three_questions_in_one_message_meet_the_demos_cap_of_two_calls(demo: ServerThread) -> None:
    asked = "Search the docs: how are sessions pooled? What does prompt_guard catch? How do I run the quickstart?"
    stream = client(demo, **{"X-Conversation-Id": "demo-cap"}).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": asked}], stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith('I called `search_docs` with {"query": "Search the docs: how are sessions pooled?"}')
    assert 'I called `get_page` with {"slug": "prompt-guard"}; it returned:\n> prompt_guard\n> prompt_guard scores tool results' in text
    assert "get_page` with {\"slug\": \"quickstart\"}" not in text
    assert "the gateway disabled tools (its tool-call cap was reached) before I could make 1 more call(s)" in text
    ending = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert ending[-1].choices[0].finish_reason == "stop"
    assert (ending[-1].model_extra or {})["toolgate"] == {"tool_calls": 2, "rounds": 3, "tool_cap_reached": True}


# R: D1, A1
def test_the_responses_api_gets_the_demos_tool_round_with_the_gateway_tools_hidden(demo: ServerThread) -> None:
    response = client(demo, **{"X-Conversation-Id": "demo-responses"}).responses.create(model="demo", input=ASKED)
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text.startswith("I called `search_docs`") and FROM_THE_SERVER in response.output_text


# R: D1, A2
def test_the_messages_api_streams_the_demos_tool_round(demo: ServerThread) -> None:
    claude = anthropic.Anthropic(base_url=demo.url, api_key="unused", max_retries=0, timeout=30,
                                 default_headers={"X-Conversation-Id": "demo-messages"})
    with claude.messages.stream(model="demo", max_tokens=512, messages=[{"role": "user", "content": ASKED}]) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn"
    assert [block.type for block in message.content] == ["text"]
    assert FROM_THE_SERVER in message.content[0].text  # type: ignore[union-attr]


# R: D1
def test_a_message_no_offered_tool_serves_gets_an_answer_naming_the_tools_and_no_call(demo: ServerThread) -> None:
    answer = client(demo, **{"X-Conversation-Id": "demo-hello"}).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hello"}])
    text = answer.choices[0].message.content or ""
    assert text.startswith("None of the tools offered (`search_docs`, `get_page`) shares a word with your message")
    assert "toolgate" not in (answer.model_extra or {})  # no tool ran: no loop summary
