"""`POST /v1/chat/completions` (G1, G2, G4, G6, G7): parse, authenticate, run the chain and loop."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.chain import GatewayTool
from gateway.conversation import CONVERSATION_HEADER, client_conversation_id, conversation_key
from gateway.errors import BadRequest, GatewayError, ModelNotFound, PayloadTooLarge, UpstreamTimeout
from gateway.gateway import Gateway, Route
from gateway.logs import request_id_var
from gateway.loop import TurnIO, run_completion, run_stream
from gateway.plugins import PluginContext

log = logging.getLogger("toolgate.chat")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing anything over `limit` bytes with 413 (without reading it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {int(declared)} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_request(raw: bytes) -> dict[str, Any]:
    """A chat-completion body with the fields the gateway relies on checked (G6)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string", param="model")
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of message objects", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"'messages[{i}]' must be an object with a string 'role'", param=f"messages[{i}]")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        # the tool loop and the stream follow one choice; more would be merged or left unchecked
        raise BadRequest("'n' must be 1: the gateway returns one choice per request", param="n")
    for name in ("stream_options", "metadata"):
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise BadRequest(f"'{name}' must be an object", param=name)
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise BadRequest("'tools' must be an array of tool objects", param="tools")
    return body


def _client_tool_names(body: dict[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


class ChatHandler:
    """One instance per app; `__call__` serves one request."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    def _route(self, model: str) -> Route:
        route = self.gw.routes.get(model)
        if route is None:
            raise ModelNotFound(f"model '{model}' is not served here; GET /v1/models lists the models", param="model")
        return route

    async def __call__(self, request: Request) -> Response:
        started = time.perf_counter()
        identity = self.gw.auth.authenticate(request.headers.get("authorization"))
        body = parse_request(await read_body(request, self.gw.config.server.max_body_bytes))
        route = self._route(body["model"])
        client_id = client_conversation_id(request.headers.get(CONVERSATION_HEADER), body)
        budget = self.gw.config.server.request_timeout_seconds
        ctx = PluginContext(
            identity=identity,
            conversation_key=conversation_key(identity, client_id, body["messages"]),
            request_id=request_id_var.get() or uuid.uuid4().hex,
            route=route.config.model,
            deadline=time.monotonic() + budget,
            inspect=lambda item: route.chain.inspect(ctx, item),
        )
        _strip_conversation_metadata(body)
        status, streaming = 500, False
        try:
            async with asyncio.timeout(_remaining(ctx)):
                upstream_body, table = await self._prepare(route, ctx, body)
                io = self._turn_io(route, ctx, table, frozenset(_client_tool_names(body)))
                if body.get("stream"):
                    client_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    response = await self._stream(route, ctx, upstream_body, io, client_usage, started)
                    streaming = True  # from here on the stream's own cleanup ends the request
                    return response
                completion, stats = await run_completion(upstream_body, io)
            completion["model"] = completion.get("model") or route.config.model
            if stats.tool_calls or stats.cap_reached:
                completion["toolgate"] = stats.summary()
            completion = await route.chain.after_model(ctx, body, completion)
            status = 200
            return Response(json.dumps(completion, ensure_ascii=False), media_type="application/json")
        except TimeoutError:
            status = 504
            raise _over_budget(budget) from None
        except GatewayError as exc:
            status = exc.status
            raise
        finally:
            if not streaming:
                with anyio.CancelScope(shield=True):  # a client that left must not leak sessions
                    await route.chain.end_request(ctx)
                self._count(route, status, started)

    def _count(self, route: Route, status: int, started: float) -> None:
        self.gw.metrics.requests.labels(route.config.model, str(status)).inc()
        self.gw.metrics.latency.labels(route.config.model).observe(time.perf_counter() - started)

    async def _prepare(self, route: Route, ctx: PluginContext, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, GatewayTool]]:
        """Run `before_model`, gather gateway tools, and build the upstream body."""
        body = await route.chain.before_model(ctx, body)
        client_names = _client_tool_names(body)
        table = await route.chain.tools(ctx, client_names)
        upstream_body = {**body, "model": route.upstream_model}
        if table:
            upstream_body["tools"] = list(body.get("tools") or []) + [tool.openai() for tool in table.values()]
        if body.get("stream"):
            upstream_body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return upstream_body, table

    def _turn_io(self, route: Route, ctx: PluginContext, table: dict[str, GatewayTool], client_tools: frozenset[str]) -> TurnIO:
        metrics = self.gw.metrics.upstream_calls
        name = route.upstream.name

        async def complete(turn: dict[str, Any]) -> dict[str, Any]:
            try:
                result = await route.upstream.complete(turn)
            except GatewayError as exc:
                metrics.labels(name, exc.code).inc()
                raise
            metrics.labels(name, "ok").inc()
            return result

        async def stream(turn: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
            try:
                async for batch in route.upstream.stream(turn):
                    yield batch
            except GatewayError as exc:
                metrics.labels(name, exc.code).inc()
                raise
            metrics.labels(name, "ok").inc()

        async def call_tool(exposed: str, arguments: str) -> str:
            return await route.chain.call_tool(ctx, table[exposed], arguments)

        return TurnIO(complete, stream, call_tool, frozenset(table), route.chain.max_tool_calls,
                      client_tools, route.chain.offers_tools)

    async def _stream(
        self, route: Route, ctx: PluginContext, upstream_body: dict[str, Any], io: TurnIO, include_usage: bool, started: float
    ) -> Response:
        chunks = run_stream(upstream_body, io, include_usage)
        first = await chunks.__anext__()  # errors before the first byte keep their HTTP status
        outcome = {"status": 200}

        async def sse() -> AsyncIterator[bytes]:
            try:
                yield _events(first)
                while True:  # the request's deadline bounds the whole stream, not just its first byte
                    try:
                        async with asyncio.timeout(_remaining(ctx)):
                            batch = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise _over_budget(self.gw.config.server.request_timeout_seconds) from None
                    yield _events(batch)
            except GatewayError as exc:
                outcome["status"] = exc.status
                log.warning("stream failed after start: %s", self.gw.secrets.scrub(exc.message), extra={"status": exc.status})
                yield b"data: " + self.gw.secrets.scrub(json.dumps(exc.body(), ensure_ascii=False)).encode() + b"\n\n"
            except (asyncio.CancelledError, GeneratorExit):
                outcome["status"] = 499  # the client went away; its upstream stream is closed in cleanup
                raise
            except Exception:
                outcome["status"] = 500
                log.exception("stream failed after start")
                body = {"error": {"message": f"internal error (request id {ctx.request_id})", "type": "server_error", "code": "internal_error", "param": None}}
                yield b"data: " + json.dumps(body).encode() + b"\n\n"

        async def cleanup() -> None:
            await chunks.aclose()
            await route.chain.end_request(ctx)
            self._count(route, outcome["status"], started)

        return _CleanStream(sse(), cleanup)


def _over_budget(budget: float) -> UpstreamTimeout:
    return UpstreamTimeout(f"the request took longer than server.request_timeout_seconds ({budget:g}s)")


def _remaining(ctx: PluginContext) -> float:
    """Seconds left of the request's budget (`ctx.deadline`, on `time.monotonic()`)."""
    return max(ctx.deadline - time.monotonic(), 0.0)


def _events(batch: list[dict[str, Any]]) -> bytes:
    """One write for a batch of chunks; the batch that ends the response carries `[DONE]`."""
    data = b"".join(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n" for chunk in batch)
    if any("toolgate" in chunk for chunk in batch):  # only the finishing chunk carries it
        data += b"data: [DONE]\n\n"
    return data


class _CleanStream(StreamingResponse):
    """An SSE response whose cleanup (close the upstream stream, end the request in every plugin,
    count it) runs exactly once, even when the client leaves before the body is read."""

    def __init__(self, content: AsyncIterator[bytes], cleanup: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"cache-control": "no-cache"})
        self._cleanup = cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._cleanup()


def _strip_conversation_metadata(body: dict[str, Any]) -> None:
    """`metadata.conversation_id` is the gateway's (G4); upstreams that reject `metadata`
    without `store` must not see it."""
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and "conversation_id" in metadata:
        rest = {k: v for k, v in metadata.items() if k != "conversation_id"}
        if rest:
            body["metadata"] = rest
        else:
            del body["metadata"]
