"""`create_app(config)`: the FastAPI app, built once from a validated Config (no module-level app)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.accounting import RECORD_KEY, RequestRecord
from gateway.api.chat import ChatDialect
from gateway.api.content_type import JsonBodies
from gateway.api.local_hosts import LoopbackOnly
from gateway.api.dialect import Dialect
from gateway.api.messages import MessagesDialect
from gateway.api.responses import ResponsesDialect
from gateway.auth import authorization_of, client_address
from gateway.chat import ChatHandler
from gateway.config import Config, load_config
from gateway.console.oidc import add_oidc_sign_in
from gateway.console.pages import Console, console_for
from gateway.errors import BadRequest, GatewayError, HeadersTooLarge, MethodNotAllowed, ModelNotFound, NotFound, error_response, internal_error
from gateway.gateway import Gateway
from gateway.identity import Identity
from gateway.logs import request_id_var
from gateway.metrics_access import MetricsAccess
from gateway.tracing import TracedUpstream, TracingMiddleware, build_tracing

log = logging.getLogger("toolgate.http")

DIALECT_PATHS: dict[str, Dialect] = {
    "/v1/chat/completions": ChatDialect(), "/chat/completions": ChatDialect(),
    "/v1/responses": ResponsesDialect(), "/responses": ResponsesDialect(), "/v1/messages": MessagesDialect(),
}
"""The model APIs' routes (served by `ChatHandler`, which checks their bodies itself)."""


def new_request_id() -> str:
    """32 random hex digits (`uuid.uuid4().hex` builds a UUID object for the same: ~2 % of a request)."""
    return os.urandom(16).hex()


class RequestIdMiddleware:
    """Pure ASGI (safe for streaming): sets the request id, echoes `x-request-id`, logs one line.
    It also bounds what every route reads: headers over `max_header_bytes` get 431, and a body that
    has not arrived within `body_timeout` seconds ends as a disconnect (the body readers answer 408)."""

    def __init__(self, app: ASGIApp, body_timeout: float = 30.0, max_header_bytes: int = 32 * 1024) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((value for name, value in scope["headers"] if name == b"x-request-id"), b"").decode("latin-1")
        request_id = incoming if incoming and len(incoming) <= 128 and incoming.isprintable() else new_request_id()
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500
        started_response = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status, started_response = message["status"], True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            if sum(len(k) + len(v) for k, v in scope["headers"]) > self.max_header_bytes:
                status = 431
                too_large = HeadersTooLarge(f"request headers are over {self.max_header_bytes} bytes")
                await error_response(too_large, lambda text: text)(scope, receive, send_with_id)
                return
            await self.app(scope, _deadline_receive(receive, self.body_timeout), send_with_id)
        except Exception:  # a bug: answer with the envelope and the request id, log the traceback
            log.exception("unexpected error")
            if not started_response:
                await error_response(internal_error(request_id), lambda text: text)(scope, receive, send_with_id)
        finally:
            if scope["path"] not in ("/healthz", "/readyz", "/metrics"):
                record = scope.get(RECORD_KEY)
                fields = record.fields() if isinstance(record, RequestRecord) else {"status": status}
                log.info(
                    "%s %s %s", scope["method"], scope["path"], fields["status"],
                    extra={**fields, "duration_ms": round((time.perf_counter() - started) * 1000, 2)},
                )
            request_id_var.reset(token)


class ModelApis:
    """Pure ASGI, the innermost of the app's own middleware: a `POST` to a model API's path goes
    straight to `ChatHandler`. The router, FastAPI's exit stack and Starlette's exception
    middleware cost every request a few ASGI layers and nothing these routes use: they answer
    their own errors in their API's shape (`ChatHandler.serve`), and an unexpected exception still
    reaches `RequestIdMiddleware`. Their `Route`s stay registered (another method: 405; tracing
    names spans by them)."""

    def __init__(self, app: ASGIApp, handler: ChatHandler, paths: dict[str, Dialect]) -> None:
        self.app = app
        self.handler = handler
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dialect = self.paths.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if dialect is None:
            await self.app(scope, receive, send)
            return
        response = await self.handler.serve(Request(scope, receive, send), dialect)
        await response(scope, receive, send)


