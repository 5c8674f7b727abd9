"""The request engine (G1, G2, G4, G6, G7, A1, A2): one path for every client dialect.

Authenticate, read and translate the body (gateway.api), pick the route, run the chain and the
tool loop, and answer in the client's dialect: JSON, or server-sent events of the final turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.accounting import RECORD_KEY, RequestRecord
from gateway.answer import AnswerStream, finish_completion
from gateway.api.body import parse_object, read_body, require_json
from gateway.api.dialect import CAP_HEADER, Dialect, StreamEncoder, Translation
from gateway.auth import authorization_of
from gateway.chain import GatewayTool
from gateway.conversation import CONVERSATION_HEADER, client_conversation_id, conversation_key
from gateway.errors import GatewayError, ModelNotFound, UpstreamTimeout, error_response, internal_error
from gateway.gateway import Gateway, Route
from gateway.json_bytes import json_bytes
from gateway.limits.gate import ADMISSION_KEY, UNLIMITED
from gateway.logs import request_id_var
from gateway.loop import Ending, LoopStats, TurnIO, run_completion, run_stream
from gateway.plugins import PluginContext
from gateway.provenance import Provenance
from gateway.upstream.deployments import CALL_NOTE, CallNote

log = logging.getLogger("toolgate.chat")
T = TypeVar("T")


def _client_tool_names(body: dict[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


class ChatHandler:
    """One instance per app; `serve(request, dialect)` answers one request."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    def _route(self, model: str) -> Route:
        route = self.gw.routes.get(model)
        if route is None:
            raise ModelNotFound(f"model '{model}' is not served here; GET /v1/models lists the models", param="model")
        return route

    async def serve(self, request: Request, dialect: Dialect) -> Response:
        """Answer `request` in `dialect`; every outcome, refusals included, is counted once (A4)."""
        started = time.perf_counter()
        record = RequestRecord(api=dialect.name)
        request.scope[RECORD_KEY] = record
        streaming = False
        try:
            response = await self._serve(request, dialect, record, started)
            streaming = isinstance(response, _CleanStream)
            admission = request.scope.get(ADMISSION_KEY, UNLIMITED)
            response.headers.update(admission.headers)  # x-ratelimit-* when a limit applies (O2)
            if isinstance(response, _CleanStream):
                response.then(lambda: admission.end_of(record))
            return response
        except GatewayError as exc:
            record.status = exc.status
            if exc.status >= 500:
                log.warning("request failed: %s", self.gw.secrets.scrub(exc.message), extra={"status": exc.status, "code": exc.code})
            return error_response(exc, self.gw.secrets.scrub, dialect.error_body)
        finally:
            if not streaming:  # a stream counts itself when it ends
                record.finish(self.gw.metrics, time.perf_counter() - started)
                request.scope.get(ADMISSION_KEY, UNLIMITED).end_soon(record)  # charge tokens and spend, free its slots (O2)

    async def _serve(self, request: Request, dialect: Dialect, record: RequestRecord, started: float) -> Response:
        authorization_of(request.headers)  # two or more Authorization headers: 401, whichever the dialect reads
        credential = dialect.credential(request.headers)
        if credential is None and self.gw.auth.mode != "none":
            raise self.gw.auth.refused(f"missing credential: send {dialect.credential_headers}", request.url.path)
        identity = await self.gw.auth.authenticate(credential, request.url.path)
        record.user = identity.user_id
        require_json(request.headers)  # 415: a web page could send text/plain without a CORS preflight
        translation = dialect.parse(parse_object(await read_body(request, self.gw.config.server.max_body_bytes)), request.headers)
        body = translation.chat
        route = self._route(body["model"])
        record.route = route.config.model
        request.scope[ADMISSION_KEY] = await self.gw.limits.admit(identity, route.config.model, route.upstream_model)  # O2: 429 here
        client_id = client_conversation_id(request.headers.get(CONVERSATION_HEADER), body)
        budget = self.gw.config.server.request_timeout_seconds
        ctx = PluginContext(
            identity=identity,
            conversation_key=conversation_key(identity, client_id, body["messages"]),
            request_id=request_id_var.get() or uuid.uuid4().hex,
            route=route.config.model,
            deadline=time.monotonic() + budget,
            inspect=lambda item: route.chain.inspect(ctx, item),
            provenance=Provenance.from_messages(body["messages"]),
        )
        _strip_conversation_metadata(body)
        streaming = False
        try:
            async with asyncio.timeout(_remaining(ctx)):
                upstream_body, table = await self._prepare(route, ctx, body)
                note = CallNote()
                io = self._turn_io(route, ctx, table, frozenset(_client_tool_names(body)), note)
                if body.get("stream"):
                    response = await self._stream(route, ctx, upstream_body, io, translation, record, started, note)
                    streaming = True  # from here on the stream's own cleanup ends the request
                    return response
                completion, stats = await run_completion(upstream_body, io)
            record.take_usage(completion.get("usage"), stats.tool_calls)
            record.deployment = note.deployment
            completion["model"] = completion.get("model") or route.config.model
            if stats.tool_calls or stats.cap_reached:
                completion["toolgate"] = stats.summary()
            completion = await route.chain.after_model(ctx, body, completion)
            completion = finish_completion(completion, ctx.held)
            record.status = 200
            headers = {CAP_HEADER: "reached"} if stats.cap_reached else None  # the cap, without reading the body
            return Response(json_bytes(translation.render(completion)), media_type="application/json",
                            headers=headers)
        except TimeoutError:
            raise _over_budget(budget) from None
        finally:
            if not streaming:
                with anyio.CancelScope(shield=True):  # a client that left must not leak sessions
                    await route.chain.end_request(ctx)

    async def _prepare(self, route: Route, ctx: PluginContext, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, GatewayTool]]:
        """Run `before_model`, gather gateway tools, and build the upstream body."""
        said = body
        body = await route.chain.before_model(ctx, body)
        body = await route.chain.confirmed(ctx, body, said)
        client_names = _client_tool_names(body)
        table = await route.chain.tools(ctx, client_names)
        upstream_body = {**body, "model": route.upstream_model}
        if table:
            upstream_body["tools"] = list(body.get("tools") or []) + [tool.openai() for tool in table.values()]
        if body.get("stream"):
            upstream_body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return upstream_body, table

    def _turn_io(
        self, route: Route, ctx: PluginContext, table: dict[str, GatewayTool], client_tools: frozenset[str], note: CallNote,
    ) -> TurnIO:
        """The loop's I/O. Every upstream call carries the request's `note` (O1: whether its tool
        calls ran, which deployment answered); the route's deployments count each call."""

        async def complete(turn: dict[str, Any]) -> dict[str, Any]:
            CALL_NOTE.set(note)
            return await route.upstream.complete(turn)

        async def stream(turn: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
            CALL_NOTE.set(note)
            async for batch in route.upstream.stream(turn):
                yield batch

        async def call_tool(exposed: str, arguments: str) -> str:
            note.tools_ran = True
            return await route.chain.call_tool(ctx, table[exposed], arguments)

        async def check_client_calls(calls: list[dict[str, Any]]) -> dict[str, str]:
            return await route.chain.check_client_calls(ctx, calls)

        return TurnIO(complete, stream, call_tool, frozenset(table), route.chain.max_tool_calls,
                      client_tools, route.chain.offers_tools, check_client_calls)

    async def _stream(
        self, route: Route, ctx: PluginContext, upstream_body: dict[str, Any], io: TurnIO,
        translation: Translation, record: RequestRecord, started: float, note: CallNote,
    ) -> Response:
        stats = LoopStats()
        chunks = run_stream(upstream_body, io, translation.include_usage, stats)
        encoder = translation.encoder()
        answer = AnswerStream(route.chain.answer_filters(ctx), ctx.held)
        first = await chunks.__anext__()  # errors before the first byte keep their HTTP status
        record.status = 200
        scrub = self.gw.secrets.scrub

        ended = False
        streamed = 0  # characters of answer sent, for `estimate_usage` when the client leaves

        def write(batch: list[dict[str, Any]]) -> bytes:
            nonlocal ended, streamed
            batch = answer.batch(batch)
            streamed += answer_chars(batch)
            if isinstance(batch, Ending):  # the stream's end goes out in the same write
                ended = True
                return encoder.batch(batch) + encoder.end()
            return encoder.batch(batch)

        async def sse() -> AsyncIterator[bytes]:
            deadline = _Deadline(ctx)  # the request's deadline bounds the whole stream, not just its first byte
            try:
                yield write(first)
                while True:
                    try:
                        batch = await deadline.bound(chunks.__anext__())
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise _over_budget(self.gw.config.server.request_timeout_seconds) from None
                    yield write(batch)
                if not ended:
                    yield encoder.end()
            except GatewayError as exc:
                record.status = exc.status
                log.warning("stream failed after start: %s", scrub(exc.message), extra={"status": exc.status})
                yield _scrubbed(encoder, exc, scrub)
            except (asyncio.CancelledError, GeneratorExit):
                record.status = 499  # the client went away; its upstream stream is closed in cleanup
                raise
            except Exception:
                record.status = 500
                log.exception("stream failed after start")
                yield encoder.error(internal_error(ctx.request_id))
            finally:
                deadline.cancel()

        async def cleanup() -> None:
            await chunks.aclose()
            await route.chain.end_request(ctx)
            record.take_usage(stats.usage, stats.tool_calls)
            if record.status == 499:  # the client left: the usage chunk may never have come (O2)
                record.estimate_usage(upstream_body.get("messages"), streamed)
            record.deployment = note.deployment
            record.finish(self.gw.metrics, time.perf_counter() - started)

        return _CleanStream(sse(), cleanup)


def answer_chars(batch: list[dict[str, Any]]) -> int:
    """Characters of content and tool-call arguments in a batch of chat chunks."""
    count = 0
    for chunk in batch:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str):
                count += len(content)
            for call in delta.get("tool_calls") or ():
                arguments = (call.get("function") or {}).get("arguments")
                if isinstance(arguments, str):
                    count += len(arguments)
    return count


