"""Clients of every API are told when the gateway's tool-call cap ended the loop (B2, A1, A2):
the official SDKs against the real gateway, the scripted `demo` model and the real demo MCP server.

The demo model calls `search_docs` once per question; with `maxConsecutiveToolCalls: 2`, three
questions meet the cap and one does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from tests.support.gateway import client, running_gateway
from tests.support.http_server import ServerThread

AT_CAP = ("Search the docs: how are sessions pooled? Search the docs: what does prompt_guard score? "
          "Search the docs: how is the quickstart run?")
BELOW = "Search the docs: how are sessions pooled?"
REACHED = {"tool_calls": 2, "rounds": 3, "tool_cap_reached": True}
NOT_REACHED = {"tool_calls": 1, "rounds": 2, "tool_cap_reached": False}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    docs = {"type": "mcp_bridge", "id": "docs", "command": ["python", "-m", "plugins.mcp_bridge.demo_server"],
            "toolFilter": ["search_docs"], "maxConsecutiveToolCalls": 2, "timeoutSeconds": 20}
    config = {"upstreams": [{"name": "demo", "kind": "demo"}], "routes": [{"model": "demo", "upstream": "demo", "plugins": [docs]}]}
    with running_gateway(config, base_dir=tmp_path_factory.mktemp("cap")) as server:
        yield server


def claude(gw: ServerThread, conversation: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=30,
                               default_headers={"X-Conversation-Id": conversation})


# R: A1, B2
def test_a_response_at_the_cap_is_completed_and_says_so_in_metadata_the_summary_and_a_header(gw: ServerThread) -> None:
    raw = client(gw, **{"X-Conversation-Id": "cap-r1"}).responses.with_raw_response.create(
        model="demo", input=AT_CAP, metadata={"app": "docs"})
    response = raw.parse()
    assert raw.headers.get("x-toolgate-tool-cap") == "reached"
    assert response.status == "completed" and response.incomplete_details is None
    assert response.metadata == {"app": "docs", "toolgate_tool_cap_reached": "true"}
    assert (response.model_extra or {})["toolgate"] == REACHED
    assert "before I could make 1 more call(s)" in response.output_text


# R: A1, B2
def test_a_response_below_the_cap_keeps_the_clients_metadata_as_it_was(gw: ServerThread) -> None:
    raw = client(gw, **{"X-Conversation-Id": "cap-r2"}).responses.with_raw_response.create(
        model="demo", input=BELOW, metadata={"app": "docs"})
    response = raw.parse()
    assert "x-toolgate-tool-cap" not in raw.headers
    assert response.metadata == {"app": "docs"} and (response.model_extra or {})["toolgate"] == NOT_REACHED


# R: A1, B2
def test_a_streamed_response_says_it_in_the_completed_event(gw: ServerThread) -> None:
    events = list(client(gw, **{"X-Conversation-Id": "cap-r3"}).responses.create(model="demo", input=AT_CAP, stream=True))
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1 and events[-1] is completed[0]
    response = completed[0].response
    assert response.status == "completed" and response.metadata == {"toolgate_tool_cap_reached": "true"}
    assert (response.model_extra or {})["toolgate"] == REACHED


# R: A2, B2
def test_a_message_at_the_cap_ends_its_turn_with_the_summary_and_the_header(gw: ServerThread) -> None:
    raw = claude(gw, "cap-m1").messages.with_raw_response.create(
        model="demo", max_tokens=512, messages=[{"role": "user", "content": AT_CAP}])
    message = raw.parse()
    assert raw.headers.get("x-toolgate-tool-cap") == "reached"
    assert message.stop_reason == "end_turn"  # the model finished its turn; the cap is said beside it
    assert (message.model_extra or {})["toolgate"] == REACHED
    below = claude(gw, "cap-m2").messages.with_raw_response.create(
        model="demo", max_tokens=512, messages=[{"role": "user", "content": BELOW}])
    assert "x-toolgate-tool-cap" not in below.headers and (below.parse().model_extra or {})["toolgate"] == NOT_REACHED


# R: A2, B2
def test_a_streamed_message_says_it_in_its_message_delta(gw: ServerThread) -> None:
    events: list[Any] = list(claude(gw, "cap-m3").messages.create(
        model="demo", max_tokens=512, messages=[{"role": "user", "content": AT_CAP}], stream=True))
    [delta] = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_reason == "end_turn" and (delta.model_extra or {})["toolgate"] == REACHED
    assert events[-1].type == "message_stop"


# R: G1, B2
def test_chat_completions_get_the_header_too(gw: ServerThread) -> None:
    answer = httpx2.post(gw.url + "/v1/chat/completions", timeout=30, headers={"X-Conversation-Id": "cap-c1"},
                         json={"model": "demo", "messages": [{"role": "user", "content": AT_CAP}]})
    assert answer.status_code == 200 and answer.headers.get("x-toolgate-tool-cap") == "reached"
    assert answer.json()["toolgate"] == REACHED