def _deadline_receive(receive: Receive, seconds: float) -> Receive:
    """`receive`, where the body must have arrived `seconds` after the request began: past that,
    the app is told the client disconnected (a slow body cannot hold a worker)."""
    deadline = time.monotonic() + seconds
    body_done = False

    async def bounded() -> Message:
        nonlocal body_done
        if body_done:
            return await receive()
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + max(0.0, deadline - time.monotonic())):
                message = await receive()
        except TimeoutError:
            log.info("request body did not arrive within %gs", seconds)
            return {"type": "http.disconnect"}
        if message["type"] != "http.request" or not message.get("more_body", False):
            body_done = True
        return message

    return bounded


def _install_error_handlers(app: FastAPI, gateway: Gateway) -> None:
    scrub = gateway.secrets.scrub

    async def gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        if exc.status >= 500:
            log.warning("request failed: %s", scrub(exc.message), extra={"status": exc.status, "code": exc.code})
        return error_response(exc, scrub)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: NotFound, 405: MethodNotAllowed}.get(exc.status_code, GatewayError)
        error = kind(f"{request.method} {request.url.path}: {exc.detail}")
        if kind is GatewayError:  # any other status Starlette raises keeps its status
            error.status, error.code = exc.status_code, "http_error"
            error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return error_response(error, scrub)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error_response(BadRequest(f"{where}: {first.get('msg')}", param=where), scrub)

    app.add_exception_handler(GatewayError, gateway_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)


