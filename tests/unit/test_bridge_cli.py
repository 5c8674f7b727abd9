"""`toolgate bridge validate`, `toolgate bridge migrate` and `toolgate audit list` (G10, F5, F8, S1)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from gateway.bridge.cli import register
from gateway.bridge.records import AuditRecord
from gateway.bridge.store_postgres import LATEST, PostgresStore
from gateway.bridge.store_sqlite import SqliteStore
from tests.support import postgres
from tests.support.bridge_servers import edge, fan_in_graph
from tests.support.faults import free_port


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


def test_bridge_migrate_then_audit_list_on_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # R: S1, F5
    with postgres.fresh_database_sync() as url:
        config = tmp_path / "toolgate.yaml"
        config.write_text(
            f"upstreams: [{{name: u, kind: inspect}}]\nroutes: [{{model: m, upstream: u}}]\nbridge: {{database: '{url}'}}\n"
        )
        assert run(["bridge", "migrate", "--config", str(config)]) == 0
        assert capsys.readouterr().out.endswith(": schema up to date\n")
        assert postgres.scalar(url, "SELECT max(version) FROM toolgate_schema") == LATEST

        async def seed() -> None:
            store = PostgresStore(url)
            await store.open()
            await store.append_audit([AuditRecord(1.0, "mcp.tool_call", "alice", None, "gh__echo", "federation", False,
                                                  {}, "success", 2.0)])
            await store.close()

        asyncio.run(seed())
        assert run(["audit", "list", "--config", str(config), "--json"]) == 0
        assert [json.loads(line)["resource"] for line in capsys.readouterr().out.splitlines()] == ["gh__echo"]


def test_bridge_migrate_on_an_unreachable_server_says_so_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # R: S1
    port = free_port()
    config = tmp_path / "toolgate.yaml"
    config.write_text("upstreams: [{name: u, kind: inspect}]\nroutes: [{model: m, upstream: u}]\nbridge: {database: bridge.db}\n")
    assert run(["bridge", "migrate", "--config", str(config), "--database", f"postgresql://o@127.0.0.1:{port}/db"]) == 1
    assert capsys.readouterr().err.startswith(f"bridge.database: cannot reach PostgreSQL at 127.0.0.1:{port}/db: ")
