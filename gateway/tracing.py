"""OpenTelemetry traces (O3): one trace per request, exported over OTLP/HTTP, off by default.

`build_tracing(config, ...)` returns None when `telemetry.enabled` is false: no SDK object is
made and the SDK is not even imported. Instrumentation points call `span(...)`, which reads the
request's `Tracing` from a context variable set by `TracingMiddleware`; with tracing off that
variable is never set and `span` hands back one shared no-op object (no allocation, no SDK call).

Each app gets its own `TracerProvider` (never the process-global one: tests run several apps in
one process, and importing this module changes nothing); it is shut down, flushing what is left,
in the app's lifespan. By default no attribute carries message text, tool arguments or results,
or a secret: spans name models, tools, servers, verdicts and counts only (`capture_content`
adds tool arguments and results, scrubbed of the secrets the gateway resolved).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.secrets import SecretRef, SecretSet, resolve_secret

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from gateway.upstream.base import Upstream


class ExportHeader(BaseModel):
    """One header sent with each export; its value by reference (it is usually a credential)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9-]+$", description="the header's name")
    value: SecretRef = Field(description="env:NAME or file:PATH")


class TelemetryConfig(BaseModel):
    """`telemetry:` — OpenTelemetry traces exported over OTLP/HTTP (protobuf)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="export traces; off: no tracing objects exist and spans cost nothing")
    otlp_endpoint: str = Field(
        default="http://127.0.0.1:4318/v1/traces", pattern=r"^https?://",
        description="the collector's OTLP/HTTP traces URL (protobuf), e.g. http://collector:4318/v1/traces",
    )
    headers: list[ExportHeader] = Field(
        default_factory=list, description="headers sent with each export (`name`, `value` by env:/file: reference), e.g. an API key",
    )
    service_name: str = Field(default="toolgate", min_length=1, description="`service.name` of the exported spans")
    sample_ratio: float = Field(
        default=1.0, ge=0.0, le=1.0,
        description="share of new traces kept; a request continuing a client's trace follows the client's sampling decision",
    )
    capture_content: bool = Field(
        default=False, description="add MCP tool arguments and results to spans (scrubbed of secrets); default: no message"
        " text, tool arguments or results in any attribute",
    )
    export_timeout_seconds: float = Field(default=10.0, gt=0, description="longest wait for one export to the collector")


class Tracing:
    """One app's tracer provider, its tracer and the W3C propagator."""

    def __init__(self, provider: TracerProvider, propagator: TraceContextTextMapPropagator, capture_content: bool,
                 scrub: Callable[[str], str]) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("toolgate")
        self.propagator = propagator
        self.capture_content = capture_content
        self.scrub = scrub

    async def inject_headers(self, request: Any) -> None:
        """httpx2 request hook: the current span's `traceparent` on an outgoing request (upstreams)."""
        if _active.get() is self:
            self.propagator.inject(request.headers)

    async def shutdown(self) -> None:
        """Flush and stop the exporter thread, off the event loop (an export may take seconds)."""
        await asyncio.to_thread(self.provider.shutdown)


_active: ContextVar[Tracing | None] = ContextVar("toolgate_tracing", default=None)
"""The tracing of the app serving this request; set by `TracingMiddleware` only."""


def build_tracing(config: TelemetryConfig, base_dir: Path, secrets: SecretSet) -> Tracing | None:
    """The app's tracing, or None when `telemetry.enabled` is false (nothing built or imported)."""
    if not config.enabled:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    headers = {header.name: resolve_secret(header.value, base_dir, secrets) for header in config.headers}
    exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint, headers=headers, timeout=config.export_timeout_seconds)
    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name}),
        sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider, TraceContextTextMapPropagator(), config.capture_content, secrets.scrub)


class _NoSpan:
    """What `span` yields with tracing off: one shared object that ignores everything."""

    def __enter__(self) -> "_NoSpan":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


