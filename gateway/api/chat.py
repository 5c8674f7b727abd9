"""The chat-completions dialect (G1): the internal request is the client's own body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.api.dialect import ChatChunk, StreamEncoder
from gateway.api.chat_schema import check_messages
from gateway.api.params import CHAT_PARAMS, check_params
from gateway.errors import BadRequest, GatewayError
from gateway.json_bytes import json_bytes


def parse_request(body: dict[str, Any]) -> dict[str, Any]:
    """A chat-completion body with the fields the gateway relies on checked, and the sampling
    parameters within the API's ranges (G6, A3)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string", param="model")
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of message objects", param="messages")
    check_messages(messages)
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        # the tool loop and the stream follow one choice; more would be merged or left unchecked
        raise BadRequest("'n' must be 1: the gateway returns one choice per request", param="n")
    check_params(body, CHAT_PARAMS)
    for name in ("stream_options", "metadata"):
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise BadRequest(f"'{name}' must be an object", param=name)
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise BadRequest("'tools' must be an array of tool objects", param="tools")
    return body


class ChatEncoder:
    """`data: <chunk>` events; a stream that finished ends with `data: [DONE]`."""

    def batch(self, chunks: list[ChatChunk]) -> bytes:
        return b"".join(b"data: " + json_bytes(chunk) + b"\n\n" for chunk in chunks)

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"

    def error(self, exc: GatewayError) -> bytes:
        return b"data: " + json_bytes(exc.body()) + b"\n\n"


class ChatTranslation:
    """The client's body is already the internal request; the completion goes back as it is."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.chat = body
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        return completion

    def encoder(self) -> StreamEncoder:
        return ChatEncoder()


class ChatDialect:
    """`POST /v1/chat/completions`."""

    name = "chat"
    credential_headers = "'Authorization: Bearer <token>'"

    def credential(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("authorization")

    def parse(self, body: dict[str, Any], headers: Mapping[str, str]) -> ChatTranslation:
        return ChatTranslation(parse_request(body))

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        return exc.body()
