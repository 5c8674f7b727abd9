"""Everything else a connection offers, federated (F13): resources, resource templates, prompts and
completions, and the capabilities the Bridge announces to a caller.

Names are per connection like tools: a prompt `greet` of connection `gh` is `gh__greet` (mapped
like a tool name when it must be), a resource or template keeps its URI and its name gets the
prefix (`gh__README.md`). URIs are the resource's own
identity (and what resource links in tool results point at), so they pass unchanged; a read goes to
the connection that lists the URI, else to the one whose template matches it, else to the only
connection offering resources. A URI or name two connections both claim is listed for neither.
Reads, prompts and completions run on the caller's own pooled session (F15). Listings and results
are scrubbed of every secret the gateway holds (listings where they are fetched, `Upstreams.catalog`),
and every outbound operation counts against the caller's outbound slots (gate.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeVar

import mcp
import mcp_types as types
from mcp import MCPError
from pydantic import BaseModel

from gateway.bridge.federation import CallerScope, Federation
from gateway.bridge.gate import CallerGate
from gateway.bridge.limits import BridgeLimits
from gateway.bridge.naming import SEPARATOR, federated_name
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.relay import Downstream
from gateway.bridge.sessions import caller_key
from gateway.bridge.upstream import Catalog, UpstreamCallFailed, Upstreams
from gateway.mcp.connection import McpConnection
from gateway.secrets import SecretSet

log = logging.getLogger("toolgate.bridge.offerings")

T = TypeVar("T")
RESOURCE_NOT_FOUND = -32002
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
MAX_ANNOUNCED = 10_000


def claimed(found: Sequence[tuple[ConnectionRecord, Sequence[T]]], key: Callable[[ConnectionRecord, T], str], what: str) -> dict[str, tuple[ConnectionRecord, T]]:
    """Items by key; a key two connections both claim is dropped (and logged naming both)."""
    named: dict[str, tuple[ConnectionRecord, T]] = {}
    clashing: set[str] = set()
    for conn, items in found:
        for item in items:
            k = key(conn, item)
            earlier = named.get(k)
            if earlier is None:
                named[k] = (conn, item)
            elif earlier[0].key != conn.key:
                log.warning("%s %s is offered by connections %s and %s: left out", what, k, earlier[0].id, conn.id)
                clashing.add(k)
    return {k: v for k, v in named.items() if k not in clashing}


@lru_cache(maxsize=1024)
def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the URIs an RFC 6570 template expands to (loosely)."""
    parts: list[str] = []
    for literal, expression in re.findall(r"([^{]*)(\{[^}]*\})?", template):
        parts.append(re.escape(literal))
        if not expression:
            continue
        operator = expression[1:2]
        if operator in ("+", "#"):
            parts.append(".*")
        elif operator in ("?", "&"):
            parts.append(r"(?:[?&].*)?")
        elif operator == "/":
            parts.append(r"(?:/.*)?")
        else:
            parts.append(r"[^/?#]*")
    return re.compile("".join(parts))


def display_name(prefix: str, name: str) -> str:
    """A resource's or template's name in the federation: `<prefix>__<name>`, otherwise as it is (a
    name to show, not to route by: reads go by URI, so it needs no mapping)."""
    return f"{prefix}{SEPARATOR}{name}" if prefix else name


def _refused(exc: UpstreamCallFailed) -> MCPError:
    """An upstream failure as the JSON-RPC error the caller gets: the connection's own error when it
    answered with one, else an internal error saying why (timeout, unreachable, ended; for a
    connection made through the REST API only that it could not be used)."""
    if exc.code is not None and exc.upstream_message is not None:
        return MCPError(exc.code, exc.upstream_message)
    return MCPError(-32603, exc.reason)


