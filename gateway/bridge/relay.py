"""What flows besides results (F14): a connection's progress, log messages, sampling, elicitation
and roots requests reach the caller whose call caused them.

One `Relay` belongs to one pooled upstream session (one caller × one connection). While a call of
that caller runs on the session, the Bridge request serving it is registered (`serving`); what the
connection sends meanwhile goes to that request: progress to its progress token (only when the
caller asked for progress), log messages on its stream, and server requests (sampling,
elicitation, roots) to the caller — when the caller declared the capability, else the connection
gets a JSON-RPC error. Nothing a connection sends can reach another caller: the session, hence the
relay, is the caller's own. Cancellation needs no relay: a caller's cancelled request cancels the
upstream call, and the SDK tells the connection (`notifications/cancelled`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.shared.message import ServerMessageMetadata

from gateway.mcp.target import ClientOptions

log = logging.getLogger("toolgate.bridge.relay")

INVALID_REQUEST = -32600
RELAY_TIMEOUT_SECONDS = 300.0
"""Longest wait for a caller's answer to a relayed sampling or elicitation request."""

Downstream = ServerRequestContext[Any, Any]


def _declared(ctx: Downstream, capability: types.ClientCapabilities) -> bool:
    try:
        return bool(ctx.session.check_client_capability(capability)) and bool(ctx.session.can_send_request)
    except Exception:  # a request without a back-channel (stateless 2026-07-28)
        return False


class Relay:
    """Routes what one upstream session sends to the caller's request in flight on it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._serving: list[Downstream] = []

    @contextlib.contextmanager
    def serving(self, ctx: Downstream | None) -> Iterator[None]:
        """Register the Bridge request `ctx` while its upstream call runs."""
        if ctx is None:
            yield
            return
        self._serving.append(ctx)
        try:
            yield
        finally:
            self._serving.remove(ctx)

    def current(self) -> Downstream | None:
        """The most recent request in flight (the one a server request most likely belongs to)."""
        return self._serving[-1] if self._serving else None

    def options(self) -> ClientOptions:
        """The upstream client's callbacks: declaring them declares the capabilities to the connection."""
        return {
            "sampling_callback": self._sampling,
            "elicitation_callback": self._elicitation,
            "list_roots_callback": self._roots,
            "logging_callback": self._log,
        }

    @staticmethod
    def progress_to(ctx: Downstream | None) -> Any:
        """A progress callback relaying to `ctx` (None when the caller asked for no progress)."""
        meta: dict[str, Any] = dict(ctx.meta or {}) if ctx is not None else {}
        if ctx is None or (meta.get("progress_token") is None and meta.get("progressToken") is None):
            return None

        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        return progress

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        ctx = self.current()
        if ctx is None:
            return  # a log message outside any call of this caller: nobody to give it to
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated as of 2026-07-28, still served before
            await ctx.session.send_log_message(params.level, params.data, params.logger, related_request_id=ctx.request_id)

    async def _ask(self, capability: types.ClientCapabilities, what: str, request: Any, result: Any) -> Any:
        ctx = self.current()
        if ctx is None or not _declared(ctx, capability):
            return types.ErrorData(code=INVALID_REQUEST, message=f"{what} is not supported by the client")
        try:
            return await ctx.session.send_request(
                request, result, request_read_timeout_seconds=RELAY_TIMEOUT_SECONDS,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except MCPError as exc:
            return types.ErrorData(code=exc.code, message=exc.message)
        except Exception as exc:  # the caller went away, answered garbage: the connection gets an error
            log.info("relay %s: %s to the caller failed: %s", self.label, what, type(exc).__name__)
            return types.ErrorData(code=INVALID_REQUEST, message=f"{what} failed at the client")

    async def _sampling(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        return await self._ask(
            types.ClientCapabilities(sampling=types.SamplingCapability()), "sampling",
            types.CreateMessageRequest(params=params), types.CreateMessageResult,
        )

    async def _elicitation(self, context: Any, params: types.ElicitRequestParams) -> Any:
        return await self._ask(
            types.ClientCapabilities(elicitation=types.ElicitationCapability()), "elicitation",
            types.ElicitRequest(params=params), types.ElicitResult,
        )

    async def _roots(self, context: Any) -> Any:
        return await self._ask(
            types.ClientCapabilities(roots=types.RootsCapability()), "roots", types.ListRootsRequest(), types.ListRootsResult,
        )