def _scrubbed(encoder: StreamEncoder, exc: GatewayError, scrub: Callable[[str], str]) -> bytes:
    return scrub(encoder.error(exc).decode()).encode()


def _over_budget(budget: float) -> UpstreamTimeout:
    return UpstreamTimeout(f"the request took longer than server.request_timeout_seconds ({budget:g}s)")


class _Deadline:
    """`ctx.deadline` over a whole stream with one timer, where `asyncio.timeout` around each
    upstream batch armed and cancelled one per batch (~6 % of a stream's CPU, issue 35). `bound`
    raises `TimeoutError` when the deadline passes while it waits (the waiting is cancelled, as
    `asyncio.timeout` cancels it), or at once when it had passed before."""

    def __init__(self, ctx: PluginContext) -> None:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._expired = False
        self._waiting = False
        self._timer = loop.call_at(loop.time() + _remaining(ctx), self._expire)

    def _expire(self) -> None:
        self._expired = True
        if self._waiting and self._task is not None:
            self._task.cancel()

    async def bound(self, waiting: Awaitable[T]) -> T:
        if self._expired:
            close = getattr(waiting, "close", None)
            if close is not None:
                close()  # the coroutine never started
            raise TimeoutError
        self._waiting = True
        try:
            return await waiting
        except asyncio.CancelledError:
            if self._expired and self._task is not None and self._task.uncancel() == 0:
                raise TimeoutError from None  # ours: the deadline (another cancel, e.g. the client leaving, stays one)
            raise
        finally:
            self._waiting = False

    def cancel(self) -> None:
        self._timer.cancel()


