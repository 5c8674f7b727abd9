"""The Messages API's output side (A2): content blocks, stop reasons, usage, errors and the event stream.

A stream is `message_start`, then per content block `content_block_start`, its deltas
(`text_delta` as the model writes; one `input_json_delta` per client tool call) and
`content_block_stop`, then `message_delta` (stop reason and the usage summed over every upstream
call) and `message_stop`. A failure after the start is an `error` event.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.api.dialect import ChatChunk, ChunkDelta, token_counts
from gateway.errors import GatewayError
from gateway.json_bytes import json_bytes

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
"""Chat finish reasons as Anthropic stop reasons. An answer after the gateway's tool-call cap is
`end_turn`: the model finished its turn (tools disabled); `pause_turn` would tell the client to
send the conversation back to continue, `max_tokens` that the text was cut. The cap is said in
`toolgate` beside the stop reason (`loop_fields`)."""


def loop_fields(loop: Any) -> dict[str, Any]:
    """The tool loop's summary as `toolgate` (as chat's: `tool_calls`, `rounds`,
    `tool_cap_reached`) on the message, and on a stream's `message_delta`, when the loop ran."""
    return {"toolgate": loop} if isinstance(loop, dict) and loop else {}

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}
"""Anthropic error types by HTTP status; any other 4xx is an `invalid_request_error` (the API's
documented type for "other 4XX status codes"), any 5xx an `api_error`."""


def new_id(prefix: str) -> str:
    """An id in the API's style (`msg_…`, `toolu_…`)."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def error_body(exc: GatewayError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`."""
    kind = ERROR_TYPES.get(exc.status, "invalid_request_error" if exc.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def stop_reason(finish: Any) -> str:
    """A chat finish reason as an Anthropic stop reason (`end_turn` when there is none)."""
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"


def usage_object(usage: Any) -> dict[str, Any]:
    """A chat `usage` (summed over every upstream call) as the Messages `usage`."""
    prompt, completion = token_counts(usage)
    return {"input_tokens": prompt, "output_tokens": completion}


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the object a `tool_use` block carries ({} when not an object)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """A client tool call (chat shape) as a `tool_use` block; its id is the call's id."""
    fn = call.get("function") or {}
    return {"type": "tool_use", "id": call.get("id") or new_id("toolu"), "name": fn.get("name"), "input": tool_input(fn.get("arguments"))}


class MessagesEncoder:
    """Chat chunks of the tool loop → Messages events (module docstring)."""

    def __init__(self, message_id: str, model: str) -> None:
        self._id, self._model = message_id, model
        self._started = False
        self._index = 0
        self._text_open = False
        self._finish: str | None = None
        self._usage: Any = None
        self._loop: dict[str, Any] | None = None

    @staticmethod
    def _event(kind: str, data: dict[str, Any]) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + json_bytes({"type": kind, **data}) + b"\n\n"

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {"id": self._id, "type": "message", "role": "assistant", "model": self._model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        return [self._event("message_start", {"message": message})]

    def _close_text(self) -> list[bytes]:
        if not self._text_open:
            return []
        self._text_open = False
        self._index += 1
        return [self._event("content_block_stop", {"index": self._index - 1})]

    def _text(self, text: str) -> list[bytes]:
        out = []
        if not self._text_open:
            self._text_open = True
            out.append(self._event("content_block_start", {"index": self._index, "content_block": {"type": "text", "text": ""}}))
        out.append(self._event("content_block_delta", {"index": self._index, "delta": {"type": "text_delta", "text": text}}))
        return out

    def _tool_use(self, call: dict[str, Any]) -> list[bytes]:
        out = self._close_text()
        block = tool_use_block(call)
        index = self._index
        self._index += 1
        partial = json.dumps(block["input"], ensure_ascii=False)
        return [
            *out,
            self._event("content_block_start", {"index": index, "content_block": {**block, "input": {}}}),
            self._event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}),
            self._event("content_block_stop", {"index": index}),
        ]

    def batch(self, chunks: list[ChatChunk]) -> bytes:
        out = self._start()
        for delta in map(ChunkDelta, chunks):
            if delta.usage is not None:
                self._usage = delta.usage
            if delta.text:
                out += self._text(delta.text)
            for call in delta.tool_calls:
                out += self._tool_use(call)
            self._finish = delta.finish or self._finish
            self._loop = delta.loop or self._loop
        return b"".join(out)

    def end(self) -> bytes:
        out = self._start() + self._close_text()
        out.append(self._event("message_delta", {"delta": {"stop_reason": stop_reason(self._finish), "stop_sequence": None},
                                                 "usage": usage_object(self._usage), **loop_fields(self._loop)}))
        out.append(self._event("message_stop", {}))
        return b"".join(out)

    def error(self, exc: GatewayError) -> bytes:
        return self._event("error", {"error": error_body(exc)["error"]})
