"""Typed config (G8) and the CLI's `check` (G10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main, server_options
from gateway.config import ConfigError, load_config, parse_config
from gateway.secrets import SecretError, resolve_secret
from tests.support import canary
from tests.support.config_files import place, write

GOOD = """
upstreams: [{name: local, kind: openai, api_base: "http://127.0.0.1:9/v1", api_key: env:TG_TEST_KEY}]
routes: [{model: assistant, upstream: local}]
"""


def test_every_problem_is_reported_with_file_and_dotted_path(tmp_path: Path) -> None:
    # R: G8
    path = write(tmp_path, """
server: {port: 99999}
upstreams: [{name: u, kind: openai}, {name: u, kind: inspect, surprise: 1}]
routes:
  - model: m
    upstream: u
    plugins: [{type: mcp_bridge, endpoint: "http://x/mcp", timeoutSeconds: -1}, {type: nope}]
""")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert f"{place(path, 'port')}: server.port: Input should be less than or equal to 65535" in problems
    assert f"{place(path, '{name: u, kind: openai}')}: upstreams[#1]: kind 'openai' needs 'api_base' (e.g. http://127.0.0.1:11434/v1)" in problems
    assert f"{place(path, 'surprise')}: upstreams[#2].surprise: unknown key 'surprise'; the keys here: name, kind, api_base, api_key, timeout_seconds" in problems
    assert f"{place(path, 'timeoutSeconds')}: routes[m].plugins[mcp].timeoutSeconds: Input should be greater than 0" in problems
    assert f"{place(path, 'type: nope')}: routes[m].plugins[#2].type: unknown plugin type 'nope' (the types: mcp_bridge, prompt_guard)" in problems


def test_a_literal_secret_in_the_config_is_refused(tmp_path: Path) -> None:
    # R: G8, B4
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": [{"name": "u", "kind": "openai", "api_base": "http://x/v1", "api_key": canary.UPSTREAM_KEY}],
                      "routes": [{"model": "m", "upstream": "u"}]}, "cfg")
    assert caught.value.problems == ["cfg: upstreams[u].api_key: a secret reference: 'env:NAME' or 'file:PATH' (secrets are never written in the config)"]
    assert canary.CANARY not in str(caught.value)


def test_every_broken_reference_between_sections_is_reported_with_its_path() -> None:
    # R: G8
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": [{"name": "u", "kind": "inspect"}, {"name": "u", "kind": "inspect"}],
                      "routes": [{"model": "m", "upstream": "missing"}, {"model": "m", "upstream": "u", "plugins": [
                          {"type": "prompt_guard"}, {"type": "prompt_guard"}]}]}, "cfg")
    assert caught.value.problems == [
        "cfg: upstreams[#1].name: upstream name 'u' is used more than once",
        "cfg: upstreams[#2].name: upstream name 'u' is used more than once",
        "cfg: routes[#1].model: route model 'm' is used more than once",
        "cfg: routes[#1].upstream: names upstream 'missing', which is not defined in 'upstreams'",
        "cfg: routes[#2].model: route model 'm' is used more than once",
        "cfg: routes[#2].plugins[#1].id: plugin id 'prompt_guard' is used more than once in this chain",
        "cfg: routes[#2].plugins[#2].id: plugin id 'prompt_guard' is used more than once in this chain",
    ]


def test_prefetch_tool_outside_the_filter_is_rejected() -> None:
    # R: B9
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": [{"name": "u", "kind": "inspect"}], "routes": [{"model": "m", "upstream": "u", "plugins": [
            {"type": "mcp_bridge", "endpoint": "http://x/mcp", "toolFilter": ["a"], "prefetchTool": "b"}]}]}, "cfg")
    assert caught.value.problems == ["cfg: routes[m].plugins[mcp]: prefetchTool 'b' is not in toolFilter (B9)"]


def test_check_reports_schema_reference_and_secret_problems_in_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: A4, G10
    path = write(tmp_path, """
server: {port: 99999, metrics_auth: true}
upstreams: [{name: u, kind: openai, api_base: "http://127.0.0.1:9/v1", api_key: env:TG_TEST_UNSET_KEY}]
routes:
  - model: m
    upstream: missing
    plugins: [{type: mcp_bridge, endpoint: "http://x/mcp"}, {type: mcp_bridge, endpoint: "http://y/mcp"}]
