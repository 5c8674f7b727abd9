"""Where injected context goes (B12): appended to the last user message, never a message of its own
unless there is no user message to complete; never two consecutive user messages."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gateway.plugins import ChatRequest


@dataclass(frozen=True)
class ContextBlock:
    """One titled piece of context: a prefetch result, a resource, or a confirmed call's result."""

    title: str
    text: str

    def render(self) -> str:
        """The block as markdown: a `##` title line, then the text."""
        return f"## {self.title}\n{self.text}"


def render_blocks(blocks: list[ContextBlock]) -> str:
    """The text appended to the conversation."""
    return "\n\n".join(block.render() for block in blocks)


def _append_text(content: Any, text: str) -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    if isinstance(content, str) and content:
        return f"{content}\n\n{text}"
    return text


def inject(request: ChatRequest, blocks: list[ContextBlock]) -> ChatRequest:
    """A copy of `request` whose last user message ends with the blocks (the input is not changed)."""
    if not blocks:
        return request
    text = render_blocks(blocks)
    messages: list[Any] = list(request.get("messages") or [])
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            updated = copy.copy(message)
            updated["content"] = _append_text(message.get("content"), text)
            messages[index] = updated
            break
    else:
        messages.append({"role": "user", "content": text})
    return {**request, "messages": messages}
