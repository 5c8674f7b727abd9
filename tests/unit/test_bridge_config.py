"""The Bridge's YAML section: the allow-list for endpoints of connections made through the REST API."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.bridge.config import BridgeConfig


def test_without_an_allow_list_any_endpoint_is_allowed() -> None:
    # R: F3
    assert BridgeConfig().api_endpoint_allowed("http://169.254.169.254/latest")


@pytest.mark.parametrize(
    ("endpoint", "allowed"),
    [
        ("https://mcp.example.com/mcp", True),
        ("https://MCP.example.com:443/mcp/tools", True),
        ("https://mcp.example.com/mcpx", False),
        ("https://mcp.example.com.evil.test/mcp", False),
        ("http://mcp.example.com/mcp", False),
        ("https://mcp.example.com/mcp/../admin", False),
        ("https://mcp.example.com/mcp/%2e%2e/admin", False),
        ("http://10.1.2.3:9000/anything", True),
        ("http://10.1.2.3/anything", False),
        ("http://169.254.169.254/latest", False),
        ("not a url", False),
    ],
)
def test_an_allow_list_admits_its_hosts_ports_and_paths_only(endpoint: str, allowed: bool) -> None:
    # R: F3
    config = BridgeConfig(apiEndpointAllowList=["https://mcp.example.com/mcp", "http://10.1.2.3:9000"])
    assert config.api_endpoint_allowed(endpoint) is allowed


def test_an_allow_list_entry_that_is_not_an_http_url_is_a_config_error() -> None:
    # R: F3
    with pytest.raises(ValidationError, match="expected an http\\(s\\) URL with a host"):
        BridgeConfig(apiEndpointAllowList=["mcp.example.com"])
