"""toolgate: an OpenAI-compatible LLM gateway with MCP tools and prompt-injection guarding."""

__version__ = "0.1.0"