def span(name: str, attributes: dict[str, Any] | None = None, *, client: bool = False) -> Any:
    """A context manager around a child span of the current one (`client`: kind CLIENT), which
    it yields; with tracing off, the shared no-op `NO_SPAN`. An exception ends the span with
    status ERROR and `error.type` (its code or class name), never its message."""
    tracing = _active.get()
    if tracing is None:
        return NO_SPAN
    return _span(tracing, name, attributes, client)


@contextmanager
def _span(tracing: Tracing, name: str, attributes: dict[str, Any] | None, client: bool) -> Iterator[Span]:
    from opentelemetry.trace import SpanKind

    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracing.tracer.start_as_current_span(
        name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            mark_error(current, exc)
            raise


def mark_error(current: Any, exc: BaseException) -> None:
    """Status ERROR and `error.type` on `current`: the gateway's error code or the class name."""
    from opentelemetry.trace import Status, StatusCode

    current.set_attribute("error.type", str(getattr(exc, "code", None) or type(exc).__name__))
    current.set_status(Status(StatusCode.ERROR))


def content(value: Any) -> str | None:
    """`value` as JSON text for a span attribute when `capture_content` is on (scrubbed of
    secrets, at most 4 KiB); None otherwise, so the attribute is left out."""
    tracing = _active.get()
    if tracing is None or not tracing.capture_content:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_plain)
    return tracing.scrub(text)[:4096]


