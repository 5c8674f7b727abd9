"""A scripted OpenAI-compatible upstream: tests say what the model answers, turn by turn.

`ScriptedUpstream().app` is a real Starlette app served over loopback (tests/support/http_server).
Each request takes the next `Reply` from the script (or the result of a callable given the
request body); every request body is recorded in `.requests`. Every request must carry the canary
upstream key (`expected_key`, None to accept anything), and no request body may hold the canary:
the model never sees a secret (B4).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support import canary


@dataclass
class Reply:
    """One model turn. `tool_calls` are (name, arguments) pairs; the other fields script faults."""

    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    usage: tuple[int, int] = (10, 5)
    status: int = 200
    error_message: str = "scripted failure"
    raw: bytes | None = None
    hang: bool = False
    cut_stream_after: int | None = None
    hang_stream_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers of an error reply (e.g. `Retry-After` on a 429)."""
    extra_events: list[Any] = field(default_factory=list)
    """Stream only: sent after the first content chunk: a dict as a `data:` event, a string as it is."""

    def message(self, turn: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{turn}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(self.tool_calls)
            ]
        return message


Script = Reply | Callable[[dict[str, Any]], Reply]


class ScriptedUpstream:
    """Serves `/v1/chat/completions` (JSON and SSE) and `/v1/models` from a script."""

    def __init__(self, default: Reply | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: deque[Script] = deque()
        self.default = default or Reply(content="Hello from the scripted model.")
        self.release = threading.Event()
        self.stream_closed = threading.Event()
        self.expected_key: str | None = canary.UPSTREAM_KEY
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ])

    def push(self, *replies: Script) -> None:
        self.script.extend(replies)

    def _next(self, body: dict[str, Any]) -> Reply:
        item = self.script.popleft() if self.script else self.default
        return item(body) if callable(item) else item

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "test"}]})

    async def _chat(self, request: Request) -> Response:
        raw_body = await request.body()
        if self.expected_key is not None:
            canary.check_credential("the scripted upstream", request.headers.get("authorization"), f"Bearer {self.expected_key}", required=True)
        canary.RECORDER.scan("model request", "a request body the scripted upstream received", raw_body)
        body = json.loads(raw_body)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        turn = len(self.requests)
        reply = self._next(body)
        if reply.hang:
            await anyio.to_thread.run_sync(self.release.wait, 60)
        if reply.raw is not None:
            return Response(reply.raw, status_code=reply.status, media_type="application/json")
        if reply.status >= 400:
            return JSONResponse({"error": {"message": reply.error_message, "type": "scripted"}}, status_code=reply.status,
                                headers=reply.headers)
        if body.get("stream"):
            return StreamingResponse(self._sse(body, reply, turn), media_type="text/event-stream")
        prompt, completion = reply.usage
        message = reply.message(turn)
        return JSONResponse({
            "id": f"chatcmpl-scripted-{turn}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })

    async def _sse(self, body: dict[str, Any], reply: Reply, turn: int):  # type: ignore[no-untyped-def]
        base = {"id": f"chatcmpl-scripted-{turn}", "object": "chat.completion.chunk", "created": int(time.time()), "model": body.get("model")}
        events: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
        for word in (reply.content or "").split(" ") if reply.content else []:
            events.append({**base, "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]})
        events[2:2] = reply.extra_events
        for i, call in enumerate(reply.message(turn).get("tool_calls", [])):
            fn = call["function"]
            events.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}]}, "finish_reason": None}]})
            args = fn["arguments"]
            for piece in (args[: len(args) // 2], args[len(args) // 2:]):
                events.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, "finish_reason": None}]})
        events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt, completion = reply.usage
            events.append({**base, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
        try:
            for n, event in enumerate(events):
                if reply.cut_stream_after is not None and n >= reply.cut_stream_after:
                    return
                if reply.hang_stream_after is not None and n == reply.hang_stream_after:
                    await anyio.to_thread.run_sync(self.release.wait, 60, abandon_on_cancel=True)
                yield event if isinstance(event, str) else f"data: {json.dumps(event)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.stream_closed.set()
