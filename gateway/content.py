"""The one helper for the text of a chat message's `content` (a string, or a list of parts)."""

from __future__ import annotations

import json
from typing import Any


def message_text(content: Any, *, placeholders: bool = False) -> str:
    """The text of `content`: a string as it is; of a list, every part's string `text`, one per
    line. With `placeholders`, other parts show as `[type]` (and other JSON as JSON), for display."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif placeholders and isinstance(part, dict):
                texts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(texts)
    if placeholders and content is not None:
        return json.dumps(content, ensure_ascii=False)
    return ""