def _plain(value: Any) -> Any:
    """JSON for what `json` cannot write itself (MCP content blocks are pydantic models)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


TRACED_PREFIXES = ("/v1/", "/chat/", "/responses", "/mcp", "/api/", "/console")
"""Requests that get a server span; probes and /metrics do not."""


class TracingMiddleware:
    """Pure ASGI (safe for streaming): one SERVER span per request, continuing the client's W3C
    `traceparent`; the span covers the whole response, a streamed one included."""

    def __init__(self, app: ASGIApp, tracing: Tracing, routes: list[Any]) -> None:
        """`routes`: the app's route list (the live list: routes added later count too), which
        names the span by its route template rather than its path (low cardinality)."""
        self.app = app
        self.tracing = tracing
        self.routes = routes

    def _template(self, scope: Scope) -> str | None:
        from starlette.routing import Match

        for route in self.routes:
            if route.matches(scope)[0] is Match.FULL:
                path = getattr(route, "path", None)
                return path if isinstance(path, str) else None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(TRACED_PREFIXES):
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in (b"traceparent", b"tracestate")}
        parent = self.tracing.propagator.extract(carrier) if carrier else None
        method = scope["method"]
        template = self._template(scope)
        attributes = {"http.request.method": method, "url.path": scope["path"]}
        if template is not None:
            attributes["http.route"] = template
        token = _active.set(self.tracing)
        with self.tracing.tracer.start_as_current_span(
            f"{method} {template or scope['path']}", context=parent, kind=SpanKind.SERVER, record_exception=False,
            set_status_on_exception=False, attributes=attributes,
        ) as server:

            async def send_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    server.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        server.set_status(Status(StatusCode.ERROR))
                        server.set_attribute("error.type", str(status))
                await send(message)

            try:
                await self.app(scope, receive, send_status)
            except BaseException as exc:
                mark_error(server, exc)
                raise
            finally:
                _active.reset(token)


GEN_AI_PROVIDER = "openai"
"""`gen_ai.provider.name` of every upstream: the gateway speaks the OpenAI chat API to them."""


class TracedUpstream:
    """An `Upstream` whose every call is a CLIENT span `chat {model}` (GenAI semantic conventions):
    request and response model, token usage, finish reasons, `error.type`. Wrapped around each
    upstream only when tracing is on; the request carries the span's `traceparent` (the HTTP
    client's request hook)."""

    def __init__(self, inner: Upstream) -> None:
        self.inner = inner
        self.name = inner.name

    def _attributes(self, body: dict[str, Any]) -> dict[str, Any]:
        model = str(body.get("model") or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": GEN_AI_PROVIDER, "gen_ai.request.model": model,
            "toolgate.upstream": self.name,
        }
        for key, attribute in (("max_tokens", "gen_ai.request.max_tokens"), ("temperature", "gen_ai.request.temperature"),
                               ("top_p", "gen_ai.request.top_p")):
            if isinstance(body.get(key), int | float) and not isinstance(body.get(key), bool):
                attributes[attribute] = body[key]
        return attributes

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        attributes = self._attributes(body)
        with span(f"chat {attributes['gen_ai.request.model']}", attributes, client=True) as current:
            result = await self.inner.complete(body)
            _record_response(current, result, [c.get("finish_reason") for c in result.get("choices") or [] if isinstance(c, dict)])
            return result

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        tracing = _active.get()
        if tracing is None:
            async for batch in self.inner.stream(body):
                yield batch
            return
        from opentelemetry.trace import SpanKind, use_span

        attributes = self._attributes(body)
        # Not made current across `yield`: the consumer may close this generator from another
        # context. It is current only while the inner stream runs (which sends the request).
        current = tracing.tracer.start_span(f"chat {attributes['gen_ai.request.model']}", kind=SpanKind.CLIENT, attributes=attributes)
        finish: list[Any] = []
        last: dict[str, Any] = {}
        batches = self.inner.stream(body).__aiter__()
        try:
            while True:
                with use_span(current, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                    try:
                        batch = await batches.__anext__()
                    except StopAsyncIteration:
                        break
                for chunk in batch:
                    if chunk.get("model") or chunk.get("usage"):
                        last = {"model": chunk.get("model") or last.get("model"), "id": chunk.get("id") or last.get("id"),
                                "usage": chunk.get("usage") or last.get("usage")}
                    finish.extend(c.get("finish_reason") for c in chunk.get("choices") or [] if isinstance(c, dict))
                yield batch
            _record_response(current, last, finish)
        except BaseException as exc:
            mark_error(current, exc)
            raise
        finally:
            current.end()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _record_response(current: Any, result: dict[str, Any], finish: list[Any]) -> None:
    """The GenAI response attributes of one model call (no message text)."""
    if not current.is_recording():
        return
    if isinstance(result.get("model"), str):
        current.set_attribute("gen_ai.response.model", result["model"])
    if isinstance(result.get("id"), str):
        current.set_attribute("gen_ai.response.id", result["id"])
    reasons = [r for r in finish if isinstance(r, str)]
    if reasons:
        current.set_attribute("gen_ai.response.finish_reasons", reasons)
    usage = result.get("usage")
    if isinstance(usage, dict):
        for key, attribute in (("prompt_tokens", "gen_ai.usage.input_tokens"), ("completion_tokens", "gen_ai.usage.output_tokens")):
            if isinstance(usage.get(key), int):
                current.set_attribute(attribute, usage[key])


def mcp_call_span(method: str, target: str | None, server: str, arguments: Any = None) -> Any:
    """A CLIENT span for one MCP request (MCP semantic conventions: `{mcp.method.name} {target}`):
    method, tool name and server; with `capture_content`, the arguments."""
    if _active.get() is None:
        return NO_SPAN
    attributes: dict[str, Any] = {"mcp.method.name": method, "toolgate.mcp.server": server}
    if target is not None and method == "tools/call":
        attributes["gen_ai.tool.name"] = target
        attributes["gen_ai.operation.name"] = "execute_tool"
    captured = content(arguments) if arguments is not None else None
    if captured is not None:
        attributes["gen_ai.tool.call.arguments"] = captured
    return span(f"{method} {target}" if target else method, attributes, client=True)


def record_tool_result(current: Any, is_error: bool, result: Any = None) -> None:
    """An MCP tool call's outcome on its span: `error.type` `tool_error` when the server said the
    call failed; with `capture_content`, the result."""
    if not current.is_recording():
        return
    if is_error:
        from opentelemetry.trace import Status, StatusCode

        current.set_attribute("error.type", "tool_error")
        current.set_status(Status(StatusCode.ERROR))
    captured = content(result) if result is not None else None
    if captured is not None:
        current.set_attribute("gen_ai.tool.call.result", captured)
