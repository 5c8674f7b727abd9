"""The Bridge's YAML section: the allow-list for endpoints of connections made through the REST API."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(
    ("database", "problem"),
    [
        ("postgresql://toolgate:hunter2-secret@db:5432/toolgate", "no password in the URL: give it by reference"),
        ("mysql://toolgate@db/toolgate", "expected a file path, sqlite:///path or postgresql://"),
        ("postgresql://toolgate@db:5432", "a host and a database"),
    ],
)
def test_a_database_url_with_a_password_or_an_unknown_kind_is_refused_without_echoing_it(database: str, problem: str) -> None:
    # R: S1, G8
    with pytest.raises(ValidationError) as refused:
        BridgeConfig.model_validate({"database": database})
    assert problem in str(refused.value.errors()[0]["msg"])
    assert "hunter2" not in str(refused.value.errors()[0]["msg"])


def test_the_database_names_a_sqlite_file_or_a_postgresql_server(tmp_path: Path) -> None:
    # R: S1
    from gateway.bridge.store import is_postgres, sqlite_path

    assert sqlite_path("sqlite:///rel.db", tmp_path) == str(tmp_path / "rel.db")
    assert sqlite_path("sqlite:////abs/x.db", tmp_path) == "/abs/x.db"
    assert sqlite_path("./t.db", tmp_path) == str(tmp_path / "t.db") and sqlite_path(":memory:", tmp_path) == ":memory:"
    config = BridgeConfig.model_validate({"database": "postgresql://toolgate@db:5432/toolgate", "databasePassword": "env:PG"})
    assert is_postgres(config.database) and not is_postgres("sqlite:///x.db")
    with pytest.raises(ValidationError, match="secret reference"):
        BridgeConfig.model_validate({"database": "postgresql://toolgate@db/toolgate", "databasePassword": "hunter2"})
