"""Message roles and content-part shapes of a chat request, per the OpenAI schema (A3).

What the upstream would refuse (or silently misread) is refused here with a 400 that names the
message and the field, before any plugin or upstream sees the request.
"""

from __future__ import annotations

from typing import Any

from gateway.api.params import check_image_url
from gateway.errors import BadRequest

PARTS_BY_ROLE: dict[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
    "function": frozenset(),
}
"""The roles a message may have, and the content-part types each may carry."""

_PART_FIELD = {"text": "text", "refusal": "refusal", "image_url": "image_url", "input_audio": "input_audio", "file": "file"}
_PART_FIELD_TYPE: dict[str, type] = {"text": str, "refusal": str, "image_url": dict, "input_audio": dict, "file": dict}


def _check_content(content: Any, role: str, where: str) -> None:
    if content is None:
        if role not in ("assistant", "function"):
            raise BadRequest(f"'{where}.content' is required for a {role} message", param=f"{where}.content")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list) or role == "function":
        raise BadRequest(f"'{where}.content' must be a string or an array of content parts", param=f"{where}.content")
    allowed = PARTS_BY_ROLE[role]
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise BadRequest(f"'{at}' must be an object with a string 'type'", param=at)
        if kind not in allowed:
            raise BadRequest(
                f"'{at}.type' is {kind[:40]!r}; a {role} message takes content parts of type {', '.join(sorted(allowed))}",
                param=f"{at}.type",
            )
        field = _PART_FIELD[kind]
        if not isinstance(part.get(field), _PART_FIELD_TYPE[kind]):
            expected = "a string" if _PART_FIELD_TYPE[kind] is str else "an object"
            raise BadRequest(f"'{at}.{field}' must be {expected}", param=f"{at}.{field}")
        if kind == "image_url" and not isinstance(part["image_url"].get("url"), str):
            raise BadRequest(f"'{at}.image_url.url' must be a string", param=f"{at}.image_url.url")
        if kind == "image_url":
            check_image_url(part["image_url"]["url"], f"{at}.image_url.url")


def check_messages(messages: list[Any]) -> None:
    """Raise `BadRequest` for the first message whose role or content shape is wrong."""
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"'{where}' must be an object with a string 'role'", param=where)
        role = message["role"]
        if role not in PARTS_BY_ROLE:
            raise BadRequest(
                f"'{where}.role' is {role[:40]!r}; expected one of {', '.join(PARTS_BY_ROLE)}", param=f"{where}.role"
            )
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise BadRequest(f"'{where}.tool_call_id' is required for a tool message", param=f"{where}.tool_call_id")
        if role == "assistant" and message.get("tool_calls") is not None and not isinstance(message["tool_calls"], list):
            raise BadRequest(f"'{where}.tool_calls' must be an array", param=f"{where}.tool_calls")
        _check_content(message.get("content"), role, where)
