"""The Responses dialect (A1): `POST /v1/responses` ↔ the internal chat request.

Input (a string, or items: messages, `function_call`, `function_call_output`), `instructions`,
function tools, `tool_choice` and the sampling settings become a chat request; the finished chat
completion becomes a `response` object whose output holds the assistant's message and the
client's own `function_call` items. The gateway keeps no responses: what needs stored state
(`previous_response_id`, `store: true`, `conversation`, `background`) and the built-in tools are
refused with a 400 that names them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gateway.api.dialect import StreamEncoder
from gateway.api.params import RESPONSES_PARAMS, check_params
from gateway.api.responses_input import chat_messages, chat_tool_choice, chat_tools
from gateway.api.responses_output import INCOMPLETE, ResponsesEncoder, call_item, loop_fields, message_item, new_id, usage_object
from gateway.errors import BadRequest, GatewayError

ACCEPTED = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "stream", "max_output_tokens",
    "temperature", "top_p", "metadata", "user", "store", "include", "text", "reasoning", "truncation", "service_tier",
    "prompt_cache_key", "safety_identifier", "stream_options",
})
"""Top-level fields this gateway understands (some only as the value that needs no state)."""

STATEFUL = {
    "previous_response_id": "the gateway stores no responses; send the whole conversation as 'input' items",
    "conversation": "the gateway stores no conversations; send the whole conversation as 'input' items",
    "prompt": "stored prompt templates are not available here; send 'instructions' and 'input'",
    "background": "background responses need stored state, which the gateway does not keep",
}


def _check_fields(body: dict[str, Any]) -> None:
    for name, why in STATEFUL.items():
        if body.get(name) not in (None, False):
            raise BadRequest(f"'{name}' is not supported: {why}", param=name, code="unsupported_parameter")
    if body.get("store") is True:
        raise BadRequest("'store': true is not supported: the gateway stores no responses; send false or omit it",
                         param="store", code="unsupported_parameter")
    unknown = sorted(set(body) - ACCEPTED - set(STATEFUL))
    if unknown:
        raise BadRequest(f"unsupported field(s) for /v1/responses: {', '.join(n[:40] for n in unknown[:5])}",
                         param=unknown[0][:40], code="unsupported_parameter")
    if body.get("truncation") not in (None, "disabled"):
        raise BadRequest("'truncation' must be 'disabled': the gateway does not truncate conversations", param="truncation")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string", param="model")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    for name in ("metadata", "text", "reasoning"):
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise BadRequest(f"'{name}' must be an object", param=name)
    if body.get("include") is not None and not isinstance(body["include"], list):
        raise BadRequest("'include' must be an array", param="include")
    check_params(body, RESPONSES_PARAMS)


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": {"name": "response", **schema}}
    raise BadRequest("'text.format' must be of type text, json_object or json_schema (with a 'schema')", param="text.format")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The internal chat request for a Responses body; raises `BadRequest` naming what is wrong."""
    _check_fields(body)
    messages = chat_messages(body.get("input"), body.get("instructions"))
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = chat_tool_choice(body["tool_choice"])
    for ours, theirs in (("parallel_tool_calls", "parallel_tool_calls"), ("temperature", "temperature"),
                         ("top_p", "top_p"), ("max_output_tokens", "max_tokens"), ("user", "user"), ("stream", "stream")):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    effort = (body.get("reasoning") or {}).get("effort")
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    conversation = (body.get("metadata") or {}).get("conversation_id")
    if conversation is not None:
        chat["metadata"] = {"conversation_id": conversation}  # G4; other metadata stays here
    return chat


class ResponsesTranslation:
    """One `/v1/responses` request: the chat request and the response object around the answer."""

    include_usage = True

    def __init__(self, body: dict[str, Any]) -> None:
        self.chat = to_chat(body)
        self.id = new_id("resp")
        self.created = int(time.time())
        self._echo = {
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {}, "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"), "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [], "text": body.get("text") or {"format": {"type": "text"}},
            "reasoning": body.get("reasoning"), "user": body.get("user"),
        }

    def response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                 finish: str | None = None, error: dict[str, Any] | None = None,
                 loop: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `response` object in the given state; `loop`, the tool loop's summary, when it ran."""
        incomplete = {"reason": INCOMPLETE[finish]} if status == "incomplete" and finish in INCOMPLETE else None
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.chat["model"],
            "output": output, "usage": usage, "error": error, "incomplete_details": incomplete,
            "previous_response_id": None, "store": False, "truncation": "disabled", **self._echo,
            **loop_fields(loop, self._echo["metadata"]),
        }

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        choice = completion["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        output = [message_item(new_id("msg"), text)] if text else []
        output += [call_item(new_id("fc"), call) for call in message.get("tool_calls") or []]
        finish = choice.get("finish_reason")
        status = "incomplete" if finish in INCOMPLETE else "completed"
        loop = completion.get("toolgate") if isinstance(completion.get("toolgate"), dict) else None
        return self.response(status, output, usage_object(completion.get("usage")), finish, loop=loop)

    def encoder(self) -> StreamEncoder:
        return ResponsesEncoder(self.response)


class ResponsesDialect:
    """`POST /v1/responses`; errors in the OpenAI envelope, as the Responses API answers them."""

    name = "responses"
    credential_headers = "'Authorization: Bearer <token>'"

    def credential(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("authorization")

    def parse(self, body: dict[str, Any], headers: Mapping[str, str]) -> ResponsesTranslation:
        return ResponsesTranslation(body)

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        return exc.body()
