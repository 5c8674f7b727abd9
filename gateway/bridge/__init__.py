"""The Bridge (seed 000): federation MCP endpoint, graph model, pipeline runner, audit log."""
