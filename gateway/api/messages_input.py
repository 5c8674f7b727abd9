"""Anthropic Messages requests as chat messages, tools and tool choice (A2)."""

from __future__ import annotations

import json
from typing import Any

from gateway.api.params import check_image_url
from gateway.errors import BadRequest

NO_CHAT_EQUIVALENT = {
    "document": "document blocks", "search_result": "search_result blocks", "thinking": "thinking blocks",
    "redacted_thinking": "redacted_thinking blocks", "server_tool_use": "server tools", "web_search_tool_result": "server tools",
    "container_upload": "container uploads", "mcp_tool_use": "MCP connector blocks", "mcp_tool_result": "MCP connector blocks",
}
"""Content blocks a chat model cannot be given, and how the refusal names them."""


def _refuse_block(kind: Any, where: str) -> BadRequest:
    if isinstance(kind, str) and kind in NO_CHAT_EQUIVALENT:
        return BadRequest(f"'{where}': {NO_CHAT_EQUIVALENT[kind]} are not supported by this gateway", param=f"{where}.type")
    shown = kind[:40] if isinstance(kind, str) else "(no type)"
    return BadRequest(f"'{where}': content block type {shown!r} is not supported here", param=f"{where}.type")


IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
"""The `media_type`s of a base64 image source (Anthropic's reference)."""


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    raw = block.get("source")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        if source["media_type"] not in IMAGE_MEDIA_TYPES:
            raise BadRequest(f"'{where}.source.media_type' must be one of {', '.join(IMAGE_MEDIA_TYPES)}",
                             param=f"{where}.source.media_type")
        return {"type": "image_url", "image_url": {"url": f"data:{source['media_type']};base64,{source['data']}"}}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        check_image_url(source["url"], f"{where}.source.url", ("https", "http"))
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise BadRequest(f"'{where}.source' must be a base64 image (media_type, data) or a url", param=f"{where}.source")


def _text(block: dict[str, Any], where: str) -> str:
    if not isinstance(block.get("text"), str):
        raise BadRequest(f"'{where}.text' must be a string", param=f"{where}.text")
    return block["text"]


def _tool_result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise BadRequest(f"'{where}.content[{j}]': only text blocks are supported in a tool_result",
                                 param=f"{where}.content[{j}]")
            texts.append(_text(part, f"{where}.content[{j}]"))
        text = "\n".join(texts)
    else:
        raise BadRequest(f"'{where}.content' must be a string or an array of text blocks", param=f"{where}.content")
    return f"error: {text}" if block.get("is_error") is True else text


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or an array of content blocks", param=where)
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            raise BadRequest(f"'{where}[{j}]' must be a content block object", param=f"{where}[{j}]")
    return content


def _user(content: Any, where: str, calls: set[str]) -> list[dict[str, Any]]:
    """Tool results first (as tool messages, in order), then the rest as one user message."""
    tool_messages, parts = [], []
    for j, block in enumerate(_blocks(content, where)):
        at, kind = f"{where}[{j}]", block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.append(_image_part(block, at))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in calls:
                shown = call_id[:64] if isinstance(call_id, str) else call_id
                raise BadRequest(f"'{at}': tool_result for tool_use_id {shown!r}, but no earlier assistant tool_use has "
                                 "that id", param=f"{at}.tool_use_id")
            tool_messages.append({"role": "tool", "tool_call_id": call_id, "content": _tool_result_text(block, at)})
        else:
            raise _refuse_block(kind, at)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        user = "\n".join(p["text"] for p in parts) if only_text else parts
        return [*tool_messages, {"role": "user", "content": user}]
    return tool_messages


def _assistant(content: Any, where: str, calls: set[str]) -> dict[str, Any]:
    texts, tool_calls = [], []
    for j, block in enumerate(_blocks(content, where)):
        at, kind = f"{where}[{j}]", block.get("type")
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise BadRequest(f"'{at}': a tool_use block needs a string 'id' and 'name'", param=at)
            if not isinstance(block.get("input", {}), dict):
                raise BadRequest(f"'{at}.input' must be an object", param=f"{at}.input")
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            tool_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            calls.add(call_id)
        else:
            raise _refuse_block(kind, at)
    # chat upstreams take a null content only beside tool calls
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def chat_messages(messages: Any, system: Any) -> list[dict[str, Any]]:
    """`system` and `messages` as chat messages; a tool_result must answer an earlier tool_use."""
    out: list[dict[str, Any]] = []
    if system is not None:
        text = _system_text(system)
        if text:
            out.append({"role": "system", "content": text})
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' is required: a non-empty array of messages", param="messages")
    calls: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            out += _user(message.get("content"), f"{where}.content", calls)
        elif role == "assistant":
            out.append(_assistant(message.get("content"), f"{where}.content", calls))
        else:
            shown = role[:40] if isinstance(role, str) else role
            raise BadRequest(f"'{where}.role' is {shown!r}; expected 'user' or 'assistant' (the system prompt goes in "
                             "'system')", param=f"{where}.role")
    return out


def _system_text(system: Any) -> str:
    """`system` as one text: a string, or text blocks."""
    if isinstance(system, str):
        return system
    texts = []
    for j, block in enumerate(_blocks(system, "system")):
        if block.get("type") != "text":
            raise _refuse_block(block.get("type"), f"system[{j}]")
        texts.append(_text(block, f"system[{j}]"))
    return "\n".join(texts)


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Client tools as chat function tools; Anthropic's server tools are refused by type."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array of tool objects", param="tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        if kind not in ("custom", None):
            shown = kind[:40] if isinstance(kind, str) else "(not an object)"
            raise BadRequest(f"'{where}': server tool {shown!r} is not supported; only client tools with an "
                             "input_schema are (the gateway's own tools run server-side)", param=f"{where}.type")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"'{where}.name' is required", param=f"{where}.name")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise BadRequest(f"'{where}.input_schema' is required and must be an object", param=f"{where}.input_schema")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """(chat `tool_choice`, `parallel_tool_calls` or None) for an Anthropic `tool_choice`."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    parallel = False if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True else None
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise BadRequest("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}",
                     param="tool_choice")
