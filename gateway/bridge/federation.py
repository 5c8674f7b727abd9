"""The caller's federation: which connections a caller × bridge sees, their tools, and the way back
from a federated name to (connection, upstream tool) (F1–F3)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import mcp_types as types

from gateway.bridge.naming import SEPARATOR, ToolNameMap, federated_name
from gateway.bridge.records import BridgeRecord, ConnectionRecord
from gateway.bridge.store import BridgeStore
from gateway.bridge.tenancy import held_by, visible_by_id
from gateway.bridge.upstream import Upstreams
from gateway.identity import Identity

log = logging.getLogger("toolgate.bridge.federation")

ANONYMOUS_OWNER = "anonymous"

CONNECTIONS_TTL_SECONDS = 1.0
"""How long the connections of a set of owners are reused without asking the store again. A
change made through this process is seen at once (`Upstreams.changes`); one made through another
replica sharing the store, within this long. A name that resolves to nothing is looked up afresh."""
MAX_CACHED_OWNER_SETS = 10_000


def owners_of(identity: Identity) -> tuple[str, ...]:
    """Owner keys a caller acts for: its user id and `org:<org id>`; `anonymous` when auth is off.

    A user id that could pass for another owner key (`org:...`, `anonymous`) is written
    `user:<id>`, which no config owner can be: a user named `org:acme` is not the org."""
    owners = []
    if identity.user_id:
        user = identity.user_id
        owners.append(f"user:{user}" if user.startswith(("org:", "user:")) or user == ANONYMOUS_OWNER else user)
    if identity.org_id:
        owners.append(f"org:{identity.org_id}")
    return tuple(owners) or (ANONYMOUS_OWNER,)


@dataclass(frozen=True)
class CallerScope:
    """Who is calling and through which door: `/mcp` (bridge None) or `/mcp/<bridge id>`."""

    identity: Identity
    owners: tuple[str, ...]
    bridge: BridgeRecord | None = None
    downstream_session: str | None = None
    """The caller's own MCP session id on the Bridge, when it tells callers apart (auth off)."""

    @property
    def name(self) -> str:
        """The audit `scope` field: `federation` or `bridge:<id>` (the id as the caller names it)."""
        return "federation" if self.bridge is None else f"bridge:{self.bridge.id}"

    @property
    def session_key(self) -> str:
        """Whose upstream sessions these are (F15): the user and org; for a caller without a user id
        (an org-only credential, or anonymous) its credential's fingerprint, never the org alone
        (G4), or with no credential at all (auth off) its own session on the Bridge. Two callers
        told apart by any of these never share a key, so never a session."""
        identity = self.identity
        if identity.is_anonymous:
            return f"anonymous|{identity.credential_fp or ''}|{self.downstream_session or ''}"
        if identity.user_id is None:
            return f"credential|{identity.credential_fp or ''}|{identity.org_id or ''}"
        return f"user|{identity.user_id}|{identity.org_id or ''}"

    @property
    def actor_id(self) -> str:
        """The audit actor: the user id (escaped like its owner key), else the org, else `anonymous`.
        A credential that names an org but no user is told apart from the org's other such
        credentials by its fingerprint's first 12 hex digits (`org:acme#1f2e3d4c5b6a`), so records
        say which credential acted and each lists only its own."""
        identity = self.identity
        if identity.user_id is None and identity.org_id is not None and identity.credential_fp:
            return f"{self.owners[0]}#{identity.credential_fp[:12]}"
        return self.owners[0]


def callable_tools(tools: list[types.Tool]) -> list[types.Tool]:
    """The tools a plain `tools/call` can run: one that requires task-augmented execution is not
    listed (the Bridge does not relay tasks), so no listed tool fails for that reason (F14)."""
    return [t for t in tools if t.execution is None or t.execution.task_support != "required"]


@dataclass(frozen=True)
class ResolvedTool:
    """A federated name resolved to the connection and the upstream tool behind it."""

    connection: ConnectionRecord
    upstream_name: str


