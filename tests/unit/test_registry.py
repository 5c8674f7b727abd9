"""The plugin registry (G2, G8): plugins declare themselves; the gateway names none of them."""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel

from gateway.config import Config
from gateway.secrets import unreadable_secrets
from gateway.registry import REGISTRY, plugin_id

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"


def test_every_plugin_declares_a_strict_config_model_with_a_type_and_an_id() -> None:
    # R: G2, G8
    assert sorted(REGISTRY) == ["mcp_bridge", "prompt_guard"]
    for name, spec in REGISTRY.items():
        assert issubclass(spec.config, BaseModel) and spec.config.model_config.get("extra") == "forbid"
        assert spec.config.model_fields["type"].annotation.__args__ == (name,)  # type: ignore[union-attr]
        assert plugin_id({"type": name}) == spec.config.model_fields["id"].default


def test_nothing_in_gateway_names_a_plugin_type_or_imports_a_plugin() -> None:
    # R: G2
    offenders = []
    for path in sorted(GATEWAY.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in REGISTRY and id(node) not in docstrings:
                offenders.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(tuple(f"plugins.{t}" for t in REGISTRY)):
                offenders.append(f"{path.name}:{node.lineno}: from {node.module}")
    assert offenders == []


def test_secret_fields_are_found_by_their_type_in_every_plugins_model_even_when_the_file_does_not_validate() -> None:
    # R: G8, B4, A4
    data = {"upstreams": [{"name": "u", "kind": "inspect"}], "routes": [{"model": "m", "upstream": "u", "plugins": [
        {"type": "prompt_guard", "mode": "sometimes"},
        {"type": "mcp_bridge", "endpoint": "http://x/mcp", "authHeaderName": "X-Key", "authSecret": "env:TG_TEST_NOT_SET_ANYWHERE"}]}],
        "auth": {"mode": "api_keys", "api_keys": [{"key": "file:missing.key", "user_id": "a"}]}}
    assert unreadable_secrets(Config, data, Path("/nonexistent")) == [
        ("auth.api_keys.0.key", "cannot read secret file /nonexistent/missing.key: No such file or directory"),
        ("routes.0.plugins.1.authSecret", "environment variable TG_TEST_NOT_SET_ANYWHERE is not set (from env:TG_TEST_NOT_SET_ANYWHERE)"),
    ]
