"""What every upstream offers the tool loop: one turn, whole or streamed."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any, Protocol

from gateway.errors import (
    ContextWindowExceeded,
    GatewayError,
    UpstreamBadRequest,
    UpstreamError,
    UpstreamRateLimited,
)


class Upstream(Protocol):
    """An upstream model endpoint. Bodies are OpenAI chat-completion requests whose `model` is
    already the upstream's model name; results are OpenAI dicts."""

    name: str

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streaming turn: a `chat.completion` dict."""
        ...

    def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        """One streaming turn: batches of `chat.completion.chunk` dicts, ending before `[DONE]`.
        A batch is what arrived together; the gateway forwards it in one write."""
        ...

    async def aclose(self) -> None: ...


def upstream_message(raw: bytes) -> str:
    """The human part of an upstream error body, shortened."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        text = raw[:200].decode("utf-8", "replace").strip()
        return text or "no details"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:500]
        if isinstance(err, str):
            return err[:500]
    return "no details"


CONTEXT_WINDOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|input is too long", re.IGNORECASE
)
"""How OpenAI (`context_length_exceeded`), vLLM, llama.cpp, Anthropic and Ollama word a request
longer than the model's context window."""


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` header given in seconds, or None (absent, an HTTP date, or nonsense)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None


def error_for_status(upstream: str, status: int, raw: bytes, retry_after: str | None = None) -> GatewayError:
    """Map an upstream HTTP error status to the gateway's error (G5): 429 stays 429, the
    request's own faults keep their 4xx (a context-window one is `ContextWindowExceeded`, which
    a route's fallbacks answer, O1), credentials and 5xx become 502."""
    detail = upstream_message(raw)
    if status == 429:
        return UpstreamRateLimited(f"upstream '{upstream}' is rate limiting requests: {detail}",
                                   retry_after=retry_after_seconds(retry_after))
    if status in (401, 403):
        return UpstreamError(f"upstream '{upstream}' refused the gateway's credentials (HTTP {status})")
    if status in (400, 413) and (CONTEXT_WINDOW.search(detail) or b"context_length_exceeded" in raw):
        return ContextWindowExceeded(f"upstream '{upstream}' rejected the request as longer than its context window: {detail}",
                                     status=400)
    if status in (400, 404, 413, 422):
        return UpstreamBadRequest(f"upstream '{upstream}' rejected the request (HTTP {status}): {detail}", status=400 if status == 404 else status)
    return UpstreamError(f"upstream '{upstream}' failed (HTTP {status}): {detail}")


def check_completion(upstream: str, data: Any) -> dict[str, Any]:
    """A `chat.completion` dict, or a 502 naming the upstream."""
    if (
        isinstance(data, dict)
        and isinstance(data.get("choices"), list)
        and data["choices"]
        and isinstance(data["choices"][0], dict)
        and isinstance(data["choices"][0].get("message"), dict)
    ):
        return data
    raise UpstreamError(f"upstream '{upstream}' returned something that is not a chat completion")


def check_chunk(upstream: str, data: Any) -> dict[str, Any]:
    """A `chat.completion.chunk` dict, or a 502 naming the upstream."""
    if isinstance(data, dict) and isinstance(data.get("choices", []), list):
        if "error" in data and not data.get("choices"):
            raise UpstreamError(f"upstream '{upstream}' reported an error mid-stream: {upstream_message(json.dumps(data).encode())}")
        return data
    raise UpstreamError(f"upstream '{upstream}' sent a stream chunk that is not a chat completion chunk")
