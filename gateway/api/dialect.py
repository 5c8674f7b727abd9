"""What a client dialect provides the request engine (gateway.chat): typed, with no HTTP in it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.errors import GatewayError

CAP_HEADER = "x-toolgate-tool-cap"
"""A whole (non-streamed) response whose tool loop the gateway's cap ended says `reached` here, in
every API; a stream says it in its last event (its headers left before the loop ended)."""

ChatChunk = dict[str, Any]
"""One `chat.completion.chunk` dict as the tool loop yields it (JSON edge)."""


class StreamEncoder(Protocol):
    """Turns the loop's batches of chat chunks into this dialect's server-sent events."""

    def batch(self, chunks: list[ChatChunk]) -> bytes:
        """The events of one batch (one write); may be empty."""
        ...

    def end(self) -> bytes:
        """The events that close a stream that finished normally."""
        ...

    def error(self, exc: GatewayError) -> bytes:
        """The events that end a stream that failed after it started."""
        ...


class Translation(Protocol):
    """One client request, translated: the internal chat request and the way back."""

    chat: dict[str, Any]
    """The internal chat-completion request (`model` is the client's model name)."""
    include_usage: bool
    """Whether the stream's end carries the summed usage as a chunk (the chat dialect's opt-in)."""

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        """The final chat completion in the client's response shape."""
        ...

    def encoder(self) -> StreamEncoder:
        """A fresh encoder for a streamed response."""
        ...


class Dialect(Protocol):
    """A client API: how its requests are read and its errors shaped."""

    name: str
    credential_headers: str
    """How a caller presents a credential here (for the 401 of a request that sent none)."""

    def credential(self, headers: Mapping[str, str]) -> str | None:
        """The caller's credential as an `Authorization` header value (or None)."""
        ...

    def parse(self, body: dict[str, Any], headers: Mapping[str, str]) -> Translation:
        """Validate a JSON body and translate it; raises `BadRequest` naming what is wrong."""
        ...

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        """The error in this API's own error shape."""
        ...


class ChunkDelta:
    """What one streamed chat chunk carries for a dialect's stream encoder: usage, new text,
    tool-call deltas and a finish reason, each read defensively (a chunk may lack any of them)."""

    __slots__ = ("usage", "text", "tool_calls", "finish", "loop")

    def __init__(self, chunk: Mapping[str, Any]) -> None:
        self.usage = chunk.get("usage")
        choices = chunk.get("choices") or []
        choice: Mapping[str, Any] = choices[0] if choices and isinstance(choices[0], dict) else {}
        raw = choice.get("delta")
        delta: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        content = delta.get("content")
        self.text: str = content if isinstance(content, str) else ""
        self.tool_calls: list[Any] = delta.get("tool_calls") or []
        self.finish: str | None = choice.get("finish_reason")
        loop = chunk.get("toolgate")
        self.loop: dict[str, Any] | None = loop if isinstance(loop, dict) else None
        """The tool loop's summary (`tool_calls`, `rounds`, `tool_cap_reached`), on the finishing chunk."""


def token_counts(usage: Any) -> tuple[int, int]:
    """(prompt, completion) tokens of a chat `usage` object; missing or malformed counts are 0."""
    if not isinstance(usage, dict):
        return 0, 0
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
