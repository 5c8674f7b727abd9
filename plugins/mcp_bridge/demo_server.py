"""The demo MCP server: a `search_docs` tool and a few resources about toolgate itself.

Run over stdio (what `config/demo.yaml` starts):  python -m plugins.mcp_bridge.demo_server
Or over Streamable HTTP:  python -m plugins.mcp_bridge.demo_server --http --port 9000
"""

from __future__ import annotations

import argparse
import re

from mcp.server.mcpserver import MCPServer

PAGES: dict[str, tuple[str, str]] = {
    "overview": (
        "What toolgate is",
        "toolgate is an OpenAI-compatible LLM gateway. Applications point their OpenAI client at it; "
        "a chain of plugins, declared per route in YAML, runs on every chat-completion request. "
        "mcp_bridge connects an MCP server: the gateway runs the model's tool calls, prefetches "
        "context and injects MCP resources. prompt_guard inspects what tools bring back.",
    ),
    "quickstart": (
        "Quick start",
        "Run `toolgate serve --config config/demo.yaml`, then point any OpenAI client at "
        "http://127.0.0.1:8080/v1 with model `demo`. The demo's `inspect` model answers with exactly "
        "what a real model would have received, so you can see the injected context.",
    ),
    "mcp-bridge": (
        "mcp_bridge",
        "mcp_bridge keeps one MCP session per conversation in a pool, closes it after five idle "
        "minutes, replaces a session the server ended and retries the call once. prefetchTool is "
        "called before the first model call with prefetchArguments, whose tokens such as "
        "{{last_user_message}} are substituted safely. resources are read on every request.",
    ),
    "prompt-guard": (
        "prompt_guard",
        "prompt_guard scores tool results, prefetched context and resources with rule packs and "
        "structural heuristics, and refuses a request whose context is hostile.",
    ),
    "sessions": (
        "Sessions and conversations",
        "A conversation is identified by the X-Conversation-Id header or metadata.conversation_id, "
        "scoped by the caller. Without one, the gateway derives a key from user, org, token and the "
        "first message; anonymous requests without an id are not pooled.",
    ),
}

_WORD = re.compile(r"[a-z0-9_]+")


def search(query: str, limit: int = 3) -> list[tuple[str, str, str]]:
    """Pages ranked by how many query words they contain: (slug, title, text)."""
    words = set(_WORD.findall(query.lower()))
    scored = []
    for slug, (title, text) in PAGES.items():
        haystack = set(_WORD.findall(f"{slug} {title} {text}".lower()))
        score = len(words & haystack)
        if score:
            scored.append((score, slug, title, text))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [(slug, title, text) for _, slug, title, text in scored[:limit]]


def build_server() -> MCPServer:
    """The demo server (no side effects until run)."""
    server = MCPServer("toolgate-docs", instructions="Documentation of toolgate.", log_level="WARNING")

    @server.tool()
    def search_docs(query: str) -> str:
        """Search the toolgate documentation; returns the best matching pages."""
        hits = search(query)
        if not hits:
            return f"No page matches {query!r}. Pages: {', '.join(PAGES)}."
        return "\n\n".join(f"[{slug}] {title}\n{text}" for slug, title, text in hits)

    @server.tool()
    def get_page(slug: str) -> str:
        """One documentation page by its slug (overview, quickstart, mcp-bridge, prompt-guard, sessions)."""
        if slug not in PAGES:
            return f"No page {slug!r}. Pages: {', '.join(PAGES)}."
        title, text = PAGES[slug]
        return f"{title}\n{text}"

    @server.resource("docs://toolgate/overview", name="overview", mime_type="text/plain")
    def overview() -> str:
        """What toolgate is."""
        return PAGES["overview"][1]

    @server.resource("docs://toolgate/quickstart", name="quickstart", mime_type="text/plain")
    def quickstart() -> str:
        """How to run the demo."""
        return PAGES["quickstart"][1]

    @server.resource("docs://toolgate/logo", name="logo", mime_type="image/png")
    def logo() -> bytes:
        """A small PNG, to show how binary resources are reported."""
        return b"\x89PNG\r\n\x1a\n" + b"\x00" * 120

    return server


def main() -> None:
    """Serve over stdio, or over Streamable HTTP with `--http`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    server = build_server()
    if args.http:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host=args.host, port=args.port, log_level="warning")
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
