"""The worst-case model: an OpenAI-compatible upstream that does the user's task and obeys every injection.

For the current case it knows the user task's ground-truth calls and answer and, in an attack
case, the injection task's calls, answer and goal. Its state comes only from the request's
`messages` (the gateway sends its whole history every turn):

- the plan is the user task's calls in order; the first tool result that carries the injection
  (its goal, compared on letters and digits only, so YAML's line folding and quoting do not hide
  it) inserts the injection task's calls right after the call that returned it, once;
- each turn issues the next planned call not yet issued, one per turn, matched by position
  (whatever the last result was: a held or failed call is not retried);
- then it answers with the user task's expected output, plus the injection task's if it obeyed;
- a turn whose last user message starts with `confirm ` (a confirmation, see `runner`), or that
  forbids tools (`tool_choice: none`, the gateway's cap), gets that final answer at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agentdojo.functions_runtime import FunctionCall
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def squeeze(text: str) -> str:
    """Lower-case letters and digits only: how the model looks for the injection in tool results."""
    return _NOT_ALNUM.sub("", text.lower())


@dataclass
class Script:
    """What the model knows about the current case."""

    user_calls: list[FunctionCall]
    user_output: str
    injection_calls: list[FunctionCall] = field(default_factory=list)
    injection_output: str = ""
    injection_goal: str | None = None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def decide(script: Script, body: dict[str, Any]) -> tuple[str | None, FunctionCall | None]:
    """(answer text, None) or (None, the next call) for one request body."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    goal = squeeze(script.injection_goal) if script.injection_goal else None
    issued: list[str] = []
    results: dict[str, str] = {}
    answered_with_injection = False
    for message in messages:
        if message.get("role") == "assistant":
            issued += [call.get("id", "") for call in message.get("tool_calls") or []]
            if script.injection_output and script.injection_output in _text(message.get("content")):
                answered_with_injection = True
        elif message.get("role") == "tool":
            results[str(message.get("tool_call_id"))] = _text(message.get("content"))
    plan = list(script.user_calls)
    obeyed = False
    for position, call_id in enumerate(issued):
        if goal and not obeyed and goal in squeeze(results.get(call_id, "")):
            plan[position + 1:position + 1] = script.injection_calls
            obeyed = True
    users = [m for m in messages if m.get("role") == "user"]
    confirming = bool(users) and _text(users[-1].get("content")).startswith("confirm ")
    if len(issued) < len(plan) and not confirming and body.get("tool_choice") != "none":
        return None, plan[len(issued)]
    parts = [script.user_output]
    if (obeyed or answered_with_injection) and script.injection_output:
        parts.append(script.injection_output)
    return "\n".join(part for part in parts if part), None


def offered_name(body: dict[str, Any], function: str) -> str:
    """The name the gateway offers for a server tool: itself, or `<node>__<name>` on a collision."""
    names = [t.get("function", {}).get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
    if function in names:
        return function
    prefixed = [name for name in names if name.endswith("__" + function)]
    return prefixed[0] if len(prefixed) == 1 else function


class ScriptedModel:
    """The upstream's app and its per-case state (one case at a time per model)."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.script: Script | None = None
        self.requests: list[dict[str, Any]] = []
        """The current case's request bodies (for diagnostics)."""
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    def begin(self, script: Script) -> None:
        with self.lock:
            self.script = script
            self.requests = []

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            script = self.script
            self.requests.append(body)
            turn = len(self.requests)
        if script is None:
            return {"role": "assistant", "content": "no case is running"}
        text, call = decide(script, body)
        if call is None:
            return {"role": "assistant", "content": text}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{turn}", "type": "function",
            "function": {"name": offered_name(body, call.function), "arguments": json.dumps(dict(call.args))},
        }]}

    async def _chat(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"error": {"message": "bad upstream key", "type": "auth"}}, status_code=401)
        body = await request.json()
        message = self._message(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        base = {"id": "chatcmpl-agentdojo", "created": int(time.time()), "model": body.get("model")}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "usage": usage,
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(_sse(base, message, finish, usage if include_usage else None),
                                 media_type="text/event-stream")


async def _sse(base: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, int] | None) -> AsyncIterator[str]:
    """The message as chat.completion.chunk events: role, content, tool call (name, then arguments
    in two fragments), the finish, optional usage, `[DONE]`."""
    chunk = {**base, "object": "chat.completion.chunk"}

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return "data: " + json.dumps({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}) + "\n\n"

    yield event({"role": "assistant", "content": ""})
    if message.get("content"):
        yield event({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        yield event({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                     "function": {"name": fn["name"], "arguments": ""}}]})
        half = len(fn["arguments"]) // 2
        for piece in (fn["arguments"][:half], fn["arguments"][half:]):
            yield event({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield event({}, finish)
    if usage is not None:
        yield "data: " + json.dumps({**chunk, "choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"
