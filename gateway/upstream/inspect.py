"""The built-in `inspect` upstream: answers with exactly what the model would have received.

Operators use it to see what the plugin chain did (prefetch blocks, resources, tools offered);
with the `demo` upstream (gateway.upstream.demo, a scripted tool-using model) it lets the
gateway run with no API key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.content import message_text


def render(body: dict[str, Any]) -> str:
    """The messages and tools of a request as readable text."""
    lines = [f"model: {body.get('model')}", ""]
    for i, message in enumerate(body.get("messages", [])):
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        lines.append(f"--- message {i + 1}: {role} ---")
        if isinstance(message, dict):
            lines.append(message_text(message.get("content"), placeholders=True))
            for call in message.get("tool_calls") or []:
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                lines.append(f"(tool call {fn.get('name')} {fn.get('arguments')})")
        lines.append("")
    tools = body.get("tools") or []
    lines.append(f"--- tools offered: {len(tools)} ---")
    for tool in tools:
        fn = tool.get("function", {}) if isinstance(tool, dict) else {}
        desc = (fn.get("description") or "").strip().splitlines()
        lines.append(f"- {fn.get('name')}: {desc[0] if desc else ''}")
    return "\n".join(lines).rstrip() + "\n"


def usage(body: dict[str, Any], text: str) -> dict[str, int]:
    """Token counts of a built-in model's turn, counted as words (of the messages; of `text`)."""
    prompt = sum(len(message_text(m.get("content"), placeholders=True).split()) for m in body.get("messages", []) if isinstance(m, dict))
    completion = len(text.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class InspectUpstream:
    """Never calls tools; its answer is `render(body)`."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        text = render(body)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model")),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage(body, text),
        }

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        text = render(body)
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()), "model": str(body.get("model"))}
        batch = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
        for line in text.splitlines(keepends=True):
            batch.append({**base, "choices": [{"index": 0, "delta": {"content": line}, "finish_reason": None}]})
        batch.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        batch.append({**base, "choices": [], "usage": usage(body, text)})
        yield batch

    async def aclose(self) -> None:
        """Nothing to close."""
