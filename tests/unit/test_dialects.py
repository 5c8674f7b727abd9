"""The Responses and Messages translations as plain functions (A1, A2): images, structured output,
tool results, and the shapes they give back."""

from __future__ import annotations

import pytest

from gateway.api.messages import MessagesDialect
from gateway.api.responses import ResponsesDialect
from gateway.errors import BadRequest, Unauthorized

COMPLETION = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": "Checking.",
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}


def test_responses_images_become_image_url_parts_and_developer_messages_system_ones() -> None:
    # R: A1
    chat = ResponsesDialect().parse({"model": "m", "input": [
        {"role": "developer", "content": "Rules."},
        {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "low"}]},
    ]}, {}).chat
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}}]},
    ]


def test_a_responses_answer_holds_the_message_then_the_function_calls_and_the_summed_usage() -> None:
    # R: A1
    response = ResponsesDialect().parse({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "get_weather"}]}, {}).render(COMPLETION)
    message, call = response["output"]
    assert message["content"] == [{"type": "output_text", "text": "Checking.", "annotations": []}]
    assert {k: call[k] for k in ("type", "call_id", "name", "arguments", "status")} == {
        "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}', "status": "completed"}
    assert response["usage"]["input_tokens"] == 12 and response["usage"]["total_tokens"] == 15
    assert (response["status"], response["store"], response["tools"]) == ("completed", False, [{"type": "function", "name": "get_weather"}])


def test_messages_images_and_error_tool_results_translate() -> None:
    # R: A2
    chat = MessagesDialect().parse({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
                                     {"type": "text", "text": "and this?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "look", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "blurry", "is_error": True}]},
    ]}, {}).chat
    assert chat["messages"] == [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                                     {"type": "text", "text": "and this?"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "error: blurry"},
    ]


def test_a_messages_answer_holds_text_then_tool_use_with_its_input_as_an_object() -> None:
    # R: A2
    message = MessagesDialect().parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, {}).render(COMPLETION)
    assert message["content"] == [{"type": "text", "text": "Checking."},
                                  {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}]
    assert (message["stop_reason"], message["usage"]) == ("tool_use", {"input_tokens": 12, "output_tokens": 3})


@pytest.mark.parametrize(
    ("headers", "credential"),
    [({"x-api-key": "k"}, "Bearer k"), ({"authorization": "Bearer k"}, "Bearer k"),
     ({"x-api-key": "k", "authorization": "Bearer k"}, "Bearer k"), ({}, None)],
)
def test_the_messages_credential_is_x_api_key_or_bearer(headers: dict[str, str], credential: str | None) -> None:
    # R: A2, G3
    assert MessagesDialect().credential(headers) == credential


def test_disagreeing_credentials_and_a_malformed_version_are_refused() -> None:
    # R: A2
    with pytest.raises(Unauthorized):
        MessagesDialect().credential({"x-api-key": "k", "authorization": "Bearer other"})
    with pytest.raises(BadRequest, match="anthropic-version 'latest' is not supported"):
        MessagesDialect().parse({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, {"anthropic-version": "latest"})
