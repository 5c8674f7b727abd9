"""The built-in `demo` upstream: a scripted, deterministic model that uses tools (D1).

It lets the demo show the gateway's tool loop with no API key: mcp_bridge running the model's
tool calls, prompt_guard inspecting their results, and the cap (`maxConsecutiveToolCalls`).

- It reads the client's own words of the last user message (what plugins appended after it,
  `## ...` context blocks, is set aside) and splits them into questions (each ending in `?`; a
  text without one is one question).
- For each question it picks the offered tool whose name and description share the most words
  with it (a tool with a free-text parameter such as `query` comes first: it takes the question
  as it is) and calls it, one call per round: `search_docs({"query": <the question>})`. A
  parameter that is not free text gets the term of the tool's description the question names,
  as the description writes it (`get_page({"slug": "prompt-guard"})` for "prompt_guard").
- When every question had its call, or the gateway says `tool_choice: "none"` (the cap was
  reached), it answers from the tool results: which tool it called with which arguments, and
  the result quoted, shortened. With no tool to call, it says so and names the tools offered.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.content import message_text
from gateway.upstream.inspect import usage

QUOTE_CHARS = 300
"""A tool result is quoted up to this many characters."""

FREE_TEXT = frozenset({"query", "q", "question", "search", "text", "prompt", "input", "topic"})
"""Parameter names that take the user's question as it is."""

STOPWORDS = frozenset(
    "the and for are how does what which who whom why when where with you your can could would should this that these "
    "those from into about its it's not all any one was were has have had been being but our out use used using will "
    "there their them they then than also just some such more most very tell show give please me my".split()
)

_WORD = re.compile(r"[a-z0-9]+")
_QUESTION = re.compile(r"[^?]*\?")
_TERM = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


@dataclass(frozen=True)
class Call:
    """A tool call the demo model means to make."""

    tool: str
    arguments: dict[str, str]


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in STOPWORDS]


def _same(a: str, b: str) -> bool:
    """Equal, or one the other's start (`page`/`pages`, `session`/`sessions`)."""
    return a == b or (min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a)))


def own_text(content: Any) -> str:
    """The client's words of a user message: what plugins appended (`## ...` blocks) cut off."""
    text = message_text(content)
    return text.split("\n\n## ", 1)[0].strip()


def questions(text: str) -> list[str]:
    """`text` split into its questions (each ending in `?`, the rest after the last one dropped
    unless there is no `?` at all)."""
    found = [q.strip() for q in _QUESTION.findall(text) if q.strip(" ?\n")]
    return found or ([text.strip()] if text.strip() else [])


