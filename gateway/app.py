"""`create_app(config)`: the FastAPI app, built once from a validated Config (no module-level app)."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
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

from gateway.chat import ChatHandler
from gateway.config import Config, load_config
from gateway.errors import GatewayError, Unauthorized
from gateway.gateway import Gateway
from gateway.identity import Identity
from gateway.logs import request_id_var

log = logging.getLogger("toolgate.http")


class RequestIdMiddleware:
    """Pure ASGI (safe for streaming): sets the request id, echoes `x-request-id`, logs one line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if incoming and len(incoming) <= 128 and incoming.isprintable() else uuid.uuid4().hex
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
            await self.app(scope, receive, send_with_id)
        except Exception:  # a bug: answer with the envelope and the request id, log the traceback
            log.exception("unexpected error")
            if not started_response:
                body = json.dumps({"error": {"message": f"internal error (request id {request_id})", "type": "server_error",
                                             "code": "internal_error", "param": None}}).encode()
                await send_with_id({"type": "http.response.start", "status": 500,
                                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                await send_with_id({"type": "http.response.body", "body": body})
        finally:
            if scope["path"] not in ("/healthz", "/readyz", "/metrics"):
                log.info(
                    "%s %s %s", scope["method"], scope["path"], status,
                    extra={"status": status, "duration_ms": round((time.perf_counter() - started) * 1000, 2)},
                )
            request_id_var.reset(token)


def _error_response(gateway: Gateway, exc: GatewayError) -> JSONResponse:
    body = json.loads(gateway.secrets.scrub(json.dumps(exc.body())))
    headers = {"www-authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse(body, status_code=exc.status, headers=headers)


def _install_error_handlers(app: FastAPI, gateway: Gateway) -> None:
    async def gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        if exc.status >= 500:
            log.warning("request failed: %s", gateway.secrets.scrub(exc.message), extra={"status": exc.status, "code": exc.code})
        return _error_response(gateway, exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kinds = {404: "not_found", 405: "method_not_allowed"}
        body = {"error": {"message": f"{request.method} {request.url.path}: {exc.detail}", "type": "invalid_request_error",
                          "code": kinds.get(exc.status_code, "http_error"), "param": None}}
        return JSONResponse(body, status_code=exc.status_code)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        body = {"error": {"message": f"{where}: {first.get('msg')}", "type": "invalid_request_error", "code": "invalid_request", "param": where}}
        return JSONResponse(body, status_code=400)

    app.add_exception_handler(GatewayError, gateway_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)


def create_app(config: Config) -> FastAPI:
    """Build the gateway for `config`; its lifespan starts plugins, the Bridge and closes clients."""
    gateway = Gateway(config)
    bridge = _bridge_service(gateway)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await gateway.start()
            if bridge is not None:
                await bridge.start()
        except BaseException:  # what did start (plugins, the HTTP client) is closed before failing
            await gateway.stop()
            raise
        gateway.ready = True
        try:
            yield
        finally:
            gateway.ready = False
            if bridge is not None:
                await bridge.stop()
            await gateway.stop()

    app = FastAPI(title="toolgate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gateway
    handler = ChatHandler(gateway)

    async def chat(request: Request) -> Response:
        return await handler(request)

    # Plain Starlette routes on the hot path: FastAPI's dependency solving costs ~0.2 ms a request.
    app.router.routes.append(Route("/v1/chat/completions", chat, methods=["POST"]))
    app.router.routes.append(Route("/chat/completions", chat, methods=["POST"]))

    async def models(request: Request) -> Response:
        gateway.auth.authenticate(request.headers.get("authorization"))
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "toolgate"} for m in gateway.routes]
        return JSONResponse({"object": "list", "data": data})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ok = gateway.ready and bool(gateway.routes)
        return JSONResponse({"status": "ready" if ok else "starting", "routes": len(gateway.routes)}, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.router.routes.append(Route("/v1/models", models, methods=["GET"]))
    app.router.routes.append(Route("/healthz", healthz, methods=["GET"]))
    app.router.routes.append(Route("/readyz", readyz, methods=["GET"]))
    app.router.routes.append(Route("/metrics", metrics, methods=["GET"]))
    if bridge is not None:
        app.router.routes.extend(bridge.routes())
    _install_error_handlers(app, gateway)
    app.add_middleware(RequestIdMiddleware)
    return app


def _bridge_service(gateway: Gateway) -> Any:
    """The Bridge endpoint (F1–F12) when `bridge.enabled`; None otherwise."""
    settings = gateway.config.bridge
    if settings is None or not settings.enabled:
        return None
    if gateway.config.auth.mode == "none" and not settings.allowedHosts:
        # anonymous access: only loopback Host/Origin values, so a web page cannot rebind a name to us
        settings = settings.model_copy(update={"allowedHosts": ["127.0.0.1:*", "localhost:*", "[::1]:*"]})
    from gateway.bridge.service import BridgeService

    async def authenticate(request: Request) -> Identity:
        return gateway.auth.authenticate(request.headers.get("authorization"))

    return BridgeService(
        settings, authenticate=authenticate, http=gateway.http, metrics=gateway.metrics.registry,
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
