"""The Bridge's client side, on the shared MCP client layer (gateway/mcp): its session policy.

- Federated tool calls (outside pipelines) reuse one session per caller × connection, never
  shared between callers, closed when idle; a session the server ended is replaced and the call
  retried once (F15, B16).
- Pipeline nodes open a new session per call (F10); the discovery cache means none of them probes
  the server's protocol again, and the session is closed in the background after the answer.
- A connection's tool list is kept `toolListTtlSeconds` (routing a call needs no I/O).
Every session lives in its own task (`McpConnection`), so a connection dying mid-call never
cancels the Bridge's handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import mcp
import mcp_types as types
from mcp import MCPError
from prometheus_client import CollectorRegistry

from gateway.bridge.gate import outbound
from gateway.bridge.limits import MIB, OverLimit
from gateway.bridge.records import ConnectionRecord, Health, ItemKey, item_label
from gateway.bridge.relay import Downstream, Relay
from gateway.egress import UNUSABLE, EgressPolicy
from gateway.mcp.connection import ClientFactory, McpConnection, Operation
from gateway.mcp.errors import AnswerTooLarge, CallTimeout, describe, session_ended
from gateway.mcp.metrics import PoolMetrics
from gateway.mcp.operations import all_pages, relay_tool_call
from gateway.mcp.pool import SessionPool
from gateway.mcp.target import McpClients, McpTarget
from gateway.bridge.sealing import SealError, Sealer, is_sealed
from gateway.secrets import SecretSet, resolve_secret

log = logging.getLogger("toolgate.bridge.upstream")

T = TypeVar("T")
CALL_TIMEOUT_SECONDS = 30.0
SESSION_IDLE_SECONDS = 300.0


class UpstreamCallFailed(Exception):
    """A connection could not be reached, timed out, or refused; the message names no secret.
    `code` is the JSON-RPC error code the connection answered with, when it answered with one."""

    def __init__(
        self, message: str, code: int | None = None, upstream_message: str | None = None, *, guarded: bool = False,
        timeout: float | None = None,
    ) -> None:
        super().__init__(message)
        self.timeout = timeout
        """The seconds it waited, when the call timed out."""
        self.code = code
        self.upstream_message = upstream_message
        """The connection's own error text (scrubbed), to relay as it is."""
        self.guarded = guarded
        """The connection was made through the REST API: a caller learns only `UNUSABLE` unless the
        connection itself answered with a JSON-RPC error (no port or service oracle, SSRF)."""

    @property
    def reason(self) -> str:
        """Why the call failed, as its caller may read it."""
        return UNUSABLE if self.guarded and self.code is None else str(self)


class ResultTooLarge(UpstreamCallFailed, OverLimit):
    """A connection's answer passed `bridge.limits.resultBytes` and was cut while it was read (the
    rest never reached the Bridge). The words are the Bridge's own, so every caller reads them, also
    of a connection made through the REST API: they tell only that a server already speaking MCP
    answered with more than the bound. A pipeline node fails with them (an `OverLimit`)."""

    def __init__(self, subject: str, limit: int, *, guarded: bool = False) -> None:
        super().__init__(f"{subject} is over the limit of {limit} bytes", guarded=guarded)
        self.limit = limit

    @property
    def reason(self) -> str:
        """Why the call failed: the bound, for every caller."""
        return str(self)


@dataclass(frozen=True)
class Catalog:
    """What a connection offers (F13), listed in one session and kept `toolListTtlSeconds`."""

    capabilities: types.ServerCapabilities
    tools: list[types.Tool] = field(default_factory=list)
    prompts: list[types.Prompt] = field(default_factory=list)
    resources: list[types.Resource] = field(default_factory=list)
    templates: list[types.ResourceTemplate] = field(default_factory=list)


async def _optional(listing: Awaitable[list[T]]) -> list[T]:
    """A listing a server announced but may still refuse (e.g. templates): refused means none."""
    try:
        return await listing
    except MCPError:
        return []


async def fetch_catalog(connection: McpConnection, client: mcp.Client) -> Catalog:
    """List everything the server announced, page by page."""
    caps = client.server_capabilities or types.ServerCapabilities()
    tools = await all_pages(client.list_tools, "tools") if caps.tools is not None else []
    prompts = await _optional(all_pages(client.list_prompts, "prompts")) if caps.prompts is not None else []
    resources: list[types.Resource] = []
    templates: list[types.ResourceTemplate] = []
    if caps.resources is not None:
        resources = await _optional(all_pages(client.list_resources, "resources"))
        templates = await _optional(all_pages(client.list_resource_templates, "resource_templates"))
    return Catalog(caps, tools, prompts, resources, templates)


