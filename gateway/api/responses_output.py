"""The Responses API's output side (A1): output items, usage, and the streamed event sequence.

A stream is `response.created`, `response.in_progress`, then per output item `output_item.added`,
its deltas and `output_item.done` (the message's text as `output_text.delta`s as the model writes
it; each client function call with its arguments), and `response.completed` (or
`response.incomplete`) carrying the whole response with the summed usage. A failure after the
start is an `error` event followed by `response.failed`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from gateway.api.dialect import ChatChunk, ChunkDelta, token_counts
from gateway.errors import GatewayError
from gateway.json_bytes import json_bytes

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""Chat finish reasons that leave a response incomplete, and the Responses reason for each."""

Snapshot = Callable[..., dict[str, Any]]
"""`(status, output, usage=None, finish=None, error=None, loop=None)` → the `response` object in
that state (`loop`: the tool loop's summary, see `loop_fields`)."""

CAP_KEY = "toolgate_tool_cap_reached"
"""The `metadata` key that says the gateway's tool-call cap ended the loop (value `"true"`)."""


def loop_fields(loop: dict[str, Any] | None, metadata: dict[str, Any]) -> dict[str, Any]:
    """What a response says of the gateway's tool loop: its summary as `toolgate` (as chat's), and
    at the cap `metadata.toolgate_tool_cap_reached: "true"` — the Responses API's typed place for
    it, since `incomplete_details.reason` is a closed enum (max_output_tokens, max_messages,
    content_filter, steered) and the answer after the cap is complete, not cut."""
    if not loop:
        return {}
    fields: dict[str, Any] = {"toolgate": loop}
    if loop.get("tool_cap_reached"):
        fields["metadata"] = {**metadata, CAP_KEY: "true"}
    return fields


def new_id(prefix: str) -> str:
    """An id in the API's style (`resp_…`, `msg_…`, `fc_…`)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_object(usage: Any) -> dict[str, Any]:
    """A chat `usage` (summed over every upstream call) as the Responses `usage`."""
    prompt, completion = token_counts(usage)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion}


def text_part(text: str) -> dict[str, Any]:
    """An `output_text` content part."""
    return {"type": "output_text", "text": text, "annotations": []}


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    """The assistant's `message` output item (no content part while it is being added)."""
    content = [text_part(text)] if text is not None else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    """A client tool call (chat shape) as a `function_call` output item."""
    fn = call.get("function") or {}
    arguments = fn.get("arguments") if status == "completed" else ""
    return {"type": "function_call", "id": item_id, "call_id": call.get("id"), "name": fn.get("name"),
            "arguments": arguments or "", "status": status}


class ResponsesEncoder:
    """Chat chunks of the tool loop → Responses events (module docstring)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._seq = 0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._text_id: str | None = None
        self._text: list[str] = []
        self._finish: str | None = None
        self._usage: Any = None
        self._loop: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + json_bytes(data) + b"\n\n"

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        response = self._snapshot("in_progress", [])
        return [self._event("response.created", response=response), self._event("response.in_progress", response=response)]

    def _text_delta(self, text: str) -> list[bytes]:
        out = []
        index = len(self._output)
        if self._text_id is None:
            self._text_id = new_id("msg")
            out.append(self._event("response.output_item.added", output_index=index,
                                   item=message_item(self._text_id, None, "in_progress")))
            out.append(self._event("response.content_part.added", item_id=self._text_id, output_index=index,
                                   content_index=0, part=text_part("")))
        self._text.append(text)
        out.append(self._event("response.output_text.delta", item_id=self._text_id, output_index=index,
                               content_index=0, delta=text, logprobs=[]))
        return out

    def _close_text(self) -> list[bytes]:
        if self._text_id is None:
            return []
        index, text, item_id = len(self._output), "".join(self._text), self._text_id
        item = message_item(item_id, text)
        self._output.append(item)
        self._text_id = None
        return [
            self._event("response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text, logprobs=[]),
            self._event("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=text_part(text)),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _call(self, call: dict[str, Any]) -> list[bytes]:
        out = self._close_text()
        index, item_id = len(self._output), new_id("fc")
        item = call_item(item_id, call)
        self._output.append(item)
        return [
            *out,
            self._event("response.output_item.added", output_index=index, item=call_item(item_id, call, "in_progress")),
            self._event("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=item["arguments"]),
            self._event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                        name=item["name"], arguments=item["arguments"]),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def batch(self, chunks: list[ChatChunk]) -> bytes:
        out = self._start()
        for delta in map(ChunkDelta, chunks):
            if delta.usage is not None:
                self._usage = delta.usage
            if delta.text:
                out += self._text_delta(delta.text)
            for call in delta.tool_calls:
                out += self._call(call)
            self._finish = delta.finish or self._finish
            self._loop = delta.loop or self._loop
        return b"".join(out)

    def end(self) -> bytes:
        out = self._start() + self._close_text()
        status = "incomplete" if self._finish in INCOMPLETE else "completed"
        response = self._snapshot(status, self._output, usage_object(self._usage), self._finish, loop=self._loop)
        out.append(self._event(f"response.{status}", response=response))
        return b"".join(out)

    def error(self, exc: GatewayError) -> bytes:
        out = self._start()
        out.append(self._event("error", code=exc.code, message=exc.message, param=exc.param))
        failed = self._snapshot("failed", self._output, usage_object(self._usage), error={"code": exc.code, "message": exc.message})
        out.append(self._event("response.failed", response=failed))
        return b"".join(out)