def create_app(config: Config) -> FastAPI:
    """Build the gateway for `config`; its lifespan starts plugins, the Bridge and closes clients."""
    gateway = Gateway(config)
    console = console_for(gateway.auth, gateway.secrets.scrub)
    add_oidc_sign_in(console, gateway)  # C1: sign-in through auth.oauth's issuer when auth.oauth.console is set
    bridge = _bridge_service(gateway, console)
    tracing = build_tracing(config.telemetry, config.base_dir, gateway.secrets)  # None when off (O3)
    if tracing is not None:
        gateway.http.event_hooks["request"].append(tracing.inject_headers)  # traceparent to upstreams
        for served in gateway.routes.values():
            served.upstream = TracedUpstream(served.upstream)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await gateway.start()
            if bridge is not None:
                await bridge.start()
        except BaseException:  # what did start (plugins, the HTTP client) is closed before failing
            try:
                await gateway.stop()
            finally:
                if tracing is not None:
                    await tracing.shutdown()
            raise
        gateway.ready = True
        try:
            yield
        finally:
            gateway.ready = False
            try:
                if bridge is not None:
                    await bridge.stop()
                await gateway.stop()
            finally:  # the spans of the last requests are exported whatever stopping raised
                if tracing is not None:
                    await tracing.shutdown()

    app = FastAPI(title="toolgate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gateway
    handler = ChatHandler(gateway)
    # Plain Starlette routes on the hot path: FastAPI's dependency solving costs ~0.2 ms a request.
    for path, dialect in DIALECT_PATHS.items():
        app.router.routes.append(Route(path, _endpoint(handler, dialect), methods=["POST"]))

    def model_object(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "toolgate"}

    async def models(request: Request) -> Response:
        await gateway.auth.authenticate(authorization_of(request.headers), request.url.path)
        return JSONResponse({"object": "list", "data": [model_object(m) for m in gateway.routes]})

    async def model(request: Request) -> Response:
        await gateway.auth.authenticate(authorization_of(request.headers), request.url.path)
        name = request.path_params["model"]
        if name not in gateway.routes:
            raise ModelNotFound(f"model '{name[:200]}' is not served here; GET /v1/models lists the models", param="model")
        return JSONResponse(model_object(name))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ok = gateway.ready and bool(gateway.routes)
        body: dict[str, Any] = {"status": "ready" if ok else "starting", "routes": len(gateway.routes)}
        if bridge is not None:  # a detail only: a Bridge waiting for its store does not take chat out (O4)
            body["bridge"] = "ready" if bridge.unready is None else gateway.secrets.scrub(bridge.unready.message)
        return JSONResponse(body, status_code=200 if ok else 503)

    async def readyz_bridge(request: Request) -> Response:
        """503 while the Bridge waits for its store (`bridge.storeDownAtStart: serve`), for a check of its own."""
        if bridge is None:
            raise NotFound("/readyz/bridge: the Bridge is not enabled")
        ok = gateway.ready and bridge.unready is None
        detail = "ready" if ok else gateway.secrets.scrub(bridge.unready.message if bridge.unready else "starting")
        return JSONResponse({"status": "ready" if ok else "unavailable", "bridge": detail}, status_code=200 if ok else 503)

    metrics_access = MetricsAccess(config.server, gateway.auth, config.base_dir, gateway.secrets)

    async def metrics(request: Request) -> Response:
        await metrics_access.check(request.headers, request.url.path)  # G9: a credential unless server.metrics_public
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.router.routes.append(Route("/v1/models", models, methods=["GET"]))
    app.router.routes.append(Route("/v1/models/{model:path}", model, methods=["GET"]))

    async def stored_response(request: Request) -> Response:
        raise NotFound(f"{request.url.path}: the gateway stores no responses (send 'store': false or omit it); "
                       "there is nothing to retrieve, list or cancel")

    async def messages_extra(request: Request) -> Response:
        error = NotFound(f"{request.url.path}: not served here; this gateway serves POST /v1/messages only "
                         "(no token counting or batches: it cannot count for its upstream)")
        return error_response(error, gateway.secrets.scrub, MessagesDialect().error_body)

    app.router.routes.append(Route("/v1/responses/{rest:path}", stored_response, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(Route("/v1/messages/{rest:path}", messages_extra, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(Route("/healthz", healthz, methods=["GET"]))
    app.router.routes.append(Route("/readyz", readyz, methods=["GET"]))
    app.router.routes.append(Route("/readyz/bridge", readyz_bridge, methods=["GET"]))
    app.router.routes.append(Route("/metrics", metrics, methods=["GET"]))
    if bridge is not None:
        app.router.routes.extend([*bridge.routes(), *console.routes()])
    if gateway.auth.oauth is not None:  # protected-resource metadata (F16)
        app.router.routes.extend(gateway.auth.oauth.routes(mcp=bridge is not None))
    _install_error_handlers(app, gateway)
    server = config.server
    app.add_middleware(ModelApis, handler=handler, paths=DIALECT_PATHS)  # added first: innermost
    app.add_middleware(JsonBodies, checked=frozenset(DIALECT_PATHS), scrub=gateway.secrets.scrub)  # 415 (G6)
    if config.auth.mode == "none" and not server.allow_remote_without_auth:
        app.add_middleware(LoopbackOnly, scrub=gateway.secrets.scrub)  # DNS rebinding (local_hosts.py)
    app.add_middleware(RequestIdMiddleware, body_timeout=server.body_timeout_seconds, max_header_bytes=server.max_header_bytes)
    if tracing is not None:
        app.add_middleware(TracingMiddleware, tracing=tracing, routes=app.router.routes)  # outermost: the span covers the whole request
    app.state.tracing = tracing
    return app


def _endpoint(handler: ChatHandler, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await handler.serve(request, dialect)

    return endpoint


def _bridge_service(gateway: Gateway, console: Console) -> Any:
    """The Bridge endpoint (F1–F12) when `bridge.enabled`; None otherwise."""
    settings = gateway.config.bridge
    if settings is None or not settings.enabled:
        return None
    from gateway.bridge.service import BridgeService

    async def authenticate(request: Request) -> Identity:
        return await gateway.auth.authenticate(authorization_of(request.headers), request.url.path, client_address(request))

    return BridgeService(
        settings, authenticate=authenticate, api_authenticate=console.authenticator(authenticate), http=gateway.http, metrics=gateway.metrics.registry,
        base_dir=gateway.config.base_dir, secrets=gateway.secrets,
    )


def app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory` / several workers: reads the config path from TOOLGATE_CONFIG."""
    from gateway.logs import configure_logging

    config = load_config(os.environ["TOOLGATE_CONFIG"])
    app = create_app(config)
    # each worker process logs JSON scrubbed of the secrets it resolved, like a single-process serve
    configure_logging(config.server.log_level, app.state.gateway.secrets)
    return app
