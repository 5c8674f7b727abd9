"""Responses `input` items, `tools` and `tool_choice` as chat messages, tools and tool choice (A1)."""

from __future__ import annotations

import json
from typing import Any

from gateway.api.params import check_image_url
from gateway.errors import BadRequest

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
"""Message roles the Responses API takes, and the chat role each becomes."""

DROPPED_ITEMS = frozenset({"reasoning"})
"""Input items with no chat equivalent that carry nothing the model must see again: left out."""

STORED_ITEMS = frozenset({"item_reference"})


def _text_of(content: Any, where: str, allowed: frozenset[str]) -> str:
    """The text of a content list made only of `allowed` text-part types."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or an array of content parts", param=where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed or not isinstance(part.get("text"), str):
            shown = kind[:40] if isinstance(kind, str) else type(part).__name__
            raise BadRequest(f"'{where}[{j}]' of type {shown!r} is not supported here; expected "
                             f"{' or '.join(sorted(allowed))} parts with a 'text'", param=f"{where}[{j}]")
        texts.append(part["text"])
    return "".join(texts)


def _user_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"'{where}' must be a string or an array of content parts", param=where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}[{j}]"
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            check_image_url(part["image_url"], f"{at}.image_url")
            image = {"url": part["image_url"], **({"detail": part["detail"]} if part.get("detail") in ("low", "high", "auto") else {})}
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_image":
            raise BadRequest(f"'{at}': only images given by 'image_url' are supported (no file_id)", param=at)
        else:
            shown = kind[:40] if isinstance(kind, str) else type(part).__name__
            raise BadRequest(f"'{at}' of type {shown!r} is not supported; expected input_text or input_image", param=at)
    return parts


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        shown = role[:40] if isinstance(role, str) else role
        raise BadRequest(f"'{where}.role' is {shown!r}; expected one of {', '.join(ROLES)}", param=f"{where}.role")
    content = item.get("content")
    if role == "user":
        return {"role": "user", "content": _user_content(content, f"{where}.content")}
    if role == "assistant":
        return {"role": "assistant", "content": _text_of(content, f"{where}.content", frozenset({"output_text", "input_text"}))}
    return {"role": ROLES[role], "content": _text_of(content, f"{where}.content", frozenset({"input_text"}))}


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"'{where}.{key}' is required and must be a non-empty string", param=f"{where}.{key}")
    return value


def chat_messages(input_: Any, instructions: Any) -> list[dict[str, Any]]:
    """The chat messages for `instructions` and `input`; every function_call_output must follow
    its function_call (the call the model made, by `call_id`)."""
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("'instructions' must be a string", param="instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(input_, str):
        return [*messages, {"role": "user", "content": input_}]
    if not isinstance(input_, list) or not input_:
        raise BadRequest("'input' is required: a string or a non-empty array of input items", param="input")
    calls: set[str] = set()
    for i, item in enumerate(input_):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"'{where}' must be an object", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call_id, name = _string(item, "call_id", where), _string(item, "name", where)
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                raise BadRequest(f"'{where}.arguments' must be a string of JSON", param=f"{where}.arguments")
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one assistant turn, several calls
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            calls.add(call_id)
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            if call_id not in calls:
                raise BadRequest(f"'{where}' answers call_id {call_id[:64]!r}, but no function_call item with that "
                                 "call_id comes before it", param=f"{where}.call_id")
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output, f"{where}.output", frozenset({"input_text", "output_text"}))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind in DROPPED_ITEMS:
            continue
        elif kind in STORED_ITEMS:
            raise BadRequest(f"'{where}' of type {kind!r} is not supported: the gateway stores no items; send the item itself",
                             param=f"{where}.type", code="unsupported_parameter")
        else:
            shown = kind[:40] if isinstance(kind, str) else json.dumps(kind)[:40]
            raise BadRequest(f"'{where}' of type {shown!r} is not supported; expected message, function_call or "
                             "function_call_output", param=f"{where}.type")
    if not any(m["role"] != "system" for m in messages):
        raise BadRequest("'input' holds no message for the model", param="input")
    return messages


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools as chat tools; built-in tools (web_search, file_search, mcp, …) are refused."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array of tool objects", param="tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            shown = kind[:40] if isinstance(kind, str) else "(no type)"
            raise BadRequest(f"'tools[{i}]': built-in tool {shown!r} is not supported; only function tools are "
                             "(the gateway's own tools run server-side)", param=f"tools[{i}].type", code="unsupported_parameter")
        name = _string(tool, "name", f"tools[{i}]")
        fn: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """`auto`/`none`/`required`, or one function by name."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}",
                     param="tool_choice", code="unsupported_parameter")
