"""Calls to the connections' MCP servers: list their tools, call one tool on a fresh session (F10).

Every call opens a session, does one thing and closes it, inside its own task so that a server
dying mid-call (the SDK then cancels the task owning the client) never cancels the caller. The
first connect to a connection probes the protocol (`mode="auto"`); when the server speaks the
stateless 2026-07-28 protocol its discover result is reused so later calls skip the probe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import HEADER_MISMATCH

from gateway.bridge.gate import outbound
from gateway.bridge.records import ConnectionRecord
from gateway.egress import EgressPolicy
from gateway.secrets import SecretSet, resolve_secret

log = logging.getLogger("toolgate.bridge.upstream")

T = TypeVar("T")
CALL_TIMEOUT_SECONDS = 30.0
MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
"""The largest answer read as one streamed event (the SDK's default is 1 MiB; as mcp_bridge)."""


class UpstreamCallFailed(Exception):
    """A connection could not be reached, timed out, or refused; the message names no secret."""


class Upstreams:
    """The Bridge's client side: one `httpx2` client per credentialed connection, the shared one otherwise."""

    def __init__(
        self, http: httpx2.AsyncClient, *, base_dir: Path, secrets: SecretSet, list_ttl: float, timeout: float = CALL_TIMEOUT_SECONDS,
        egress: EgressPolicy | None = None,
    ) -> None:
        self._http = http
        self._base_dir = base_dir
        self._secrets = secrets
        self._list_ttl = list_ttl
        self._egress = egress or EgressPolicy()
        self.timeout = timeout
        self._clients: dict[tuple[str, str, str], httpx2.AsyncClient] = {}
        self._tools: dict[str, tuple[float, str, list[types.Tool]]] = {}
        self._discovered: dict[str, tuple[str, types.DiscoverResult]] = {}
        self._needs_listing: set[tuple[str, str]] = set()
        """(connection, tool) pairs whose server wants Mcp-Param headers: listed before each call."""

    async def close(self) -> None:
        """Close the per-connection clients (the shared one belongs to the caller)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def forget(self, connection_id: str) -> None:
        """Drop what is cached about a connection (after it changed or was deleted)."""
        self._tools.pop(connection_id, None)
        self._discovered.pop(connection_id, None)
        self._needs_listing = {pair for pair in self._needs_listing if pair[0] != connection_id}

    async def list_tools(self, conn: ConnectionRecord) -> list[types.Tool]:
        """The connection's tools, reused for `toolListTtlSeconds`."""
        cached = self._tools.get(conn.id)
        now = time.monotonic()
        if cached is not None and cached[1] == conn.endpoint and now - cached[0] < self._list_ttl:
            return cached[2]

        async def op(client: Client) -> list[types.Tool]:
            tools: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools

        tools = await self._isolated(self._with_session(conn, op), f"list tools of {conn.id}")
        self._tools[conn.id] = (now, conn.endpoint, tools)
        return tools

    async def call_tool(self, conn: ConnectionRecord, tool: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Call `tool` on a fresh session; raises `UpstreamCallFailed` on any transport or protocol failure."""

        async def op(client: Client) -> types.CallToolResult:
            # `Client.call_tool` lists the tools first on every fresh session (to validate the
            # output and mirror Mcp-Param headers): one more round trip per node. The Bridge relays
            # results (the end client validates them), so it sends the call alone and takes the
            # SDK's list-then-call path only when a server insists on Mcp-Param headers.
            if (conn.id, tool) not in self._needs_listing:
                request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
                try:
                    return await client.session.send_request(
                        request, types.CallToolResult, request_read_timeout_seconds=self.timeout
                    )
                except MCPError as exc:
                    if exc.code != HEADER_MISMATCH:
                        raise
                self._needs_listing.add((conn.id, tool))
            await client.list_tools()
            return await client.call_tool(tool, arguments, read_timeout_seconds=self.timeout)

        return await self._isolated(self._with_session(conn, op), f"call {tool} on {conn.id}")

    async def _with_session(self, conn: ConnectionRecord, op: Callable[[Client], Awaitable[T]]) -> T:
        await self._egress.admit_connection(conn.endpoint, conn.source)  # SSRF: on every connect
        http = self._client_for(conn)
        known = self._discovered.get(conn.id)
        transport = streamable_http_client(conn.endpoint, http_client=http, max_sse_event_size=MAX_SSE_EVENT_BYTES)
        if known is not None:
            client = Client(transport, mode=known[0], prior_discover=known[1], cache=None)
        else:
            client = Client(transport, cache=None)
        try:
            async with client:
                discovered = client.session.discover_result
                if known is None and discovered is not None and client.protocol_version is not None:
                    self._discovered[conn.id] = (client.protocol_version, discovered)
                return await op(client)
        except BaseException:
            self._discovered.pop(conn.id, None)
            raise

    async def _isolated(self, coro: Awaitable[T], what: str) -> T:
        task = asyncio.ensure_future(outbound(coro))  # within the caller's outbound slots (gate.py)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            await asyncio.wait({task})
            raise UpstreamCallFailed(f"{what}: timed out after {self.timeout:g}s")
        if task.cancelled():
            raise UpstreamCallFailed(f"{what}: the connection was closed")
        exc = task.exception()
        if exc is not None:
            raise UpstreamCallFailed(f"{what}: {self._secrets.scrub(_describe(exc))}") from exc
        return task.result()

    def _client_for(self, conn: ConnectionRecord) -> httpx2.AsyncClient:
        if conn.source == "api":  # a caller's endpoint: every socket is checked where it opens (SSRF, egress.py)
            if ("", "api", "") not in self._clients:
                self._clients[("", "api", "")] = self._egress.client(self.timeout)
            return self._clients[("", "api", "")]
        if not conn.auth_header_name or not conn.auth_secret:
            return self._http
        key = (conn.id, conn.auth_header_name, conn.auth_secret)
        client = self._clients.get(key)
        if client is None:
            value = resolve_secret(conn.auth_secret, self._base_dir, self._secrets)
            client = httpx2.AsyncClient(
                headers={conn.auth_header_name: value}, timeout=httpx2.Timeout(self.timeout, read=300),
                limits=httpx2.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=2.0),
            )
            self._clients[key] = client
        return client


def _describe(exc: BaseException) -> str:
    """A short, secret-free description of what went wrong (the innermost error's type and message)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
