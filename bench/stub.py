"""A minimal OpenAI-compatible upstream for benchmarks: pre-serialised answers, no work.

Run: python -m uvicorn --factory bench.stub:create_app --port PORT
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

COMPLETION = json.dumps({
    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the stub."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
}).encode()


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


STREAM = [_chunk({"role": "assistant", "content": ""})] + [_chunk({"content": w}) for w in ("Hello ", "from ", "the ", "stub.")] + [
    _chunk({}, "stop"),
    b'data: {"id":"chatcmpl-stub","object":"chat.completion.chunk","created":0,"model":"stub","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}\n\n',
    b"data: [DONE]\n\n",
]


async def chat(request: Request) -> Response:
    body = await request.body()
    if b'"stream": true' in body or b'"stream":true' in body:
        async def events():  # type: ignore[no-untyped-def]
            for event in STREAM:
                yield event
        return StreamingResponse(events(), media_type="text/event-stream")
    return Response(COMPLETION, media_type="application/json")


async def health(request: Request) -> Response:
    return Response(b"ok")


def create_app() -> Starlette:
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