class Offerings:
    """Resources, templates, prompts and completions of a caller's connections (F13)."""

    def __init__(
        self, federation: Federation, upstreams: Upstreams, ttl: float = 30.0, *,
        secrets: SecretSet | None = None, gate: CallerGate | None = None,
    ) -> None:
        self._federation = federation
        self._upstreams = upstreams
        self._ttl = ttl
        self._secrets = secrets if secrets is not None else SecretSet()
        self._gate = gate if gate is not None else CallerGate(BridgeLimits().outboundPerCaller)
        self._announced: OrderedDict[tuple[Any, ...], tuple[float, frozenset[str]]] = OrderedDict()
        """Capabilities per scope, kept like the listings (`toolListTtlSeconds`): every session-less
        request (each 2026-07-28 call) needs them, and a store query per call would cost."""

    async def catalogs(self, scope: CallerScope) -> list[tuple[ConnectionRecord, Catalog]]:
        """The catalogs of the scope's reachable connections (an unreachable one is logged and left out)."""
        conns = await self._federation.connections(scope)  # the bridge's tenant rule applies (tenancy.py)
        with self._gate.caller(caller_key(scope.identity)):
            found = await asyncio.gather(*(self._upstreams.catalog(c) for c in conns), return_exceptions=True)
        out: list[tuple[ConnectionRecord, Catalog]] = []
        for conn, catalog in zip(conns, found, strict=True):
            if isinstance(catalog, BaseException):
                log.warning("connection %s not listed: %s", conn.id, catalog)
            else:
                out.append((conn, catalog))
        return out

    async def capabilities(self, scope: CallerScope) -> frozenset[str]:
        """What to announce: tools always (pipelines), the rest when a connection in scope has it."""
        key = (scope.owners, scope.bridge)
        now = time.monotonic()
        cached = self._announced.get(key)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        kinds = await self._capabilities(scope)
        self._announced[key] = (now, kinds)
        self._announced.move_to_end(key)
        while len(self._announced) > MAX_ANNOUNCED:
            self._announced.popitem(last=False)
        return kinds

    async def _capabilities(self, scope: CallerScope) -> frozenset[str]:
        kinds = {"tools"}
        for _, catalog in await self.catalogs(scope):
            caps = catalog.capabilities
            kinds.update(k for k, v in (("resources", caps.resources), ("prompts", caps.prompts),
                                        ("completions", caps.completions), ("logging", caps.logging)) if v is not None)
        return frozenset(kinds)

    # -- prompts ------------------------------------------------------------------------------

    async def _prompts(self, scope: CallerScope) -> dict[str, tuple[ConnectionRecord, types.Prompt]]:
        found = [(conn, catalog.prompts) for conn, catalog in await self.catalogs(scope)]
        return claimed(found, lambda conn, p: federated_name(conn.name_prefix, p.name), "prompt")

    async def prompts(self, scope: CallerScope) -> list[types.Prompt]:
        """Every prompt in scope, named `<prefix>__<prompt>`."""
        return [p.model_copy(update={"name": name}) for name, (_, p) in (await self._prompts(scope)).items()]

    async def get_prompt(
        self, scope: CallerScope, name: str, arguments: dict[str, str] | None, downstream: Downstream | None = None
    ) -> types.GetPromptResult:
        """The prompt behind federated `name`, from its connection."""
        found = (await self._prompts(scope)).get(name)
        if found is None:
            raise MCPError(INVALID_PARAMS, f"unknown prompt: {name}")
        conn, prompt = found

        async def get(connection: McpConnection, client: mcp.Client) -> types.GetPromptResult:
            return await client.get_prompt(prompt.name, arguments)

        return await self._run(scope, conn, get, f"get prompt {name}", downstream)

    # -- resources ----------------------------------------------------------------------------

    async def _resources(self, catalogs: list[tuple[ConnectionRecord, Catalog]]) -> dict[str, tuple[ConnectionRecord, types.Resource]]:
        return claimed([(c, cat.resources) for c, cat in catalogs], lambda conn, r: str(r.uri), "resource")

    async def resources(self, scope: CallerScope) -> list[types.Resource]:
        """Every resource in scope: its URI as listed, its name prefixed."""
        listed = await self._resources(await self.catalogs(scope))
        return [r.model_copy(update={"name": display_name(c.name_prefix, r.name)}) for c, r in listed.values()]

    async def templates(self, scope: CallerScope) -> list[types.ResourceTemplate]:
        """Every resource template in scope: its URI template as listed, its name prefixed."""
        found = [(c, cat.templates) for c, cat in await self.catalogs(scope)]
        listed = claimed(found, lambda conn, t: t.uri_template, "resource template")
        return [t.model_copy(update={"name": display_name(c.name_prefix, t.name)}) for c, t in listed.values()]

    async def owner_of(self, scope: CallerScope, uri: str) -> ConnectionRecord | None:
        """The connection to read `uri` from (see the module's rule), or None."""
        catalogs = await self.catalogs(scope)
        listed = (await self._resources(catalogs)).get(uri)
        if listed is not None:
            return listed[0]
        matching = [c for c, cat in catalogs if any(template_pattern(t.uri_template).fullmatch(uri) for t in cat.templates)]
        if len(matching) == 1:
            return matching[0]
        offering = [c for c, cat in catalogs if cat.capabilities.resources is not None]
        return offering[0] if len(offering) == 1 and not matching else None

    async def read(self, scope: CallerScope, uri: str, downstream: Downstream | None = None) -> types.ReadResourceResult:
        """Read `uri` from its connection (F13)."""
        conn = await self.owner_of(scope, uri)
        if conn is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")

        async def read(connection: McpConnection, client: mcp.Client) -> types.ReadResourceResult:
            return await client.read_resource(uri)

        return await self._run(scope, conn, read, f"read {uri}", downstream)

    # -- completions --------------------------------------------------------------------------

    async def complete(
        self, scope: CallerScope, params: types.CompleteRequestParams, downstream: Downstream | None = None
    ) -> types.CompleteResult:
        """Completion of a prompt's or a resource template's argument, from the connection behind it."""
        ref: Any = params.ref
        if isinstance(ref, types.PromptReference):
            found = (await self._prompts(scope)).get(ref.name)
            if found is None:
                raise MCPError(INVALID_PARAMS, f"unknown prompt: {ref.name}")
            conn, upstream_ref = found[0], types.PromptReference(type="ref/prompt", name=found[1].name)
        else:
            owners = [c for c, cat in await self.catalogs(scope) if any(t.uri_template == ref.uri for t in cat.templates)]
            owner = owners[0] if len(owners) == 1 else await self.owner_of(scope, ref.uri)
            if owner is None:
                raise MCPError(INVALID_PARAMS, f"unknown resource template: {ref.uri}")
            conn, upstream_ref = owner, ref
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context is not None else None

        async def complete(connection: McpConnection, client: mcp.Client) -> types.CompleteResult:
            return await client.complete(upstream_ref, argument, context)

        return await self._run(scope, conn, complete, "complete", downstream)

    # -- logging and subscriptions (handshake-era features, relayed) ----------------------------

    async def set_level(self, scope: CallerScope, level: types.LoggingLevel) -> types.EmptyResult:
        """`logging/setLevel` on the caller's session of every connection in scope that logs."""
        logging_conns = [c for c, cat in await self.catalogs(scope) if cat.capabilities.logging is not None]

        async def set_level(connection: McpConnection, client: mcp.Client) -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return await client.set_logging_level(level)

        await asyncio.gather(*(self._run(scope, c, set_level, "set the log level") for c in logging_conns))
        return types.EmptyResult()

    async def subscribe(self, scope: CallerScope, uri: str, on: bool, downstream: Downstream | None = None) -> types.EmptyResult:
        """`resources/subscribe` (or unsubscribe) on the caller's session of the connection behind
        `uri`; the connection's `notifications/resources/updated` for it then reach the caller's
        Bridge session that subscribed (relay.py). An unsubscription reaches the connection once no
        other Bridge session of the caller is subscribed to the resource."""
        conn = await self.owner_of(scope, uri)
        if conn is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")

        async def subscription(connection: McpConnection, client: mcp.Client) -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return await (client.subscribe_resource(uri) if on else client.unsubscribe_resource(uri))

        what = "subscribe" if on else "unsubscribe"
        if on:
            await self._run(scope, conn, subscription, what, downstream)
            if downstream is not None:
                self._upstreams.subscription(scope.session_key, conn, downstream, uri, on=True)
        elif downstream is None or self._upstreams.subscription(scope.session_key, conn, downstream, uri, on=False):
            await self._run(scope, conn, subscription, what, downstream)
        return types.EmptyResult()

    async def _run(
        self, scope: CallerScope, conn: ConnectionRecord, operation: Any, what: str, downstream: Downstream | None = None
    ) -> Any:
        try:
            with self._gate.caller(caller_key(scope.identity)):
                result = await self._upstreams.run_as(scope.session_key, conn, operation, what, downstream)
        except UpstreamCallFailed as exc:
            raise _refused(exc) from None
        if getattr(result, "meta", None) is not None:
            result = result.model_copy(update={"meta": None})
        # what a connection sends back may hold a secret (a server echoing its credential): B4
        return self._secrets.scrub_model(result) if isinstance(result, BaseModel) else result
