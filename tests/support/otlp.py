"""A real OTLP/HTTP trace receiver for tests (O3): `POST /v1/traces` with an
`ExportTraceServiceRequest` protobuf body, decoded with the opentelemetry-proto package (what a
collector does), and the spans kept as plain `ReceivedSpan` values.

`with otlp_receiver() as receiver: ... receiver.endpoint ... receiver.wait_for(predicate)`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.http_server import serve
from tests.support.waiting import wait_until

SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, decoded. Ids are lowercase hex, as in a `traceparent`."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    """0 unset, 1 ok, 2 error."""
    service: str


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


@dataclass
class OtlpReceiver:
    """What the receiver got: every span, every request's headers."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    endpoint: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def _traces(self, request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        received = []
        for resource_spans in message.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        name=span.name, kind=SPAN_KINDS.get(span.kind, str(span.kind)), trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                        attributes={kv.key: _value(kv.value) for kv in span.attributes}, status_code=span.status.code,
                        service=str(resource.get("service.name", "")),
                    ))
        with self.lock:
            self.spans.extend(received)
            self.headers.append(dict(request.headers))
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0) -> list[ReceivedSpan]:
        """The spans once `predicate(spans)` holds; AssertionError after `timeout` seconds."""
        assert wait_until(lambda: predicate(self.snapshot()), timeout), f"spans received: {[s.name for s in self.snapshot()]}"
        return self.snapshot()


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver served on a loopback port; `endpoint` is its traces URL."""
    receiver = OtlpReceiver()
    with serve(receiver.app()) as server:
        receiver.endpoint = server.url + "/v1/traces"
        yield receiver
