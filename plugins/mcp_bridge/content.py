"""MCP content as the text a model reads: text joined, binary reported by MIME type and size (B10)."""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable
from typing import Any

import mcp_types as types


def _decoded_size(data: str) -> int:
    """Byte length of base64 `data`, without keeping the decoded bytes around."""
    try:
        return len(binascii.a2b_base64(data))
    except (binascii.Error, ValueError):
        return (len(data) * 3) // 4


def binary_note(mime_type: str | None, data: str) -> str:
    """What the model reads instead of binary content."""
    return f"[binary content: {mime_type or 'application/octet-stream'}, {_decoded_size(data)} bytes]"


def resource_contents_text(contents: Iterable[types.TextResourceContents | types.BlobResourceContents]) -> str:
    """The text of a `resources/read` result; blobs become a one-line note."""
    parts: list[str] = []
    for item in contents:
        if isinstance(item, types.TextResourceContents):
            parts.append(item.text)
        else:
            parts.append(binary_note(item.mime_type, item.blob))
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return binary_note(block.mime_type, block.data)
    if isinstance(block, types.EmbeddedResource):
        return resource_contents_text([block.resource])
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def tool_result_text(result: types.CallToolResult) -> str:
    """The text of a `tools/call` result: text blocks joined, binary reported, structured as JSON."""
    parts = [_block_text(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text
