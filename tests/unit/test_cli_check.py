"""`toolgate check` tells an operator where and what (D4): file:line:column, paths by names,
and the closest known name for a misspelt plugin type, upstream, route or key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config_problems import readable_path
from tests.support.config_files import place, write

MISSPELT = """\
server:
  prot: 8080
upstreams:
  - name: inspect
    kind: inspect
routes:
  - model: demo
    upstream: inspekt
    fallbacks: [othr]
    plugins:
      - type: prompt_gaurd
        mode: monitor
      - type: mcp_bridge
        id: docs
        comand: [python, -m, x]
  - model: other
    upstream: inspect
    plugins:
      - type: prompt_guard
        mdoe: monitor
"""


# R: D4, G10
def test_check_names_the_closest_type_key_upstream_and_route_for_each_misspelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MISSPELT)
    assert main(["check", "--config", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{place(path, 'prot')}: server.prot: unknown key 'prot'; did you mean 'port'?",
        f"{place(path, 'type: prompt_gaurd')}: routes[demo].plugins[#1].type: unknown plugin type 'prompt_gaurd'; "
        "did you mean 'prompt_guard'? (the types: mcp_bridge, prompt_guard)",
        f"{place(path, 'comand')}: routes[demo].plugins[docs].comand: unknown key 'comand'; did you mean 'command'?",
        f"{place(path, 'mdoe')}: routes[other].plugins[prompt_guard].mdoe: unknown key 'mdoe'; did you mean 'mode'?",
        f"{place(path, 'upstream: inspekt')}: routes[demo].upstream: names upstream 'inspekt', which is not defined in "
        "'upstreams'; did you mean 'inspect'?",
        f"{place(path, 'othr')}: routes[demo].fallbacks[#1]: names route 'othr', which is not defined in 'routes'; "
        "did you mean 'other'?",
    ]


# R: D4
def test_the_positional_path_and_the_option_are_the_same_and_exactly_one_is_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "upstreams: [{name: u, kind: demo}]\nroutes: [{model: m, upstream: u}]\n")
    assert main(["check", str(path)]) == 0
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (1 route(s), 1 upstream(s))\n" * 2
    assert main(["check"]) == 2
    assert main(["check", str(path), "--config", str(path)]) == 2
    assert capsys.readouterr().err == "toolgate check: give the config file once, as PATH or --config PATH\n" * 2


# R: D4
def test_a_key_nothing_is_close_to_lists_the_keys_of_its_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "upstreams: [{name: u, kind: inspect, zzz: 1}]\nroutes: [{model: m, upstream: u}]\nrotues: []\n")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{place(path, 'zzz')}: upstreams[u].zzz: unknown key 'zzz'; the keys here: name, kind, api_base, api_key, timeout_seconds",
        f"{place(path, 'rotues')}: rotues: unknown key 'rotues'; did you mean 'routes'?",
    ]


# R: D4
def test_list_items_are_named_when_their_name_is_unique_and_counted_from_one_otherwise() -> None:
    data = {"routes": [{"model": "a", "plugins": [{"type": "mcp_bridge"}, {"type": "mcp_bridge", "id": "docs"}]},
                       {"model": "b"}, {"model": "b"}, {"upstream": "x"}]}
    assert readable_path(data, "routes.0.plugins.0.command") == "routes[a].plugins[mcp].command"
    assert readable_path(data, "routes.0.plugins.1") == "routes[a].plugins[docs]"
    assert readable_path(data, "routes.1.model") == "routes[#2].model"
    assert readable_path(data, "routes.3") == "routes[#4]"
    assert readable_path(data, "routes.9.model") == "routes[#10].model"  # past the end: still a place
    assert readable_path(data, "server.port") == "server.port"
    keys = {"auth": {"api_keys": [{"key": "env:A", "user_id": "alice"}, {"key": "env:B"}]}}
    assert readable_path(keys, "auth.api_keys.0.key") == "auth.api_keys[alice].key"
    assert readable_path(keys, "auth.api_keys.1.key") == "auth.api_keys[#2].key"


# R: D4
def test_a_misspelt_key_deep_in_a_plugin_the_bridge_or_limits_gets_its_sections_nearest_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, """\
upstreams: [{name: u, kind: demo}]
routes:
  - model: m
    upstream: u
    plugins:
      - type: prompt_guard
        firewall: {confirmations: {ttl_secnds: 60}}
bridge: {enabeld: true}
limits:
  rules: [{per: user, requets_per_minute: 5}]
""")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{place(path, 'ttl_secnds')}: routes[m].plugins[prompt_guard].firewall.confirmations.ttl_secnds: unknown key "
        "'ttl_secnds'; did you mean 'ttl_seconds'?",
        f"{place(path, 'enabeld')}: bridge.enabeld: unknown key 'enabeld'; did you mean 'enabled'?",
        f"{place(path, 'requets_per_minute')}: limits.rules[#1].requets_per_minute: unknown key 'requets_per_minute'; "
        "did you mean 'requests_per_minute'?",
    ]
