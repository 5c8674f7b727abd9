"""A config cannot silently drop a guard (issue 32, finding 4; D4, G8, A4).

A route that said `plugins:` twice loaded the last one: its enforce-mode prompt_guard vanished and
`toolgate check` said `ok`. A key given twice anywhere is now refused, naming file:line:column of
both, and every problem `check` reports starts with file:line:column. The real CLI runs here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from tests.support.config_files import place, write

ROOT = Path(__file__).resolve().parents[2]

DROPPED_GUARD = """\
upstreams:
  - {name: local, kind: inspect}
routes:
  - model: assistant
    upstream: local
    plugins:
      - {type: prompt_guard, mode: enforce}
    plugins: []
"""


def toolgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def duplicate(path: Path, dotted: str, key: str, occurrence: int = 2) -> str:
    """The line `check` prints for the `occurrence`-th `key:` of `dotted`."""
    return (f"{place(path, key + ':', occurrence)}: {dotted}: key {key!r} is given more than once in this mapping "
            f"(first at {place(path, key + ':')}); YAML would keep only the last one and drop the others silently: "
            "remove or merge them")


def test_a_route_that_says_plugins_twice_fails_check_and_start_up_naming_both_places(tmp_path: Path) -> None:
    # R: D4, G8
    path = write(tmp_path, DROPPED_GUARD)
    checked = toolgate("check", str(path))
    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr.splitlines() == [duplicate(path, "routes[assistant].plugins", "plugins")]
    served = toolgate("serve", "--config", str(path), "--port", "0")
    assert served.returncode == 2
    assert served.stderr.splitlines() == [duplicate(path, "routes[assistant].plugins", "plugins")]


@pytest.mark.parametrize(("text", "dotted", "key"), [
    ("upstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\nroutes: []\n", "routes", "routes"),
    ("server: {port: 8080, port: 9090}\nupstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\n",
     "server.port", "port"),
    ("upstreams:\n  - name: u\n    kind: inspect\n    kind: openai\nroutes: [{model: m, upstream: u}]\n", "upstreams[u].kind", "kind"),
    ("upstreams: [{name: u, kind: inspect}]\nroutes:\n  - model: m\n    upstream: u\n    plugins:\n"
     "      - type: prompt_guard\n        mode: enforce\n        mode: monitor\n", "routes[m].plugins[prompt_guard].mode", "mode"),
    ("upstreams: [{name: u, kind: inspect}]\nroutes:\n  - model: m\n    upstream: u\n    plugins:\n"
     "      - type: prompt_guard\n        detectors: {rules: true, rules: false}\n", "routes[m].plugins[prompt_guard].detectors.rules", "rules"),
    ("auth:\n  mode: none\n  mode: api_keys\nupstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\n",
     "auth.mode", "mode"),
    ("upstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\nbridge:\n  enabled: true\n"
     "  enabled: false\n", "bridge.enabled", "enabled"),
])
def test_a_key_given_twice_at_any_depth_is_refused_with_both_positions(tmp_path: Path, text: str, dotted: str, key: str) -> None:
    # R: D4, G8
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert duplicate(path, dotted, key) in refused.value.problems


def test_every_problem_check_reports_names_file_line_and_column(tmp_path: Path) -> None:
    # R: D4, A4
    path = write(tmp_path, """\
server:
  port: 99999
  metrics_auth: true
upstreams:
  - {name: u, kind: openai, api_base: "http://127.0.0.1:9/v1", api_key: "env:TG_LOADER_TEST_UNSET"}
  - name: u
    kind: inspect
    surprise: 1
routes:
  - model: m
    upstream: missing
    plugins:
      - {type: mcp_bridge, endpoint: "http://x/mcp", timeoutSeconds: -1}
      - {type: nope}
  - upstream: u
bridge: {enabled: true, connections: 3, enabled: false}
""")
    checked = toolgate("check", "--config", str(path))
    lines = checked.stderr.splitlines()
    assert checked.returncode == 1
    assert all(re.match(re.escape(str(path)) + r":\d+:\d+: \S+: ", line) for line in lines), lines
    assert lines == [
        duplicate(path, "bridge.enabled", "enabled"),
        f"{place(path, 'port')}: server.port: Input should be less than or equal to 65535",
        f"{place(path, 'surprise')}: upstreams[#2].surprise: unknown key 'surprise'; the keys here: name, kind, api_base, api_key, timeout_seconds",
        f"{place(path, 'timeoutSeconds')}: routes[m].plugins[mcp].timeoutSeconds: Input should be greater than 0",
        f"{place(path, 'type: nope')}: routes[m].plugins[#2].type: unknown plugin type 'nope' (the types: mcp_bridge, prompt_guard)",
        f"{place(path, 'upstream: u')}: routes[#2].model: Field required",  # a missing key: the mapping that lacks it
        f"{place(path, 'connections')}: bridge.connections: Input should be a valid list",
        f"{place(path, 'name: u')}: upstreams[#1].name: upstream name 'u' is used more than once",
        f"{place(path, 'name: u', 2)}: upstreams[#2].name: upstream name 'u' is used more than once",
        f"{place(path, 'upstream: missing')}: routes[m].upstream: names upstream 'missing', which is not defined in 'upstreams'",
        f"{place(path, 'metrics_auth')}: server.metrics_auth: needs a credential to check: set auth.mode to api_keys, jwt or oauth",
        f"{place(path, 'api_key')}: upstreams[#1].api_key: environment variable TG_LOADER_TEST_UNSET is not set (from env:TG_LOADER_TEST_UNSET)",
    ]


def test_not_yaml_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    # R: D4
    path = write(tmp_path, "upstreams: [{name: u, kind: inspect}]\nroutes: [unclosed\n")
    checked = toolgate("check", str(path))
    assert (checked.returncode, checked.stderr) == (1, f"{path}:3:1: (yaml): not valid YAML: expected ',' or ']', but got '<stream end>'\n")


def test_a_rule_pack_with_a_key_given_twice_is_refused_at_start_up(tmp_path: Path) -> None:
    # R: D4, P2 (the prompt_guard rule pack is operator YAML too, read by the same reader)
    pack = write(tmp_path, "rules:\n  - id: r1\n    weight: 0.9\n    weight: 0.1\n    patterns: ['ignore previous']\n", "rules.yaml")
    path = write(tmp_path, "upstreams: [{name: u, kind: inspect}]\nroutes:\n  - model: m\n    upstream: u\n"
                           "    plugins: [{type: prompt_guard, mode: enforce, rules_file: rules.yaml}]\n")
    assert toolgate("check", str(path)).returncode == 0  # the pack is read when the plugin starts
    served = toolgate("serve", "--config", str(path), "--port", "0")
    assert served.returncode != 0
    assert duplicate(pack, "rules.0.weight", "weight") in served.stderr
