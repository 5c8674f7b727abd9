"""MCP content as text: text joined, binary by MIME type and size (B10), config rules (B9)."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest
from pydantic import ValidationError

from plugins.mcp_bridge.content import resource_contents_text, tool_result_text
from gateway.mcp.errors import describe, session_ended
from mcp import MCPError
from tests.support.mcp_bridge import bridge_config

PNG64 = base64.b64encode(b"\x89PNG" + b"\x00" * 96).decode()


# R: B10
def test_binary_resource_content_is_reported_by_mime_type_and_size_not_encoded() -> None:
    contents = [
        types.TextResourceContents(uri="a://x", text="hello"),
        types.BlobResourceContents(uri="a://y", blob=PNG64, mime_type="image/png"),
    ]
    assert resource_contents_text(contents) == "hello\n[binary content: image/png, 100 bytes]"


# R: B10, B1
def test_tool_results_join_text_and_report_images_and_embedded_blobs() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="one"),
            types.ImageContent(type="image", data=PNG64, mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(uri="a://z", blob=PNG64)),
            types.TextContent(type="text", text="two"),
        ]
    )
    assert tool_result_text(result) == (
        "one\n[binary content: image/png, 100 bytes]\n[binary content: application/octet-stream, 100 bytes]\ntwo"
    )


# R: B1
def test_a_result_with_only_structured_content_reads_as_json() -> None:
    result = types.CallToolResult(content=[], structured_content={"n": 1})
    assert tool_result_text(result) == '{"n": 1}'


# R: B16
def test_session_not_found_and_terminated_and_closed_connections_count_as_ended_sessions() -> None:
    assert session_ended(MCPError(-32600, "Session not found"))
    assert session_ended(MCPError(-32600, "Session terminated"))
    assert session_ended(MCPError(-32000, "Connection closed"))
    assert session_ended(MCPError(-32000, "Bad Request: No valid session ID provided")), "TypeScript SDK, HTTP 400"
    assert session_ended(MCPError(-32001, "session not found")), "a JSON-RPC error of another server"
    assert session_ended(MCPError(-32600, "Invalid session ID"))
    assert not session_ended(MCPError(-32603, "Server returned an error response")), "a bare status: the connection judges"
    assert not session_ended(MCPError(-32600, "Invalid request"))
    assert not session_ended(MCPError(-32001, "Request 'tools/call' timed out"))


# R: B13, B17
def test_failure_reasons_are_short_and_never_echo_exception_text() -> None:
    assert describe(MCPError(-32001, "timed out")) == "the MCP server did not answer in time"
    assert describe(ExceptionGroup("x", [ConnectionRefusedError("secret-in-text")])) == "the MCP server could not be reached"
    assert describe(RuntimeError("secret-in-text")) == "unexpected error (RuntimeError)"


# R: B9
def test_a_prefetch_tool_outside_a_non_empty_filter_is_rejected_at_start_up() -> None:
    with pytest.raises(ValidationError, match="B9"):
        bridge_config(endpoint="http://x/mcp", toolFilter=["a"], prefetchTool="b")
    assert bridge_config(endpoint="http://x/mcp", prefetchTool="b").prefetchTool == "b"


def test_exactly_one_of_endpoint_or_command_is_accepted() -> None:
    with pytest.raises(ValidationError):
        bridge_config()
    with pytest.raises(ValidationError):
        bridge_config(endpoint="http://x/mcp", command=["python", "-m", "s"])
    with pytest.raises(ValidationError):
        bridge_config(command=[])
    assert bridge_config(command=["python", "-m", "s"]).command == ["python", "-m", "s"]


# R: B4
def test_the_auth_secret_must_be_a_reference_never_a_value() -> None:
    with pytest.raises(ValidationError, match="secret reference"):
        bridge_config(endpoint="http://x/mcp", authHeaderName="Authorization", authSecret="Bearer abc")
