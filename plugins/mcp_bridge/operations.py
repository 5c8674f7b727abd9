"""What the bridge asks of a session: list tools, call a tool, read a resource (run in job tasks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp
import mcp_types as types

from plugins.mcp_bridge.connection import McpConnection, sdk_timeout
from plugins.mcp_bridge.content import resource_contents_text
from plugins.mcp_bridge.errors import ResourceUnavailable

MAX_PAGES = 100
"""A paginator that never ends cannot hang a request."""


async def _all_pages(list_page: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated MCP listing (`field` of each page), at most MAX_PAGES pages."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await list_page(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            break
    return items


async def list_tools(connection: McpConnection, client: mcp.Client) -> list[types.Tool]:
    """The server's tools, listed once per session and cached on it."""

    async def fetch() -> list[types.Tool]:
        return await _all_pages(client.list_tools, "tools")

    return await connection.memo("tools", fetch)


def call_tool(name: str, arguments: dict[str, Any], timeout: float) -> Any:
    """An operation that calls `name` with `arguments`; the pool bounds it at `timeout` (B17)."""

    async def operation(connection: McpConnection, client: mcp.Client) -> types.CallToolResult:
        return await client.call_tool(name, arguments, read_timeout_seconds=sdk_timeout(timeout))

    return operation


async def _list_resources(connection: McpConnection, client: mcp.Client) -> list[types.Resource]:
    async def fetch() -> list[types.Resource]:
        return await _all_pages(client.list_resources, "resources")

    return await connection.memo("resources", fetch)


@dataclass(frozen=True)
class ResourceText:
    """A resource read: the URI it resolved to and its text (binary parts reported, B10)."""

    uri: str
    text: str


def read_resource(reference: str) -> Any:
    """An operation that reads the resource named by URI or by its listed name (B10)."""

    async def operation(connection: McpConnection, client: mcp.Client) -> ResourceText:
        capabilities = client.server_capabilities
        if capabilities is None or capabilities.resources is None:
            raise ResourceUnavailable("the MCP server does not offer resources")
        listed = await _list_resources(connection, client)
        match = next((r for r in listed if str(r.uri) == reference), None)
        match = match or next((r for r in listed if r.name == reference), None)
        if match is None and ":" not in reference:
            raise ResourceUnavailable("the MCP server lists no resource with that name or URI")
        uri = str(match.uri) if match is not None else reference
        result = await client.read_resource(uri)
        return ResourceText(uri=uri, text=resource_contents_text(result.contents))

    return operation