def _remaining(ctx: PluginContext) -> float:
    """Seconds left of the request's budget (`ctx.deadline`, on `time.monotonic()`)."""
    return max(ctx.deadline - time.monotonic(), 0.0)


class _CleanStream(StreamingResponse):
    """An SSE response whose cleanup (close the upstream stream, end the request in every plugin,
    count it) runs exactly once, even when the client leaves before the body is read."""

    def __init__(self, content: AsyncIterator[bytes], cleanup: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"cache-control": "no-cache"})
        self._cleanup = cleanup

    def then(self, more: Callable[[], Awaitable[None]]) -> None:
        """Run `more` after the cleanup, whatever the cleanup raised (the limits' end of the request, O2)."""
        first = self._cleanup

        async def both() -> None:
            try:
                await first()
            finally:
                await more()

        self._cleanup = both

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._send_watching(receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._cleanup()

    async def _send_watching(self, receive: Receive, send: Send) -> None:
        """Stream the body; when the client disconnects, stop it (the body's generator meets the
        cancellation: 499). What Starlette's StreamingResponse does with an anyio task group, with
        one plain task watching `receive` instead (issue 35: the group cost every stream ~5 % of
        the gateway's CPU)."""
        streaming = asyncio.current_task()
        assert streaming is not None
        state = {"done": False, "left": False}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not state["done"]:
                state["left"] = True
                streaming.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await self.stream_response(send)
            state["done"] = True
        except asyncio.CancelledError:
            if not state["left"]:
                raise
            streaming.uncancel()  # the client left: the stream ended, as the task group ended it
        finally:
            watcher.cancel()


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
