"""The bundled demo server behind the `inspect` model: prefetch and resources with no API key."""

from __future__ import annotations

from typing import Any

from plugins.mcp_bridge.demo_server import search
from tests.support.gateway import client, running_gateway

DEMO_PLUGIN: dict[str, Any] = {
    "type": "mcp_bridge",
    "id": "docs",
    "command": ["python", "-m", "plugins.mcp_bridge.demo_server"],
    "toolFilter": ["search_docs", "get_page"],
    "resources": "docs://toolgate/overview\nquickstart\nlogo\n",
    "prefetchTool": "search_docs",
    "prefetchArguments": {"query": "{{last_user_message}}"},
    "prefetchLabel": "Relevant documentation",
    "timeoutSeconds": 20,
}


def test_the_demo_search_ranks_pages_by_shared_words() -> None:
    assert [slug for slug, _, _ in search("how does prompt_guard score tool results")][:1] == ["prompt-guard"]
    assert search("zzz") == []


# R: B5, B10, B12
def test_the_demo_shows_prefetch_and_resources_to_the_inspect_model_with_no_api_key() -> None:
    config = {
        "upstreams": [{"name": "inspect", "kind": "inspect"}],
        "routes": [{"model": "demo", "upstream": "inspect", "plugins": [DEMO_PLUGIN]}],
    }
    with running_gateway(config) as gw:
        answer = client(gw, **{"X-Conversation-Id": "demo"}).chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "How are MCP sessions pooled?"}]
        )
    text = answer.choices[0].message.content or ""
    assert "## Relevant documentation\n[sessions] Sessions and conversations" in text
    assert "## Resource docs://toolgate/overview\ntoolgate is an OpenAI-compatible LLM gateway." in text
    assert "## Resource quickstart\nRun `toolgate serve --config config/demo.yaml`" in text
    assert "## Resource logo\n[binary content: image/png, 128 bytes]" in text
    assert "- search_docs: Search the toolgate documentation" in text
