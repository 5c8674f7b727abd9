"""Safe token substitution (B6, B8).

Tokens are replaced inside JSON string values *after* parsing, in one pass: a value can never
change the JSON structure, and substituted text (which may come from a user or a tool) is never
scanned again, so it is never evaluated as a template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.content import message_text
from gateway.plugins import ChatRequest, PluginContext

TOKEN = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
PREFETCH_TOKENS = ("last_user_message", "user_id", "org_id", "display_name", "session_id")
RESULT_TOKENS = ("result",)
_TOKEN_LIKE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


def unknown_tokens(value: Any, known: tuple[str, ...]) -> list[str]:
    """Every `{{name}}` in the strings of `value` (parsed JSON or text) that is not `known`: a
    misspelt token would otherwise be sent to the server as written (checked at load, A4)."""
    if isinstance(value, str):
        return [m.group(0) for m in _TOKEN_LIKE.finditer(value) if m.group(1) not in known]
    if isinstance(value, list):
        return [token for item in value for token in unknown_tokens(item, known)]
    if isinstance(value, dict):
        return [token for item in value.values() for token in unknown_tokens(item, known)]
    return []


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace each known `{{token}}` in `text` by its value, once; unknown tokens stay as written."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        return values[name] if name in values else match.group(0)

    return TOKEN.sub(replace, text)


def substitute_json(value: Any, values: Mapping[str, str]) -> Any:
    """A copy of parsed JSON `value` with tokens substituted in string values only (keys untouched)."""
    if isinstance(value, str):
        return substitute(value, values)
    if isinstance(value, list):
        return [substitute_json(item, values) for item in value]
    if isinstance(value, dict):
        return {key: substitute_json(item, values) for key, item in value.items()}
    return value


def last_user_message(request: ChatRequest) -> str:
    """The text of the last `user` message of the request, or "" when there is none."""
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


CLIENT_TEXT_KEY = "mcp_bridge:last_user_message"
"""`ctx.state` key shared by every mcp_bridge node of a chain."""


def client_last_user_message(ctx: PluginContext, request: ChatRequest) -> str:
    """The last user message as the client sent it (B6, B7).

    Recorded by the first mcp_bridge of the chain: a later bridge sees the request with the
    earlier bridges' blocks appended, and must neither send that context to its own server as
    `{{last_user_message}}` nor take a lone injected block for a user message that asks something.
    """
    text = ctx.state.get(CLIENT_TEXT_KEY)
    if not isinstance(text, str):
        text = last_user_message(request)
        ctx.state[CLIENT_TEXT_KEY] = text
    return text


def prefetch_values(ctx: PluginContext, request: ChatRequest) -> dict[str, str]:
    """The values of the B6 tokens for this request (missing facts become "")."""
    identity = ctx.identity
    return {
        "last_user_message": client_last_user_message(ctx, request),
        "user_id": identity.user_id or "",
        "org_id": identity.org_id or "",
        "display_name": identity.display_name or "",
        "session_id": ctx.conversation_key or "",
    }


def render_result(template: str, result: str) -> str:
    """`prefetchResultTemplate` with `{{result}}` replaced by the text, once and literally."""
    return substitute(template, {"result": result})