class Federation:
    """Lists and resolves the tools of the connections a scope can see."""

    def __init__(
        self, store: BridgeStore, upstreams: Upstreams, api_endpoint_allowed: Callable[[str], bool] = lambda url: True
    ) -> None:
        self._store = store
        self._upstreams = upstreams
        self._api_endpoint_allowed = api_endpoint_allowed
        self._owned: dict[tuple[str, ...], tuple[float, int, list[ConnectionRecord]]] = {}
        """Connections by owner set: (when listed, `Upstreams.changes` then, the records)."""
        self._name_maps: dict[tuple[object, str], tuple[list[types.Tool], ToolNameMap]] = {}
        """Per connection and prefix: the tool list a name map was built from, and the map (built
        again only when the connection's listing is new, not on every call)."""

    async def _owned_by(self, owners: tuple[str, ...], fresh: bool) -> tuple[list[ConnectionRecord], bool]:
        """The connections of `owners` and whether they came from the cache (a store query per
        federated call cost a thread hop, or a database round trip, on the call's path)."""
        now, changes = time.monotonic(), self._upstreams.changes
        kept = self._owned.get(owners)
        if not fresh and kept is not None and kept[1] == changes and now - kept[0] < CONNECTIONS_TTL_SECONDS:
            return kept[2], True
        records = await self._store.list_connections(owners)
        if len(self._owned) >= MAX_CACHED_OWNER_SETS:
            self._owned.clear()
        self._owned[owners] = (now, changes, records)
        return records, False

    async def connections(self, scope: CallerScope, *, fresh: bool = False) -> list[ConnectionRecord]:
        """The caller's connections; for a bridge, those of its connections the caller owns. A
        connection made through the REST API whose endpoint the allow-list no longer admits is left out.
        `fresh`: asked of the store now, not reused (CONNECTIONS_TTL_SECONDS)."""
        return (await self._connections(scope, fresh))[0]

    async def _connections(self, scope: CallerScope, fresh: bool) -> tuple[list[ConnectionRecord], bool]:
        owned, cached = await self._owned_by(scope.owners, fresh)
        return self._in_scope(scope, owned), cached

    def _in_scope(self, scope: CallerScope, owned: list[ConnectionRecord]) -> list[ConnectionRecord]:
        """One connection per id (the caller's own shadows the org's); for a bridge, its ids in its
        owner's view (tenancy.py). Then those the allow-list admits."""
        if scope.bridge is None:
            named = list(visible_by_id(owned, scope.owners).values())
        else:
            named = held_by(scope.bridge, owned, scope.owners)
        return [c for c in named if self._admitted(c)]

    def _admitted(self, conn: ConnectionRecord) -> bool:
        if conn.source != "api" or self._api_endpoint_allowed(conn.endpoint):
            return True
        log.warning("connection %s left out: its endpoint is not in apiEndpointAllowList", conn.label)
        return False

    async def connection(self, scope: CallerScope, connection_id: str) -> ConnectionRecord | None:
        """One connection of the scope, by id."""
        return next((c for c in await self.connections(scope) if c.id == connection_id), None)

    async def tools(self, scope: CallerScope) -> list[types.Tool]:
        """Every tool of every connection in scope, renamed `<prefix>__<tool>` (F3, F15); an unreachable
        connection contributes nothing (and is logged) instead of failing the listing. A name two
        connections would both list is listed for neither, and logged naming both."""
        conns = await self.connections(scope)
        listed = await asyncio.gather(*(self._upstreams.list_tools(c) for c in conns), return_exceptions=True)
        named: dict[str, tuple[ConnectionRecord, types.Tool]] = {}
        clashing: set[str] = set()
        for conn, result in zip(conns, listed, strict=True):
            if isinstance(result, BaseException):
                log.warning("connection %s not listed: %s", conn.label, result)
                continue
            seen: set[str] = set()
            for tool in callable_tools(result):
                name = federated_name(conn.name_prefix, tool.name)
                if name in seen:
                    log.warning("connection %s: tool %r maps to %s like an earlier one; skipped", conn.label, tool.name, name)
                    continue
                seen.add(name)
                earlier = named.get(name)
                if earlier is not None:
                    log.warning("tool name %s is listed by connections %s and %s: left out", name, earlier[0].label, conn.label)
                    clashing.add(name)
                    continue
                named[name] = (conn, tool.model_copy(update={"name": name}))
        return [tool for name, (_, tool) in named.items() if name not in clashing]

    async def resolve(self, scope: CallerScope, name: str) -> ResolvedTool | None:
        """The connection and upstream tool behind federated `name`, or None when the scope has none
        (or when two connections would both answer to it). A name no connection of a reused list
        answers to is resolved again on the store's list (a connection just made elsewhere)."""
        connections, cached = await self._connections(scope, fresh=False)
        resolved = await self._resolve_in(connections, name)
        if resolved is None and cached:
            resolved = await self._resolve_in(await self.connections(scope, fresh=True), name)
        return resolved

    def _name_map(self, conn: ConnectionRecord, tools: list[types.Tool]) -> ToolNameMap:
        """The federated names of a connection's listed tools, kept while its listing is the same object."""
        key = (conn.key, conn.name_prefix)
        kept = self._name_maps.get(key)
        if kept is not None and kept[0] is tools:
            return kept[1]
        if len(self._name_maps) >= MAX_CACHED_OWNER_SETS:
            self._name_maps.clear()
        built = ToolNameMap.build(conn.name_prefix, [t.name for t in callable_tools(tools)])
        self._name_maps[key] = (tools, built)
        return built

    async def _resolve_in(self, connections: list[ConnectionRecord], name: str) -> ResolvedTool | None:
        candidates = [c for c in connections if not c.name_prefix or name.startswith(c.name_prefix + SEPARATOR)]
        listed: list[list[types.Tool] | BaseException]
        if len(candidates) == 1:  # the usual case: no task and gather on the call's path
            try:
                listed = [await self._upstreams.list_tools(candidates[0])]
            except Exception as exc:
                listed = [exc]
        else:
            listed = await asyncio.gather(*(self._upstreams.list_tools(c) for c in candidates), return_exceptions=True)
        found: list[ResolvedTool] = []
        failed: list[BaseException] = []
        for conn, tools in zip(candidates, listed, strict=True):
            if isinstance(tools, BaseException):
                failed.append(tools)
                continue
            upstream = self._name_map(conn, tools).upstream(name)
            if upstream is not None:
                found.append(ResolvedTool(conn, upstream))
        if not found and failed:
            raise failed[0]  # the connection that might have had it could not be reached
        return found[0] if len(found) == 1 else None
