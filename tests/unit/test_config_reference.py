"""The configuration reference and the JSON Schema come from the typed models (D3)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gateway.cli import main
from gateway.config_reference import REGENERATE, json_schema, markdown
from gateway.yaml_document import read_yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


# R: D3
def test_docs_configuration_md_is_what_the_models_say_now() -> None:
    written = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert written == markdown(), f"docs/configuration.md is out of date with the config models: run `.venv/bin/{REGENERATE}`"


# R: D3
def test_the_reference_gives_each_key_its_type_default_and_meaning() -> None:
    page = markdown()
    assert "| `port` | integer, ≥ 0, ≤ 65535 | `8080` |" in page
    assert "| `maxConsecutiveToolCalls` | integer, ≥ 0, ≤ 1000 | `10` |" in page
    assert '| `kind` | one of `"openai"`, `"litellm"`, `"inspect"`, `"demo"` | required |' in page
    for section in ("## `routes[].plugins[type=mcp_bridge]`", "## `routes[].plugins[type=prompt_guard]`", "## `bridge`",
                    "## `limits`", "## `telemetry`"):
        assert section in page
    assert "base_dir" not in page  # set by the loader, not a key of the file


# R: D3
@pytest.mark.parametrize("name", ["demo.yaml", "example.yaml"])
def test_the_json_schema_accepts_the_shipped_configs(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema())
    jsonschema.validate(read_yaml(ROOT / "config" / name).data, json_schema(), cls=jsonschema.Draft202012Validator)


# R: D3
@pytest.mark.parametrize(("data", "fragment"), [
    ({"upstreams": [{"name": "u", "kind": "demo"}], "routes": [{"model": "m", "upstream": "u"}], "sever": {}}, "'sever' was unexpected"),
    ({"upstreams": [{"name": "u", "kind": "demo"}],
      "routes": [{"model": "m", "upstream": "u", "plugins": [{"type": "prompt_gaurd"}]}]}, "prompt_gaurd"),
    ({"upstreams": [{"name": "u", "kind": "demo"}], "routes": [{"model": "m", "upstream": "u", "plugins": [
        {"type": "mcp_bridge", "comand": ["x"]}]}]}, "'comand' was unexpected"),
])
def test_the_json_schema_refuses_what_check_refuses(data: dict, fragment: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate(data, json_schema(), cls=jsonschema.Draft202012Validator)
    assert fragment in str(refused.value)


# R: D3
def test_toolgate_schema_prints_the_json_schema_and_with_markdown_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json_schema() and printed["$schema"].endswith("2020-12/schema")
    assert main(["schema", "--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