""")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{place(path, 'port')}: server.port: Input should be less than or equal to 65535",
        f"{place(path, 'upstream: missing')}: routes[m].upstream: names upstream 'missing', which is not defined in 'upstreams'",
        f"{place(path, '{type: mcp_bridge')}: routes[m].plugins[#1].id: plugin id 'mcp' is used more than once in this chain",
        f"{place(path, '{type: mcp_bridge', 2)}: routes[m].plugins[#2].id: plugin id 'mcp' is used more than once in this chain",
        f"{place(path, 'metrics_auth')}: server.metrics_auth: needs a credential to check: set auth.mode to api_keys, jwt or oauth",
        f"{place(path, 'api_key')}: upstreams[u].api_key: environment variable TG_TEST_UNSET_KEY is not set (from env:TG_TEST_UNSET_KEY)",
    ]


@pytest.mark.parametrize(
    ("field", "value", "token"),
    [
        ("prefetchArguments", {"query": "{{last_user_mesage}}"}, "{{last_user_mesage}}"),
        ("prefetchArguments", {"filters": [{"owner": "{{ User_Id }}"}]}, "{{ User_Id }}"),
        ("prefetchResultTemplate", "Found: {{results}}", "{{results}}"),
    ],
)
def test_unknown_template_tokens_are_config_errors_at_check_and_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object, token: str
) -> None:
    # R: A4, B6
    import json

    node = {"type": "mcp_bridge", "endpoint": "http://x/mcp", "prefetchTool": "search", field: value}
    path = write(tmp_path, f"upstreams: [{{name: u, kind: inspect}}]\nroutes: [{{model: m, upstream: u, plugins: [{json.dumps(node)}]}}]\n")
    assert main(["check", str(path)]) == 1
    assert main(["serve", "--config", str(path)]) == 2  # start-up refuses the same file
    err = capsys.readouterr().err
    assert f": routes[m].plugins[mcp].{field}: unknown template token {token}; the tokens are" in err
    assert f"{place(path, json.dumps(field))}: routes[m].plugins[mcp].{field}: unknown template token {token}" in err


def test_secret_references_resolve_from_env_and_files(tmp_path: Path) -> None:
    # R: G8
    (tmp_path / "key.txt").write_text(canary.BOB_KEY + "\n")
    assert resolve_secret(canary.UPSTREAM_KEY_REF) == canary.UPSTREAM_KEY
    assert resolve_secret("file:key.txt", tmp_path) == canary.BOB_KEY
    with pytest.raises(SecretError, match="environment variable TG_MISSING is not set"):
        resolve_secret("env:TG_MISSING")
    with pytest.raises(SecretError, match="cannot read secret file"):
        resolve_secret("file:absent.txt", tmp_path)


def test_check_exits_zero_on_a_good_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # R: G10
    monkeypatch.setenv("TG_TEST_KEY", canary.UPSTREAM_KEY)
    path = write(tmp_path, GOOD)
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (1 route(s), 1 upstream(s))\n"


def test_check_names_unset_secrets_without_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # R: G10, G8
    monkeypatch.delenv("TG_TEST_KEY", raising=False)
    path = write(tmp_path, GOOD)
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err == f"{place(path, 'api_key')}: upstreams[local].api_key: environment variable TG_TEST_KEY is not set (from env:TG_TEST_KEY)\n"


def test_check_reports_broken_yaml_with_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: G10
    path = write(tmp_path, "routes: [unclosed\n")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err == f"{path}:2:1: (yaml): not valid YAML: expected ',' or ']', but got '<stream end>'\n"


def test_bundled_configs_are_valid() -> None:
    # R: G8
    root = Path(__file__).resolve().parents[2] / "config"
    for path in sorted(root.glob("*.yaml")):
        if path.name.startswith("prompt_guard"):
            continue
        load_config(path)


def test_the_gateway_keeps_idle_connections_open_longer_than_a_load_balancer_reuses_them() -> None:
    # R: S2 -- uvicorn's own 5 s keep-alive raced HAProxy's reuse of idle server connections (it sent
    # requests on connections the replica was closing: `SD--` in its log, the request lost)
    minimal = {"upstreams": [{"name": "u", "kind": "inspect"}], "routes": [{"model": "m", "upstream": "u"}]}
    default = server_options(parse_config(minimal))
    assert default["timeout_keep_alive"] == 75 and default["access_log"] is False
    tuned = server_options(parse_config({**minimal, "server": {"keep_alive_seconds": 120}}))
    assert tuned["timeout_keep_alive"] == 120
    with pytest.raises(ConfigError, match="keep_alive_seconds"):
        parse_config({**minimal, "server": {"keep_alive_seconds": 0}})
