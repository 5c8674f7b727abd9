"""The MCP conformance suite (npm `@modelcontextprotocol/conformance` 0.1.12) and its fixture server
(`tests/support/node/conformance-fixture/`, copied from the suite's repository at that release,
MIT licence; `listen-host.mjs` binds it to 127.0.0.1), with a strict verdict.

The suite's own verdict is too kind: it checks the shape of a result, so an "unknown tool" error
result passes. Here a scenario passes only when every check in its `checks.json` is SUCCESS (INFO
is fine) and no result hides an error: `isError: true` outside `tools-call-error`, or a text
saying "MCP error", "unknown tool" or "not supported or error".
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.node_servers import NODE_DIR, free_port, require_node, start_node, stop_node

FIXTURE_DIR = NODE_DIR / "conformance-fixture"
SUITE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
TSX = FIXTURE_DIR / "node_modules" / "tsx"
HIDDEN_ERROR = re.compile(r"MCP error|unknown tool|not supported or error", re.IGNORECASE)
ERROR_SCENARIOS = frozenset({"tools-call-error"})
"""Scenarios whose expected result is an error result."""


class ConformanceFixture:
    """The suite's fixture server in a child process, at `url`."""

    def __init__(self) -> None:
        self.node = require_node(TSX)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> "ConformanceFixture":
        """Start it and wait (with a deadline) until it says it runs."""
        process = start_node([self.node, "--import", "tsx", "--import", "./listen-host.mjs", "everything-server.ts"],
                             FIXTURE_DIR, self.port, "running on", "conformance-fixture", log_stderr=False, deadline=60.0)
        self.process = process
        return self

    def stop(self) -> None:
        """Kill it and wait."""
        process, self.process = self.process, None
        stop_node(process)


@dataclass(frozen=True)
class Verdict:
    """One scenario: passed, or the reasons it did not."""

    scenario: str
    reasons: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.reasons


def _hidden_errors(scenario: str, value: Any) -> list[str]:
    found: list[str] = []
    if isinstance(value, dict):
        if value.get("isError") is True and scenario not in ERROR_SCENARIOS:
            found.append("a result with isError: true")
        for item in value.values():
            found += _hidden_errors(scenario, item)
    elif isinstance(value, list):
        for item in value:
            found += _hidden_errors(scenario, item)
    elif isinstance(value, str) and HIDDEN_ERROR.search(value):
        found.append(f"an error in a result: {value[:120]!r}")
    return found


def verdict(scenario: str, checks: list[dict[str, Any]]) -> Verdict:
    """The strict verdict of one scenario's checks."""
    reasons = [f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}".strip()
               for c in checks if c.get("status") not in ("SUCCESS", "INFO")]
    if not checks:
        reasons.append("no checks ran")
    for check in checks:
        reasons += _hidden_errors(scenario, check.get("details"))
    return Verdict(scenario, tuple(dict.fromkeys(reasons)))


def run_suite(url: str, out_dir: Path, timeout: float = 300.0) -> dict[str, Verdict]:
    """Run every server scenario (`--suite all`) against `url`; the strict verdict of each."""
    node = require_node(SUITE)
    listed = subprocess.run([node, str(SUITE), "list", "--server"], capture_output=True, text=True, timeout=60, check=True)
    scenarios = [line.strip()[2:] for line in listed.stdout.splitlines() if line.strip().startswith("- ")]
    subprocess.run(
        [node, str(SUITE), "server", "--url", url, "--suite", "all", "-o", str(out_dir)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=NODE_DIR,
    )
    verdicts: dict[str, Verdict] = {}
    for scenario in scenarios:
        runs = sorted(out_dir.glob(f"server-{scenario}-20*"))
        if not runs:
            verdicts[scenario] = Verdict(scenario, ("no results written",))
            continue
        checks = json.loads((runs[-1] / "checks.json").read_text(encoding="utf-8"))
        verdicts[scenario] = verdict(scenario, checks)
    return verdicts
