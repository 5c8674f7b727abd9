"""The configurations measured (the rows of the results) and the gateway YAML each one generates.

One gateway per row; one route per suite (`agentdojo-<suite>`) whose chain is the row's
prompt_guard node (if any) then an mcp_bridge node `id: <suite>` on that suite's MCP server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.agentdojo.annotations import TRUSTED_SOURCES, trusted_arguments

UPSTREAM_KEY_ENV = "AGENTDOJO_UPSTREAM_KEY"
"""The scripted model's key reaches the gateway as an environment variable (config: `env:` reference)."""


@dataclass(frozen=True)
class Row:
    """One configuration. `firewall`: needs the tool-call firewall's config keys (issue 31)."""

    name: str
    guard: dict[str, Any] | None
    trusted: bool = False
    text_arguments: bool = False
    """`firewall.trusted_arguments`: the suite's free-text fields (`annotations.TEXT_ARGUMENTS`)."""
    confirm: bool = False
    firewall: bool = False
    attacks: bool = True
    """Run the 629 attack pairs (row 5 runs them only with --confirm-attacks)."""
    description: str = field(default="", compare=False)


ROWS: dict[str, Row] = {row.name: row for row in [
    Row("off", None, description="no prompt_guard"),
    Row("detector", {"type": "prompt_guard", "mode": "enforce", "firewall": {"enabled": False}}, firewall=True,
        description="prompt_guard enforce with the firewall off: the detector refuses the request"),
    Row("enforce", {"type": "prompt_guard", "mode": "enforce"}, firewall=True,
        description="prompt_guard enforce, nothing else (the firewall is on by default)"),
    Row("enforce+trusted", {"type": "prompt_guard", "mode": "enforce"}, trusted=True, firewall=True,
        description="as enforce, plus the operator-trusted sources per suite (trustedSources)"),
    Row("enforce+confirm", {"type": "prompt_guard", "mode": "enforce"}, confirm=True, firewall=True, attacks=False,
        description="as enforce, every confirmation the gateway asks for granted"),
]}

EXTRA_ROWS: dict[str, Row] = {row.name: row for row in [
    Row("enforce+trusted+text", {"type": "prompt_guard", "mode": "enforce"}, trusted=True, text_arguments=True, firewall=True,
        description="as enforce+trusted, plus firewall.trusted_arguments: the free-text fields of the acting tools"),
]}
"""Rows run only when named in --rows."""

LEGACY_DETECTOR = Row("detector", {"type": "prompt_guard", "mode": "enforce"},
                      description="prompt_guard enforce as it was before the firewall (no `firewall` key)")
"""Row 2 on a gateway without the firewall: today's `mode: enforce` is the detector alone."""


def route_name(suite: str) -> str:
    return f"agentdojo-{suite}"


def gateway_config(row: Row, port: int, upstream_url: str, mcp_urls: dict[str, str]) -> dict[str, Any]:
    """The YAML (as data) of the row's gateway: loopback, auth off, one route per suite."""
    routes = []
    for suite, url in mcp_urls.items():
        plugins: list[dict[str, Any]] = []
        if row.guard is not None:
            guard = {**row.guard, "id": "guard"}
            if row.text_arguments:
                guard["firewall"] = {**guard.get("firewall", {}), "trusted_arguments": trusted_arguments(suite)}
            plugins.append(guard)
        bridge: dict[str, Any] = {"type": "mcp_bridge", "id": suite, "endpoint": url,
                                  "maxConsecutiveToolCalls": 40, "timeoutSeconds": 30}
        if row.trusted:
            bridge["trustedSources"] = sorted(TRUSTED_SOURCES[suite])
        plugins.append(bridge)
        routes.append({"model": route_name(suite), "upstream": "scripted", "plugins": plugins})
    return {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning", "metrics_public": True},  # the report reads /metrics
        "auth": {"mode": "none"},
        "upstreams": [{"name": "scripted", "kind": "openai", "api_base": f"{upstream_url}/v1",
                       "api_key": f"env:{UPSTREAM_KEY_ENV}", "timeout_seconds": 60}],
        "routes": routes,
    }