def _functions(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools")
    out = []
    for tool in tools if isinstance(tools, list) else []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def _required(fn: dict[str, Any]) -> tuple[list[str], bool]:
    """(the required parameters, are they all strings?)."""
    schema = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    strings = all(isinstance(props.get(r), dict) and props[r].get("type", "string") == "string" for r in required)
    return required, strings


def plan(question: str, functions: list[dict[str, Any]]) -> Call | None:
    """The call that serves `question`, or None when no offered tool shares a word with it."""
    asked = _words(question)
    best: tuple[bool, int, int] | None = None
    chosen: Call | None = None
    for order, fn in enumerate(functions):
        required, strings = _required(fn)
        if not strings:
            continue
        served = _words(f"{fn['name'].replace('_', ' ').replace('-', ' ')} {fn.get('description') or ''}")
        matched = [w for w in asked if any(_same(w, s) for s in served)]
        if not matched:
            continue
        free = any(r in FREE_TEXT for r in required)
        score = (free, len(set(matched)), -order)
        if best is None or score > best:
            best = score
            key = _key(question, fn.get("description") or "") or matched[0]
            chosen = Call(fn["name"], {r: question if r in FREE_TEXT else key for r in required})
    return chosen


def _key(question: str, description: str) -> str | None:
    """A term of the tool's description the question names, as the description writes it
    (`prompt_guard` names `prompt-guard`): the value for a parameter that is not free text."""
    asked = {t.replace("_", "-") for t in _TERM.findall(question.lower())}
    for term in _TERM.findall(description.lower()):
        if term.replace("_", "-") in asked and term not in STOPWORDS and len(term) >= 3:
            return term
    return None


def _since_last_user(messages: list[Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the last user message, the messages after it)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return message, [m for m in messages[index + 1:] if isinstance(m, dict)]
    return None, [m for m in messages if isinstance(m, dict)]


def _results(after: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(tool, arguments, result text) of each tool result after the last user message."""
    calls: dict[str, tuple[str, str]] = {}
    out = []
    for message in after:
        for call in message.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
            calls[str(call.get("id"))] = (str(fn.get("name")), str(fn.get("arguments") or "{}"))
        if message.get("role") == "tool":
            name, arguments = calls.get(str(message.get("tool_call_id")), ("(unknown tool)", "{}"))
            out.append((name, arguments, message_text(message.get("content"))))
    return out


def _quote(text: str) -> str:
    """`text` as a markdown quote, its lines kept, cut after `QUOTE_CHARS` characters."""
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    text = "\n".join(line for line in lines if line)
    short = text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS].rstrip() + " …"
    return "\n".join("> " + line for line in short.splitlines())


def _context_titles(content: Any) -> list[str]:
    """The titles of the blocks plugins appended to the user's message (prefetch, resources)."""
    text = message_text(content)
    return re.findall(r"\n\n## (.+)", text)


def decide(body: dict[str, Any]) -> tuple[Call | None, str]:
    """The demo model's turn: a tool call to make, or (None, the answer's text)."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    user, after = _since_last_user(messages)
    asked = questions(own_text(user.get("content"))) if user else []
    functions = _functions(body)
    planned = [call for call in (plan(q, functions) for q in asked) if call is not None]
    results = _results(after)
    if len(results) < len(planned) and body.get("tool_choice") != "none":
        return planned[len(results)], ""
    paragraphs = []
    if results:
        paragraphs += [f"I called `{name}` with {arguments}; it returned:\n{_quote(text)}" for name, arguments, text in results]
        if len(results) < len(planned):
            paragraphs.append(f"I stopped there: the gateway disabled tools (its tool-call cap was reached) before I could "
                              f"make {len(planned) - len(results)} more call(s).")
    elif functions:
        names = ", ".join(f"`{fn['name']}`" for fn in functions)
        paragraphs.append(f"None of the tools offered ({names}) shares a word with your message, so I called none. "
                          "Ask for something one of them serves, e.g. \"Search the toolgate docs: how are sessions pooled?\"")
    else:
        paragraphs.append("No tools were offered, so I called none. (I am the demo model: I call a tool the request offers "
                          "when your message asks for what it serves, then answer from its result.)")
    titles = _context_titles(user.get("content")) if user else []
    if titles:
        paragraphs.append("Context the gateway added to your message: " + "; ".join(titles) + ".")
    return None, "\n\n".join(paragraphs) + "\n"


def _tool_call(call: Call) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.tool, "arguments": json.dumps(call.arguments)}}


class DemoUpstream:
    """A scripted tool-using model (see the module's text); streaming and not."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        call, text = decide(body)
        if call is not None:
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [_tool_call(call)]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": text}, "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model")),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage(body, text or (message["tool_calls"][0]["function"]["arguments"])),
        }

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        call, text = decide(body)
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": str(body.get("model"))}
        batch = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
        if call is not None:
            tool_call = _tool_call(call)
            batch.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **tool_call}]}, "finish_reason": None}]})
            batch.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            text = tool_call["function"]["arguments"]
        else:
            for line in text.splitlines(keepends=True):
                batch.append({**base, "choices": [{"index": 0, "delta": {"content": line}, "finish_reason": None}]})
            batch.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        batch.append({**base, "choices": [], "usage": usage(body, text)})
        yield batch

    async def aclose(self) -> None:
        """Nothing to close."""
