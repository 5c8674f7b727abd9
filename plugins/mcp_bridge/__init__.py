"""mcp_bridge: one MCP server's tools, prefetched context and resources, with pooled sessions."""