class Upstreams:
    """Targets, pools and tool lists of the Bridge's connections."""

    def __init__(
        self,
        *,
        base_dir: Path,
        secrets: SecretSet,
        list_ttl: float,
        timeout: float = CALL_TIMEOUT_SECONDS,
        idle_seconds: float = SESSION_IDLE_SECONDS,
        registry: CollectorRegistry | None = None,
        egress: EgressPolicy | None = None,
        sealer: Sealer | None = None,
        result_bytes: int = 4 * MIB,
    ) -> None:
        """`egress` admits connections made through the REST API (default: no internal address);
        `sealer` opens the credentials written through it (sealing.py); `result_bytes` bounds every
        answer read from a connection while it is read (`bridge.limits.resultBytes`, gateway/mcp/bounds.py)."""
        self._sealer = sealer
        self._base_dir = base_dir
        self._secrets = secrets
        self._list_ttl = list_ttl
        self.timeout = timeout
        self._idle = idle_seconds
        self._metrics = PoolMetrics(registry if registry is not None else CollectorRegistry(), "bridge")
        self.clients = McpClients(result_bytes, egress)
        # Every key is a connection's (owner, id), never its id alone: ids are per owner (tenancy.py),
        # so two tenants' `gh` never share a target, a pool (hence a session), a catalog or a relay.
        self._targets: dict[ItemKey, tuple[ConnectionRecord, McpTarget]] = {}
        self._pools: dict[ItemKey, tuple[McpTarget, SessionPool]] = {}
        self._catalogs: dict[ItemKey, tuple[float, McpTarget, Catalog]] = {}
        self._needs_listing: dict[ItemKey, set[str]] = {}
        """Tools per connection whose server wants Mcp-Param headers: listed before each call."""
        self._closing: set[asyncio.Task[None]] = set()
        self._relays: weakref.WeakValueDictionary[tuple[ItemKey, str], Relay] = weakref.WeakValueDictionary()
        """Per pooled session (connection, caller): alive while its session's client holds it."""
        self._subscribing: dict[tuple[ItemKey, str], Relay] = {}
        """Relays with resource subscriptions: kept, and their sessions kept open while idle."""
        self.downstream_alive: Callable[[str], bool] = lambda session_id: True
        """Does a caller's Bridge session still exist (set by the service: the endpoint knows)."""
        self.changes = 0
        """How many times a connection was made, changed or deleted here (`forget`): what is kept
        about which connections exist (federation.py) is stale once this moves."""
        self._health: dict[ItemKey, Health] = {}
        """The last outcome of a listing or call per connection, in this process only (C8)."""

    def health(self, key: ItemKey) -> Health | None:
        """The last outcome of a listing, call or test on the connection here (None: none yet)."""
        return self._health.get(key)

    def _note(self, key: ItemKey, failure: BaseException | None) -> None:
        """Remember how the connection's last operation went: answered (also with an error of its
        own: a JSON-RPC error, an answer over the bound), or not (why, as its caller may read it)."""
        answered = failure is None or (
            isinstance(failure, UpstreamCallFailed) and (failure.code is not None or isinstance(failure, ResultTooLarge)))
        reason = None if answered else failure.reason if isinstance(failure, UpstreamCallFailed) else "the operation failed"
        self._health[key] = Health(answered, time.time(), reason)

    async def close(self) -> None:
        """Close every pooled session (DELETE), wait for background closes, close the HTTP clients."""
        pools, self._pools = [p for _, p in self._pools.values()], {}
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)
        if self._closing:
            await asyncio.wait(set(self._closing))
        await self.clients.close()

    def forget(self, key: ItemKey) -> None:
        """Drop what is known about a connection (after it was made, changed or deleted); its sessions close."""
        self.changes += 1
        self._health.pop(key, None)
        self._catalogs.pop(key, None)
        self._needs_listing.pop(key, None)
        known = self._targets.pop(key, None)
        if known is not None:
            self.clients.forget(known[1])
        pooled = self._pools.pop(key, None)
        if pooled is not None:
            self._in_background(pooled[1].close())

    def target(self, conn: ConnectionRecord) -> McpTarget:
        """The layer's target for a connection; the secret is resolved once per record."""
        known = self._targets.get(conn.key)
        if known is not None and known[0] == conn:
            return known[1]
        if known is not None:
            self.forget(conn.key)
        auth = None
        guarded = conn.source == "api"  # a caller's endpoint: admitted on every connect (SSRF, egress.py)
        if conn.auth_header_name and conn.auth_secret:
            try:
                auth = (conn.auth_header_name, self._credential(conn.auth_secret))
            except Exception:  # a missing variable or file: the call fails, the reference is not shown
                raise UpstreamCallFailed(f"connection {conn.id}: its credential could not be resolved", guarded=guarded) from None
        target = McpTarget(label=conn.label, endpoint=conn.endpoint, auth_header=auth, timeout=self.timeout, guarded=guarded)
        self._targets[conn.key] = (conn, target)
        return target

    def _credential(self, stored: str) -> str:
        """A connection's credential: an operator's reference, or a value written once and sealed."""
        if not is_sealed(stored):
            return resolve_secret(stored, self._base_dir, self._secrets)
        if self._sealer is None:
            raise SealError("bridge.secretKey is not set")
        return self._sealer.open(stored)

    def sessions_open(self, key: ItemKey) -> int:
        """Pooled sessions of a connection (owner, id) open now (all callers)."""
        pooled = self._pools.get(key)
        return pooled[1].size if pooled is not None else 0

    async def catalog(self, conn: ConnectionRecord, *, fresh: bool = False) -> Catalog:
        """What the connection offers, reused for `toolListTtlSeconds` (`fresh`: listed now);
        scrubbed of every secret the gateway holds (a server may echo its credential in a description)."""
        try:
            target = self.target(conn)
        except UpstreamCallFailed as exc:
            self._note(conn.key, exc)
            raise
        cached = self._catalogs.get(conn.key)
        now = time.monotonic()
        if not fresh and cached is not None and cached[1] is target and now - cached[0] < self._list_ttl:
            return cached[2]
        try:
            listed = await self._fresh(target, fetch_catalog, f"list {conn.id}", f"the listing of connection {conn.id}")
        except UpstreamCallFailed as exc:
            self._note(conn.key, exc)
            raise
        self._note(conn.key, None)
        catalog = self._scrubbed(listed)
        self._catalogs[conn.key] = (now, target, catalog)
        return catalog

    def _scrubbed(self, catalog: Catalog) -> Catalog:
        scrub = self._secrets.scrub_model
        return Catalog(
            scrub(catalog.capabilities), [scrub(t) for t in catalog.tools], [scrub(p) for p in catalog.prompts],
            [scrub(r) for r in catalog.resources], [scrub(t) for t in catalog.templates],
        )

    def known_tools(self, conn: ConnectionRecord) -> list[types.Tool] | None:
        """The connection's tools as last listed here, without any I/O (None: never listed, or
        forgotten since it changed)."""
        cached = self._catalogs.get(conn.key)
        return cached[2].tools if cached is not None else None

    async def list_tools(self, conn: ConnectionRecord, *, fresh: bool = False) -> list[types.Tool]:
        """The connection's tools, reused for `toolListTtlSeconds` (`fresh`: listed now)."""
        return (await self.catalog(conn, fresh=fresh)).tools

    async def call_tool(self, conn: ConnectionRecord, tool: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Call `tool` on a new session (a pipeline node, F10); raises `UpstreamCallFailed`."""
        try:
            target = self.target(conn)
            operation = relay_tool_call(tool, dict(arguments), self.timeout, self._needs_listing.setdefault(conn.key, set()))
            result = await self._fresh(target, operation, f"call {tool} on {conn.id}", f"the result of {tool}")
        except UpstreamCallFailed as exc:
            self._note(conn.key, exc)
            raise
        self._note(conn.key, None)
        return result

    async def call_tool_as(
        self, caller: str, conn: ConnectionRecord, tool: str, arguments: dict[str, object], downstream: Downstream | None = None
    ) -> types.CallToolResult:
        """Call `tool` on the caller's own pooled session of `conn` (F15), relaying what the connection
        sends meanwhile to the Bridge request `downstream` (F14); raises `UpstreamCallFailed`."""
        operation = relay_tool_call(
            tool, dict(arguments), self.timeout, self._needs_listing.setdefault(conn.key, set()), Relay.progress_to(downstream)
        )
        return await self.run_as(caller, conn, operation, f"call {tool} on {conn.id}", downstream, f"the result of {tool}")

    async def run_as(
        self, caller: str, conn: ConnectionRecord, operation: Operation[T], what: str, downstream: Downstream | None = None,
        answer: str | None = None,
    ) -> T:
        """Run `operation` on the caller's own pooled session of `conn` (F15), within one of the
        caller's outbound slots (gate.py); raises `UpstreamCallFailed` (`ResultTooLarge`, naming
        `answer`, past the answer bound). Opening or replacing the session admits a REST-made
        connection's endpoint again (`McpClients.session`, SSRF)."""
        try:
            target = self.target(conn)
        except UpstreamCallFailed as exc:
            self._note(conn.key, exc)
            raise
        pool = self._pool(conn.key, target)
        relay = self._relay(conn.key, caller)
        try:
            with relay.serving(downstream):
                done = await outbound(pool.run(caller, "", operation))
        except Exception as exc:
            failure = self._failure(target, what, exc, answer or f"the answer of connection {conn.id}")
            self._note(conn.key, failure)
            raise failure from exc
        self._note(conn.key, None)
        return done

    def _relay(self, key: ItemKey, caller: str) -> Relay:
        relay = self._relays.get((key, caller))
        if relay is None:
            relay = Relay(
                item_label(key), on_list_changed=lambda: self._catalogs.pop(key, None),
                alive=lambda session_id: self.downstream_alive(session_id),
            )
            self._relays[(key, caller)] = relay
        return relay

    def subscription(self, caller: str, conn: ConnectionRecord, downstream: Downstream, uri: str, on: bool) -> bool:
        """Note that the caller's Bridge session behind `downstream` (un)subscribed to `uri` of
        `conn`; True when the connection must be told. While any subscription lasts, the caller's
        session of the connection is kept open (idle or not), and a replacement session (B16)
        subscribes again."""
        key = (conn.key, caller)
        relay = self._relay(*key)
        tell = relay.subscribe(downstream, uri, on)
        if relay.subscriptions:
            self._subscribing[key] = relay
        else:
            self._subscribing.pop(key, None)
        return tell

    def _caller_factory(self, key: ItemKey, target: McpTarget) -> Callable[[str], ClientFactory]:
        """Sessions of one caller's slot declare the relay's callbacks (the connection's requests go
        to that caller); a session opened while the caller holds subscriptions renews them."""

        def factory_for(slot: str) -> ClientFactory:
            relay = self._relay(key, SessionPool.slot_key(slot) or slot)
            opened = self.clients.factory(target, relay.options)
            uris = relay.subscriptions
            if not uris:
                return opened

            @contextlib.asynccontextmanager
            async def resubscribed() -> AsyncIterator[mcp.Client]:
                async with opened() as client:
                    for uri in uris:
                        try:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")  # subscriptions: deprecated as of 2026-07-28
                                await client.subscribe_resource(uri)
                        except Exception as exc:  # the server refuses it now: the caller sees no updates for it
                            log.info("connection %s: resubscribing a resource failed: %s", item_label(key), describe(exc))
                    yield client

            return resubscribed

        return factory_for

    def _kept_open(self, connection: ItemKey) -> Callable[[str], bool]:
        """Whether a slot's session stays open while idle: while a live Bridge session of its caller
        is subscribed to something (an ended one's subscriptions end with it)."""

        def keep(slot: str) -> bool:
            key = (connection, SessionPool.slot_key(slot) or slot)
            relay = self._subscribing.get(key)
            if relay is None:
                return False
            relay.prune()
            if relay.subscriptions:
                return True
            del self._subscribing[key]
            return False

        return keep

    def _pool(self, key: ItemKey, target: McpTarget) -> SessionPool:
        pooled = self._pools.get(key)
        if pooled is not None and pooled[0] is target:
            return pooled[1]
        if pooled is not None:
            self._in_background(pooled[1].close())
        pool = SessionPool(
            self.clients.factory(target), server=target.label, timeout=self.timeout, idle_seconds=self._idle,
            metrics=self._metrics, factory_for=self._caller_factory(key, target),
            keep=self._kept_open(key),
        )
        pool.start()
        self._pools[key] = (target, pool)
        return pool

    async def _fresh(self, target: McpTarget, operation: Operation[T], what: str, answer: str) -> T:
        """Open a session, run one operation, close the session after answering; all within one of
        the caller's outbound slots (gate.py). `answer` names what a `ResultTooLarge` is about."""
        connection = McpConnection(self.clients.factory(target), f"{target.label}/once")

        async def once() -> T:
            await connection.open(self.timeout)
            return await connection.run(operation, self.timeout)

        try:
            return await outbound(once())
        except Exception as exc:
            raise self._failure(target, what, exc, answer) from exc
        finally:
            self._in_background(connection.close(min(self.timeout, 10.0)))

    def _failure(self, target: McpTarget, what: str, exc: BaseException, answer: str) -> UpstreamCallFailed:
        guarded = target.guarded
        if isinstance(exc, AnswerTooLarge):
            log.info("%s: the answer was cut at %d bytes", what, exc.limit)
            return ResultTooLarge(answer, exc.limit, guarded=guarded)
        if isinstance(exc, CallTimeout):
            return UpstreamCallFailed(f"{what}: timed out after {self.timeout:g}s", guarded=guarded, timeout=self.timeout)
        if isinstance(exc, MCPError) and not session_ended(exc):
            relayed = self._secrets.scrub(exc.message[:500])
            return UpstreamCallFailed(f"{what}: {self._secrets.scrub(describe(exc))}", exc.code, relayed, guarded=guarded)
        return UpstreamCallFailed(f"{what}: {self._secrets.scrub(describe(exc))}", guarded=guarded)

    def _in_background(self, closing: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
