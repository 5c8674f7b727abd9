"""What mcp_bridge asks of a session beyond the shared operations: read a resource by URI or by
its listed name (B10)."""

from __future__ import annotations

from dataclasses import dataclass

import mcp

from gateway.mcp.connection import McpConnection, Operation
from gateway.mcp.errors import ResourceUnavailable
from gateway.mcp.operations import call_tool, list_resources, list_tools
from plugins.mcp_bridge.content import resource_contents_text

__all__ = ["ResourceText", "call_tool", "list_tools", "read_resource"]


@dataclass(frozen=True)
class ResourceText:
    """A resource read: the URI it resolved to and its text (binary parts reported, B10)."""

    uri: str
    text: str


def read_resource(reference: str) -> Operation[ResourceText]:
    """An operation that reads the resource named by URI or by its listed name (B10)."""

    async def operation(connection: McpConnection, client: mcp.Client) -> ResourceText:
        capabilities = client.server_capabilities
        if capabilities is None or capabilities.resources is None:
            raise ResourceUnavailable("the MCP server does not offer resources")
        listed = await list_resources(connection, client)
        match = next((r for r in listed if str(r.uri) == reference), None)
        match = match or next((r for r in listed if r.name == reference), None)
        if match is None and ":" not in reference:
            raise ResourceUnavailable("the MCP server lists no resource with that name or URI")
        uri = str(match.uri) if match is not None else reference
        result = await client.read_resource(uri)
        return ResourceText(uri=uri, text=resource_contents_text(result.contents))

    return operation
