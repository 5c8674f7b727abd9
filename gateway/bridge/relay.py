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
from collections import OrderedDict
from collections.abc import Callable, Iterator
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

MAX_SESSIONS = 256
"""Bridge sessions a relay remembers (a caller holds at most `sessionsPerCaller` open at once)."""
LIST_CHANGED = (types.ToolListChangedNotification, types.ResourceListChangedNotification, types.PromptListChangedNotification)


def session_id_of(ctx: Downstream) -> str | None:
    """The caller's `Mcp-Session-Id` on the Bridge (None for a stateless request)."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def _declared(ctx: Downstream, capability: types.ClientCapabilities) -> bool:
    try:
        return bool(ctx.session.check_client_capability(capability)) and bool(ctx.session.can_send_request)
    except Exception:  # a request without a back-channel (stateless 2026-07-28)
        return False


class Relay:
    """Routes what one upstream session sends to the caller's request in flight on it."""

    def __init__(
        self, label: str, on_list_changed: Callable[[], None] | None = None, alive: Callable[[str], bool] | None = None
    ) -> None:
        """`alive(session_id)`: does a Bridge session still exist (what ended is forgotten)."""
        self.label = label
        self._serving: list[Downstream] = []
        self._on_list_changed = on_list_changed
        self._alive = alive if alive is not None else (lambda session_id: True)
        self._sessions: OrderedDict[str, Any] = OrderedDict()
        """The caller's Bridge sessions that used the upstream session: id -> their `ServerSession`."""
        self._subscribed: dict[str, set[str]] = {}
        """Resource URI -> ids of the caller's Bridge sessions subscribed to it."""

    @property
    def subscriptions(self) -> list[str]:
        """URIs some Bridge session of the caller is subscribed to (the upstream session must stay)."""
        return list(self._subscribed)

    def attach(self, ctx: Downstream | None) -> None:
        """Remember the Bridge session behind `ctx` (what is sent outside a call goes to it)."""
        session_id = session_id_of(ctx) if ctx is not None else None
        if ctx is None or session_id is None:
            return
        if session_id not in self._sessions:
            self.prune()
        self._sessions[session_id] = ctx.session
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > MAX_SESSIONS:
            self._drop(next(iter(self._sessions)))

    def subscribe(self, ctx: Downstream, uri: str, on: bool) -> bool:
        """Note a Bridge session's (un)subscription; True when the connection must be told (an
        unsubscription only once no other session of the caller wants the resource)."""
        self.attach(ctx)
        session_id = session_id_of(ctx)
        if session_id is None:
            return True
        if on:
            self._subscribed.setdefault(uri, set()).add(session_id)
            return True
        subscribers = self._subscribed.get(uri, set())
        subscribers.discard(session_id)
        if subscribers:
            return False
        self._subscribed.pop(uri, None)
        return True

    def prune(self) -> None:
        """Forget the Bridge sessions that ended (deleted by their client, evicted, expired), and
        their subscriptions."""
        for session_id in [s for s in self._sessions if not self._alive(s)]:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        for uri in [u for u, ids in self._subscribed.items() if session_id in ids]:
            self._subscribed[uri].discard(session_id)
            if not self._subscribed[uri]:
                del self._subscribed[uri]

    async def _notified(self, message: Any) -> None:
        """A notification the connection sent on the upstream session (outside progress and logs)."""
        if isinstance(message, types.ResourceUpdatedNotification):
            targets = self._subscribed.get(str(message.params.uri), set())
        elif isinstance(message, LIST_CHANGED):
            if self._on_list_changed is not None:
                self._on_list_changed()
            self.prune()
            targets = set(self._sessions)
        else:
            return  # progress and logs come through their callbacks; transport errors end the session
        for session_id in list(targets):
            session = self._sessions.get(session_id)
            if session is None:
                continue
            try:
                await session.send_notification(message)
            except Exception as exc:  # the caller's session is gone: forget it and its subscriptions
                log.info("relay %s: a Bridge session is gone (%s); forgotten", self.label, type(exc).__name__)
                self._drop(session_id)

    @contextlib.contextmanager
    def serving(self, ctx: Downstream | None) -> Iterator[None]:
        """Register the Bridge request `ctx` while its upstream call runs."""
        if ctx is None:
            yield
            return
        self.attach(ctx)
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
            "message_handler": self._notified,
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
            log.info("relay %s: %s refused: %s", self.label, what, "no call in flight" if ctx is None else "the caller did not declare it")
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
