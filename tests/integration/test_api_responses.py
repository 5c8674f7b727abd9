"""The Responses API (`POST /v1/responses`) through the real gateway, driven by the official
`openai` SDK (`client.responses.create`, with and without `stream=True`) (A1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import McpServerState, http_app
from tests.support.upstream import Reply, ScriptedUpstream

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def state() -> McpServerState:
    return McpServerState(require_credential=True)


@pytest.fixture
def mcp_server(state: McpServerState) -> Iterator[ServerThread]:
    with serve(http_app(state)) as server:
        yield server


def tools_config(upstream: ScriptedUpstream, mcp_server: ServerThread) -> dict[str, Any]:
    bridge = {"type": "mcp_bridge", "id": "docs", "endpoint": mcp_server.url + "/mcp", "timeoutSeconds": 5,
              "toolFilter": ["echo"], **canary.mcp_auth()}
    return simple_config(upstream.url, [bridge])


def test_text_input_and_instructions_become_a_chat_request_and_the_answer_a_response(upstream: ScriptedUpstream) -> None:
    # R: A1
    with running_gateway(simple_config(upstream.url)) as gw:
        response = client(gw).responses.create(model="assistant", input="What is toolgate?", instructions="Be brief.",
                                               temperature=0.3, max_output_tokens=50)
    assert response.output_text == "Hello from the scripted model."
    assert response.status == "completed" and response.model == "assistant" and response.id.startswith("resp_")
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (10, 5)
    sent = upstream.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is toolgate?"}]
    assert (sent["model"], sent["temperature"], sent["max_tokens"]) == ("scripted-model", 0.3, 50)


def test_streamed_response_sends_the_responses_event_types_in_order(upstream: ScriptedUpstream) -> None:
    # R: A1
    upstream.push(Reply(content="one two three"))
    with running_gateway(simple_config(upstream.url)) as gw:
        events = list(client(gw).responses.create(model="assistant", input="count", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "one two three "
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "one two three " and final.usage is not None and final.usage.total_tokens == 15


def test_the_sdk_stream_helper_assembles_the_final_response(upstream: ScriptedUpstream) -> None:
    # R: A1
    upstream.push(Reply(content="assembled by the helper"))
    with running_gateway(simple_config(upstream.url)) as gw:
        with client(gw).responses.stream(model="assistant", input="hi") as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
    assert text == final.output_text == "assembled by the helper "


@pytest.mark.parametrize("stream", [False, True])
def test_gateway_tools_run_server_side_and_the_clients_function_call_comes_back_as_an_item(
    upstream: ScriptedUpstream, state: McpServerState, mcp_server: ServerThread, stream: bool
) -> None:
    # R: A1, G7, B1
    upstream.push(Reply(tool_calls=[("echo", {"q": "docs"})], usage=(7, 3)),
                  Reply(content="Let me ask you.", tool_calls=[("get_weather", {"city": "Oslo"})], usage=(11, 4)))
    with running_gateway(tools_config(upstream, mcp_server)) as gw:
        kwargs: dict[str, Any] = {"model": "assistant", "input": "Weather in Oslo?", "tools": [WEATHER]}
        if stream:
            events = list(client(gw).responses.create(stream=True, **kwargs))
            response = events[-1].response
            assert events[-1].type == "response.completed"
            assert not any("echo" in json.dumps(e.model_dump()) for e in events)
        else:
            response = client(gw).responses.create(**kwargs)
    assert state.calls["echo"] == 1  # run by the gateway
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]
    assert calls[0].call_id == "call_2_0"
    assert response.output_text.strip() == "Let me ask you."  # streamed word by word
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (18, 7)
    offered = [t["function"]["name"] for t in upstream.requests[0]["tools"]]
    assert offered == ["get_weather", "echo"]


def test_function_call_items_and_their_outputs_continue_the_conversation(upstream: ScriptedUpstream) -> None:
    # R: A1, G7
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city":"Bergen"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "4 degrees"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]
    with running_gateway(simple_config(upstream.url)) as gw:
        client(gw).responses.create(model="assistant", input=items, tools=[WEATHER], tool_choice="auto")
    sent = upstream.requests[0]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Bergen"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "4 degrees"},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
    ]
    assert sent["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}]
    assert sent["tool_choice"] == "auto"


def test_a_length_finish_is_an_incomplete_response(upstream: ScriptedUpstream) -> None:
    # R: A1
    upstream.push(Reply(raw=json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "cut"}, "finish_reason": "length"}]}).encode()))
    with running_gateway(simple_config(upstream.url)) as gw:
        response = client(gw).responses.create(model="assistant", input="long", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"previous_response_id": "resp_1"}, "'previous_response_id' is not supported"),
        ({"store": True}, "'store': true is not supported"),
        ({"conversation": "conv_1"}, "'conversation' is not supported"),
        ({"background": True}, "'background' is not supported"),
        ({"tools": [{"type": "web_search"}]}, "built-in tool 'web_search' is not supported"),
        ({"tools": [{"type": "mcp", "server_label": "x", "server_url": "http://x"}]}, "built-in tool 'mcp' is not supported"),
        ({"tool_choice": {"type": "file_search"}}, "'tool_choice' must be"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "of type 'web_search_call' is not supported"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "the gateway stores no items"),
        ({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]}, "no function_call item with that call_id"),
        ({"input": [{"role": "wizard", "content": "hi"}]}, "'input[0].role' is 'wizard'"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "'input_file' is not supported"),
        ({"input": ["just a string"]}, "'input[0]' must be an object"),
        ({"input": []}, "'input' is required"),
        ({"frobnicate": 1}, "unsupported field(s) for /v1/responses: frobnicate"),
        ({"stream": "yes"}, "'stream' must be a boolean"),
    ],
)
def test_unsupported_features_and_bad_items_get_a_400_naming_them(upstream: ScriptedUpstream, extra: dict[str, Any], fragment: str) -> None:
    # R: A1, G6
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.BadRequestError) as caught:
            client(gw).responses.create(model="assistant", input="hi", extra_body=extra)
    assert fragment in caught.value.message
    assert set(caught.value.body) == {"message", "type", "code", "param"}  # type: ignore[arg-type]
    assert upstream.requests == []


def test_unknown_model_is_a_404_and_a_body_that_is_not_json_a_400(upstream: ScriptedUpstream) -> None:
    # R: A1, G6
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.NotFoundError):
            client(gw).responses.create(model="nope", input="hi")
        broken = httpx2.post(gw.url + "/v1/responses", content=b"{nope", headers={"content-type": "application/json"})
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]


def test_a_stream_that_fails_after_it_started_ends_with_an_error_and_response_failed(upstream: ScriptedUpstream) -> None:
    # R: A1, G6
    upstream.push(Reply(content="one two three four", cut_stream_after=3))
    with running_gateway(simple_config(upstream.url)) as gw:
        events = list(client(gw).responses.create(model="assistant", input="hi", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert "ended the stream without [DONE]" in events[-2].message
    assert events[-1].response.error is not None and events[-1].response.error.code == "bad_gateway"


def test_unknown_upstream_events_are_skipped_and_a_malformed_one_ends_the_stream_with_an_error(upstream: ScriptedUpstream) -> None:
    # R: A1, G6
    upstream.push(Reply(content="still fine", extra_events=[{"object": "weird.event", "type": "mystery"}, "event: ping\ndata: {}\n\n"]),
                  Reply(content="broken now", extra_events=[{"choices": "not a list"}]))
    with running_gateway(simple_config(upstream.url)) as gw:
        fine = list(client(gw).responses.create(model="assistant", input="hi", stream=True))
        broken = list(client(gw).responses.create(model="assistant", input="hi", stream=True))
    assert fine[-1].type == "response.completed" and fine[-1].response.output_text == "still fine "
    assert broken[-1].type == "response.failed"
    assert "not a chat completion chunk" in broken[-2].message


def test_metadata_conversation_id_scopes_the_conversation_and_is_not_sent_upstream(upstream: ScriptedUpstream) -> None:
    # R: A1, G4
    with running_gateway(simple_config(upstream.url)) as gw:
        response = client(gw).responses.create(model="assistant", input="hi", metadata={"conversation_id": "c-1", "team": "x"})
    assert response.metadata == {"conversation_id": "c-1", "team": "x"}  # echoed to the client as sent
    assert "metadata" not in upstream.requests[0]


def test_a_request_shaped_like_the_agents_sdks_and_codexs_is_served(upstream: ScriptedUpstream) -> None:
    # R: A1
    body = {
        "model": "assistant", "instructions": "You are a coding agent.", "stream": True, "store": False,
        "include": ["reasoning.encrypted_content"], "parallel_tool_calls": False, "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"}, "prompt_cache_key": "k-1", "truncation": "disabled",
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}, "verbosity": "low"},
        "tools": [{"type": "function", "name": "shell", "description": "Run a command.", "strict": True,
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "array", "items": {"type": "string"}}},
                                  "required": ["cmd"], "additionalProperties": False}}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell", "arguments": '{"cmd":["ls"]}', "status": "completed"},
            {"type": "function_call_output", "call_id": "call_a", "output": "README.md"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "One file.", "annotations": []}]},
            {"role": "user", "content": "thanks"},
        ],
    }
    with running_gateway(simple_config(upstream.url)) as gw:
        raw = httpx2.post(gw.url + "/v1/responses", json=body, headers={"authorization": "Bearer sk-local"}).text
    kinds = [line.removeprefix("event: ") for line in raw.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    sent = upstream.requests[0]
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user", "assistant", "tool", "assistant", "user"]
    assert (sent["parallel_tool_calls"], sent["reasoning_effort"], sent["tool_choice"]) == (False, "medium", "auto")
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True}}
    assert sent["tools"][0]["function"]["strict"] is True


def test_retrieving_a_stored_response_is_a_404_saying_none_are_stored(upstream: ScriptedUpstream) -> None:
    # R: A1, G6
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.NotFoundError) as caught:
            client(gw).responses.retrieve("resp_123")
        with pytest.raises(openai.NotFoundError):
            client(gw).responses.delete("resp_123")
    assert "the gateway stores no responses" in caught.value.message
