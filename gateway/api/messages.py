"""The Messages dialect (A2): `POST /v1/messages` (Anthropic) ↔ the internal chat request.

`system`, messages of text, image, `tool_use` and `tool_result` blocks, client tools and
`tool_choice` become a chat request; the finished chat completion becomes a `message` whose
client tool calls are `tool_use` blocks with `stop_reason: "tool_use"`. The key comes as
`x-api-key` (what the Anthropic SDK sends) or `Authorization: Bearer`. Features with no chat
equivalent (`top_k`, extended thinking, server tools, documents, MCP connectors, containers,
`inference_geo`) are refused with a 400 naming them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.api.dialect import StreamEncoder
from gateway.api.params import MESSAGES_PARAMS, check_params
from gateway.api.messages_input import chat_messages, chat_tool_choice, chat_tools
from gateway.api.messages_output import MessagesEncoder, error_body, loop_fields, new_id, stop_reason, tool_use_block, usage_object
from gateway.auth import bearer_token
from gateway.errors import BadRequest, GatewayError, Unauthorized

FIRST_VERSION = "2023-01-01"
"""The oldest `anthropic-version`; any later date is answered in the current shape (the SDK sends
its own release's date), and an absent header means the current one."""
_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")

ACCEPTED = frozenset({"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "tools",
                      "tool_choice", "stream", "metadata", "thinking", "service_tier", "output_config", "cache_control", "speed"})
"""Top-level fields this dialect understands; `cache_control`, `speed` and `service_tier` are hints
that need no counterpart upstream."""

EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
"""`output_config.effort` as a chat `reasoning_effort`."""

NO_CHAT_EQUIVALENT = {
    "top_k": "chat completions have no top_k",
    "mcp_servers": "the MCP connector is Anthropic's; configure MCP servers in the gateway (mcp_bridge) instead",
    "container": "code-execution containers are Anthropic's",
    "context_management": "context management is Anthropic's",
    "inference_geo": "the gateway cannot choose where its upstream runs",
}


def _check_fields(body: dict[str, Any]) -> None:
    for name, why in NO_CHAT_EQUIVALENT.items():
        if name in body:
            raise BadRequest(f"'{name}' is not supported: {why}", param=name)
    unknown = sorted(set(body) - ACCEPTED)
    if unknown:
        raise BadRequest(f"unsupported field(s) for /v1/messages: {', '.join(n[:40] for n in unknown[:5])}", param=unknown[0][:40])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string", param="model")
    if body.get("max_tokens") is None:
        raise BadRequest("'max_tokens' is required", param="max_tokens")
    check_params(body, MESSAGES_PARAMS)
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        raise BadRequest("'thinking' is not supported: chat completions have no extended thinking; omit it or send "
                         "{\"type\": \"disabled\"}", param="thinking")
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise BadRequest("'stop_sequences' must be an array of strings", param="stop_sequences")
    for name in ("metadata", "output_config"):
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise BadRequest(f"'{name}' must be an object", param=name)


def _output_config(config: dict[str, Any], chat: dict[str, Any]) -> None:
    """`output_config.format` as a chat `response_format`, `effort` as `reasoning_effort`."""
    fmt = config.get("format")
    if fmt is not None:
        if not (isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict)):
            raise BadRequest("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}", param="output_config.format")
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    effort = config.get("effort")
    if effort is not None:
        if effort not in EFFORTS:
            raise BadRequest(f"'output_config.effort' must be one of {', '.join(EFFORTS)}", param="output_config.effort")
        chat["reasoning_effort"] = EFFORTS[effort]


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The internal chat request for a Messages body; raises `BadRequest` naming what is wrong."""
    _check_fields(body)
    chat: dict[str, Any] = {"model": body["model"], "messages": chat_messages(body.get("messages"), body.get("system")),
                            "max_tokens": body["max_tokens"]}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"], parallel = chat_tool_choice(body["tool_choice"])
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("stop_sequences", "stop"), ("stream", "stream")):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    _output_config(body.get("output_config") or {}, chat)
    user = (body.get("metadata") or {}).get("user_id")
    if isinstance(user, str) and user:
        chat["user"] = user
    return chat


class MessagesTranslation:
    """One `/v1/messages` request: the chat request and the `message` around the answer."""

    include_usage = True

    def __init__(self, body: dict[str, Any]) -> None:
        self.chat = to_chat(body)
        self.id = new_id("msg")

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        choice = completion["choices"][0]
        message = choice.get("message") or {}
        content: list[dict[str, Any]] = []
        if isinstance(message.get("content"), str) and message["content"]:
            content.append({"type": "text", "text": message["content"]})
        content += [tool_use_block(call) for call in message.get("tool_calls") or []]
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.chat["model"], "content": content,
                "stop_reason": stop_reason(choice.get("finish_reason")), "stop_sequence": None,
                "usage": usage_object(completion.get("usage")), **loop_fields(completion.get("toolgate"))}

    def encoder(self) -> StreamEncoder:
        return MessagesEncoder(self.id, self.chat["model"])


class MessagesDialect:
    """`POST /v1/messages`; errors as `{"type": "error", "error": {"type", "message"}}`."""

    name = "messages"
    credential_headers = "'x-api-key: <key>' or 'Authorization: Bearer <token>'"

    def credential(self, headers: Mapping[str, str]) -> str | None:
        """`x-api-key` or `Authorization: Bearer`; both may come only when they agree."""
        key = (headers.get("x-api-key") or "").strip()
        authorization = headers.get("authorization")
        if key and authorization is not None and bearer_token(authorization) != key:
            raise Unauthorized("x-api-key and Authorization carry different credentials: send one of them")
        return f"Bearer {key}" if key else authorization

    def parse(self, body: dict[str, Any], headers: Mapping[str, str]) -> MessagesTranslation:
        version = headers.get("anthropic-version")
        if version is not None and not (_VERSION.match(version) and version >= FIRST_VERSION):
            raise BadRequest(f"anthropic-version {version[:40]!r} is not supported: expected a date "
                             f"(YYYY-MM-DD) from {FIRST_VERSION} on, e.g. 2023-06-01", param="anthropic-version")
        return MessagesTranslation(body)

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        return error_body(exc)
