"""Audit records across a PostgreSQL outage (issue 33, O4): does the audit log lose anything?

    .venv/bin/python bench/audit_outage_bench.py [--outage 30] [--rate 40] [--sessions 4] [--before TREE]

For each checkout (`--before TREE`, e.g. `git worktree add /tmp/base 0a1fc24`, then this one): a
throwaway PostgreSQL cluster (tests/support/postgres.Cluster), a loopback MCP tool server, and a
real `toolgate serve` of that checkout with the Bridge on the cluster (this checkout also with
`bridge.auditSpool`). `--sessions` MCP sessions call `tools__echo` with a unique `id`, together
about `--rate` calls a second: `--lead` seconds with PostgreSQL up, `--outage` seconds with it
stopped, `--lead` seconds after it is started again. Then it waits (up to `--settle` seconds) until
the audit table holds every call's record, and counts: calls made (answered without error),
records expected (one per such call), found, duplicates (ids found more than once), lost (ids of
answered calls never found), and the drops the replica counted (`toolgate_audit_dropped_total`).

Target: 0 lost, 0 duplicates across a 30 s outage. Writes its table between the `audit-outage`
markers of bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the tests' support modules are imported from here
    sys.path.insert(0, str(ROOT))

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from bench.loadkit import listening_port  # noqa: E402
from bench.procs import edited, measured_on, write_section  # noqa: E402
from tests.support import postgres  # noqa: E402
from tests.support.http_server import serve  # noqa: E402
from tests.support.mcp_servers import McpServerState, http_app  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

PASSWORD = "bench-audit-outage"
PASSWORD_ENV = "TOOLGATE_BENCH_PG_PASSWORD"


@dataclass
class Outcome:
    """What one checkout did across the outage."""

    code: str
    answered: int
    failed: int
    during: int
    found: int
    duplicates: int
    lost: int
    dropped: dict[str, float]
    settle_seconds: float | None


def config(url: str, mcp_url: str, spool: Path | None) -> dict[str, Any]:
    bridge: dict[str, Any] = {
        "database": url, "databasePassword": f"env:{PASSWORD_ENV}",
        "connections": [{"id": "tools", "owner": "anonymous", "endpoint": mcp_url + "/mcp"}],
        "bridges": [{"id": "b1", "owner": "anonymous", "connections": ["tools"]}],
    }
    if spool is not None:
        bridge["auditSpool"] = {"path": str(spool)}
    return {
        "server": {"metrics_public": True, "log_level": "warning"},
        "auth": {"mode": "none"},
        "upstreams": [{"name": "model", "kind": "openai", "api_base": "http://127.0.0.1:9/v1"}],
        "routes": [{"model": "assistant", "upstream": "model", "upstream_model": "m"}],
        "bridge": bridge,
    }


def recorded(url: str) -> list[int]:
    text = postgres.scalar(url, "SELECT coalesce(json_agg((args::json->>'id')::int ORDER BY seq), '[]'::json)::text"
                                " FROM audit WHERE action = 'mcp.tool_call'", PASSWORD)
    return list(json.loads(str(text)))


def dropped(url: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in httpx2.get(url + "/metrics", timeout=10).text.splitlines():
        match = re.match(r'^toolgate_audit_dropped_total\{reason="([^"]+)"\} (\S+)$', line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


async def calls(url: str, sessions: int, rate: float, lead: float, outage: float,
                cluster: postgres.Cluster) -> tuple[list[int], int, int]:
    """Call through `sessions` MCP sessions for lead + outage + lead seconds, the cluster stopped in
    between; the ids answered without error, the count that failed, and how many ran in the outage."""
    answered: list[int] = []
    failed = 0
    during = 0
    phase = "before"
    next_id = iter(range(10**9))
    interval = sessions / rate

    async def session() -> None:
        nonlocal failed, during
        async with Client(streamable_http_client(url + "/mcp/b1", http_client=httpx2.AsyncClient(timeout=60)),
                          mode="legacy") as client:
            while phase != "done":
                started = time.monotonic()
                n = next(next_id)
                try:
                    result = await client.call_tool("tools__echo", {"id": n})
                    ok = not result.is_error
                except Exception:  # a call the replica failed: counted, not expected in the audit log
                    ok = False
                if ok:
                    answered.append(n)
                    during += phase == "outage"
                else:
                    failed += 1
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    tasks = [asyncio.create_task(session()) for _ in range(sessions)]
    await asyncio.sleep(lead)
    await asyncio.to_thread(cluster.stop)
    phase = "outage"
    await asyncio.sleep(outage)
    phase = "after"
    await asyncio.to_thread(cluster.start)
    await asyncio.sleep(lead)
    phase = "done"
    await asyncio.gather(*tasks)
    return answered, failed, during


def run_checkout(tree: Path, spool: bool, args: argparse.Namespace) -> Outcome:
    cluster = postgres.Cluster(password=PASSWORD)
    folder = Path(tempfile.mkdtemp(prefix="toolgate-audit-bench-"))
    try:
        url = cluster.create_database("toolgate")
        with serve(http_app(McpServerState(), legacy_only=True)) as mcp:
            path = folder / "toolgate.yaml"
            path.write_text(yaml.safe_dump(config(url, mcp.url, folder / "spool" if spool else None)))
            env = {**os.environ, PASSWORD_ENV: PASSWORD, "PYTHONPATH": str(tree)}
            with (folder / "gateway.log").open("wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"],
                                        cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                base = ""

                def ready() -> bool:
                    nonlocal base
                    port = listening_port(proc.pid)
                    if port is None:
                        return proc.poll() is not None
                    base = f"http://127.0.0.1:{port}"
                    try:
                        return httpx2.get(base + "/readyz", timeout=2).status_code == 200
                    except httpx2.HTTPError:
                        return False

                if not wait_until(ready, timeout=60, interval=0.1) or proc.poll() is not None:
                    raise RuntimeError(f"{tree}: toolgate serve did not start:\n{(folder / 'gateway.log').read_text()[-3000:]}")
                answered, failed, during = asyncio.run(
                    calls(base, args.sessions, args.rate, args.lead, args.outage, cluster)
                )
                settle = time.monotonic()
                # every answered call's record found, or counted as dropped (those will never come)
                all_in = wait_until(lambda: len(set(recorded(url))) + sum(dropped(base).values()) >= len(answered),
                                    timeout=args.settle, interval=0.5)
                settle_seconds = time.monotonic() - settle if all_in else None
                found = recorded(url)
                drops = dropped(base)
            finally:
                proc.terminate()
                proc.wait(30)
        counts = Counter(found)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                                text=True).stdout.strip()
        return Outcome(
            code=commit, answered=len(answered), failed=failed, during=during, found=len(found),
            duplicates=sum(n - 1 for n in counts.values() if n > 1), lost=len(set(answered) - set(counts)),
            dropped=drops, settle_seconds=settle_seconds,
        )
    finally:
        cluster.close()


def row(label: str, o: Outcome, spool: bool) -> str:
    settled = "never" if o.lost else f"{o.settle_seconds:.1f} s" if o.settle_seconds is not None else "not in time"
    drops = ", ".join(f"{reason} {n:,.0f}" for reason, n in sorted(o.dropped.items())) or "none"
    return (f"| {label} | {'yes' if spool else 'no'} | {o.answered:,} ({o.during:,} in the outage) | {o.failed:,} "
            f"| {o.answered:,} | {o.found:,} | {o.duplicates:,} | {o.lost:,} | {drops} | {settled} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outage", type=float, default=30.0, help="seconds PostgreSQL is stopped")
    parser.add_argument("--lead", type=float, default=3.0, help="seconds of calls before and after the outage")
    parser.add_argument("--rate", type=float, default=40.0, help="calls a second, all sessions together (at most)")
    parser.add_argument("--sessions", type=int, default=4, help="MCP sessions calling at once")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to wait for the records after")
    parser.add_argument("--before", type=Path, help="also run another checkout (the code before the spool)")
    parser.add_argument("--readme", default=str(ROOT / "bench" / "README.md"))
    args = parser.parse_args()
    postgres.require_cluster()
    rows = []
    for tree, spool in ([(args.before.resolve(), False)] if args.before else []) + [(ROOT, True)]:
        outcome = run_checkout(tree, spool, args)
        label = f"{outcome.code}{' (before)' if tree != ROOT else ' + working tree' if edited(tree) else ''}"
        rows.append(row(label, outcome, spool))
        print(rows[-1], flush=True)
    table = "\n".join([
        f"Measured {measured_on()}; PostgreSQL 15 "
        f"(a throwaway cluster) stopped for {args.outage:g} s; {args.sessions} MCP sessions calling `tools__echo` "
        f"through one `toolgate serve`, about {args.rate:g} calls/s, {args.lead:g} s before and after the outage.",
        "",
        "| code | spool | calls answered | calls failed | records expected | found | duplicates | lost "
        "| drops counted | records all in after |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    print(table)
    write_section("audit-outage", table, Path(args.readme), "audit log across a PostgreSQL outage", INTRO)

INTRO = """Target (issue 33, O4): 0 audit records lost, none written twice, across a 30 s PostgreSQL outage
under load. `python bench/audit_outage_bench.py --before TREE` (TREE: `git worktree add /tmp/base
0a1fc24`): each checkout's `toolgate serve` over a throwaway cluster stopped for the outage; the
spool (`bridge.auditSpool`) is configured for this checkout only (the code before has none).
"Records all in after": from the end of the calls until every answered call's record was found
("never": some were dropped)."""


if __name__ == "__main__":
    main()
