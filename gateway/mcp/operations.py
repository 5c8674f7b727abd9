"""What is asked of a session, as operations a `McpConnection` runs in a job task: paginated
listings (cached per session) and tool calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp
import mcp_types as types
from mcp import MCPError
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import HEADER_MISMATCH

from gateway.mcp.connection import McpConnection, Operation
from gateway.mcp.lean import can_lean, lean_call
from gateway.mcp.target import sdk_timeout
from gateway.tracing import mcp_call_span, record_tool_result

MAX_PAGES = 100
"""A paginator that never ends cannot hang a request."""


async def all_pages(list_page: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated MCP listing (`field` of each page), at most MAX_PAGES pages."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await list_page(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


async def list_tools(connection: McpConnection, client: mcp.Client) -> list[types.Tool]:
    """The server's tools, listed once per session and cached on it."""

    async def fetch() -> list[types.Tool]:
        return await all_pages(client.list_tools, "tools")

    return await connection.memo("tools", fetch)


async def list_resources(connection: McpConnection, client: mcp.Client) -> list[types.Resource]:
    """The server's resources, listed once per session and cached on it."""

    async def fetch() -> list[types.Resource]:
        return await all_pages(client.list_resources, "resources")

    return await connection.memo("resources", fetch)


def call_tool(name: str, arguments: dict[str, Any], timeout: float) -> Operation[types.CallToolResult]:
    """An operation that calls `name` with `arguments` through the SDK (which checks the result
    against the tool's output schema); the connection bounds it at `timeout` (B17)."""

    async def operation(connection: McpConnection, client: mcp.Client) -> types.CallToolResult:
        with mcp_call_span("tools/call", name, server_of(connection), arguments) as span:  # O3
            result = await client.call_tool(name, arguments, read_timeout_seconds=sdk_timeout(timeout))
            record_tool_result(span, result.is_error, result.content)
            return result

    return operation


def server_of(connection: McpConnection) -> str:
    """The server a connection talks to: its label without the slot (`server/slot`)."""
    return connection.label.rsplit("/", 1)[0]


def relay_tool_call(
    name: str, arguments: dict[str, Any], timeout: float, needs_listing: set[str], progress: ProgressFnT | None = None
) -> Operation[types.CallToolResult]:
    """An operation for a relay (the Bridge): the call alone, one request. `Client.call_tool` would
    list the tools first on every new session (to validate the output and mirror `Mcp-Param`
    headers); the end client validates what is relayed. A server that answers `HEADER_MISMATCH`
    gets the SDK's list-then-call path, for that tool from then on (`needs_listing` remembers). On
    an HTTP session the call is one POST made without the SDK's transport (lean.py)."""

    async def operation(connection: McpConnection, client: mcp.Client) -> types.CallToolResult:
        with mcp_call_span("tools/call", name, server_of(connection), arguments) as span:  # O3
            result = await relayed(connection, client)
            record_tool_result(span, result.is_error, result.content)
            return result

    async def relayed(connection: McpConnection, client: mcp.Client) -> types.CallToolResult:
        if name not in needs_listing:
            try:
                if can_lean(client, connection.watch.lean):
                    assert connection.watch.lean is not None
                    return await lean_call(
                        client, connection.watch.lean, name, arguments, progress, connection.watch.session_id
                    )
                request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
                return await client.session.send_request(
                    request, types.CallToolResult, request_read_timeout_seconds=sdk_timeout(timeout),
                    progress_callback=progress,
                )
            except MCPError as exc:
                if exc.code != HEADER_MISMATCH:
                    raise
            needs_listing.add(name)
        await list_tools(connection, client)
        return await client.call_tool(name, arguments, read_timeout_seconds=sdk_timeout(timeout), progress_callback=progress)

    return operation
