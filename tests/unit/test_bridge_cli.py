"""`toolgate bridge validate` and `toolgate audit list` (G10, F5, F8)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from gateway.bridge.cli import register
from gateway.bridge.records import AuditRecord
from gateway.bridge.store_sqlite import SqliteStore
from tests.support.bridge_servers import edge, fan_in_graph


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="toolgate")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_a_valid_graph_prints_valid_and_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: F8
    path = tmp_path / "g.json"
    path.write_text(json.dumps(fan_in_graph()))
    assert run(["bridge", "validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith("valid")


def test_an_invalid_graph_prints_one_line_per_problem_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # R: F8
    data = fan_in_graph()
    data["edges"] += [edge("back", "m1.out", "ta.query"), edge("e1", "ghost.x", "out1.ctx")]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    assert run(["bridge", "validate", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"{path}: duplicate edge ids: e1",
        f"{path}: reference to a missing node: edge e1 -> ghost",
        f"{path}: cycle: ta -> m1 -> ta",
    ]


def test_audit_list_reads_the_store_named_in_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: F5
    async def seed() -> None:
        store = SqliteStore(tmp_path / "bridge.db")
        await store.open()
        await store.append_audit(
            [
                AuditRecord(1.0, "mcp.tool_call", "alice", None, "gh__echo", "federation", False, {}, "success", 2.0),
                AuditRecord(2.0, "mcp.pipeline_call", "bob", None, "find", "bridge:b", False, {}, "failure", 3.0),
            ]
        )
        await store.close()

    asyncio.run(seed())
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        "upstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\nbridge: {database: bridge.db}\n"
    )
    assert run(["audit", "list", "--config", str(config), "--user", "bob", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["actor"]["id"], r["resource"], r["status"]) for r in lines] == [("bob", "find", "failure")]
    assert run(["audit", "list", "--config", str(config), "--since", "1970-01-01T00:00:01.5Z"]) == 0
    assert "find" in capsys.readouterr().out
