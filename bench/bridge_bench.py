"""Bridge benchmark: pipeline overhead over one tool delay, and the audit log's cost per call.

    /work/venv/bin/python bench/bridge_bench.py [--repeat 15] [--calls 300]

1. A pipeline of N independent tool nodes (each a tool that waits DELAY) feeding one merge, for
   N = 1, 5, 20, called through `/mcp/<bridge>` with the SDK client. Target: ≈ DELAY + ≤ 10 ms.
   Baseline in the same run: one direct call of the same tool on a fresh session (what one node costs).
2. The audit log's cost: `tools/call` of a no-delay tool through `/mcp`, audit on (SQLite) versus a
   store that drops every record; plus the in-process cost of reducing arguments and queueing.
3. A federated call (`tools__echo` through `/mcp`, the Bridge reusing the caller's upstream session,
   F15) versus the same call made directly on an open session, at concurrency 1 and 10, alternated
   round by round in the same run. Targets (issue 35): ≤ 1 ms added at p50 at C = 1, federated p50 ≤ 1.5×
   the direct p50 at C = 10. Each table row carries the load average around its rounds (the machine is shared).

`--only federated` runs section 3 alone (writes bench/results/bridge_federated.md); `--baseline DIR`
adds the Bridge of another checkout of the code (its process served by its own copy of this file)
to the same rounds, for a before/after under the same load. `--profile OUT.md [--handshake-only]
[--baseline DIR] [--concurrency C]` profiles the Bridge (this one, or DIR's) with py-spy at C = 10
(or C) for 20 s and writes a summary (bench/profiles/bridge-*.md); py-spy is not a dependency:
`pip install py-spy==0.4.1` first.

Writes a table to bench/results/bridge.md (with date and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import platform
import re
import resource
import socket
import subprocess
import threading
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from gateway.bridge.audit import AuditWriter  # noqa: E402
from gateway.bridge.audit_args import reduce_args  # noqa: E402
from gateway.bridge.config import BridgeConfig  # noqa: E402
from gateway.bridge.records import AuditRecord  # noqa: E402
from bench.loadkit import cpu_seconds  # noqa: E402
from gateway.bridge.store_sqlite import SqliteStore  # noqa: E402
from tests.support import bridge_servers, canary  # noqa: E402
from tests.support.bridge_servers import CallLog, bridge_app, edge, graph, mcp_http, node, pipeline, tool_node, tool_server  # noqa: E402
from tests.support.http_server import ServerThread  # noqa: E402
from tests.support.mcp_servers import McpServerState, recording_app  # noqa: E402

DELAY = 0.1
SIZES = (1, 5, 20)


@contextlib.contextmanager
def serve(app: Any) -> Iterator[ServerThread]:
    """Like tests.support.http_server.serve, with TCP_NODELAY on the listening socket: the accepted
    sockets of a pre-bound uvicorn socket otherwise keep Nagle on, and every POST on a kept-alive
    connection waits ~40 ms for a delayed ACK (measured here; `uvicorn --host/--port` is not affected)."""
    server = ServerThread(app)
    server.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class DroppingStore(SqliteStore):
    """Accepts audit records and writes none (the 'audit off' baseline)."""

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        return None


class FailingStore(SqliteStore):
    """Raises on every audit write (a broken store)."""

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        raise OSError("disk on fire")


@dataclass(frozen=True)
class Served:
    """A server subprocess: its base URL and its pid (to read its CPU time)."""

    url: str
    pid: int


@contextlib.contextmanager
def tool_process(delay: float, *, handshake_only: bool = False) -> Iterator[Served]:
    """The tool server in its own process (its CPU off the Bridge's GIL); yields it. With
    `handshake_only` it refuses the 2026-07-28 generation, so clients open 2025-11-25 sessions (like
    most public servers today)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--tool-server", str(delay), *(["--handshake-only"] if handshake_only else [])],
        stdout=subprocess.PIPE, text=True,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        yield Served(proc.stdout.readline().strip(), proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def bridge_process(tools_url: str, checkout: Path | None = None) -> Iterator[Served]:
    """The Bridge (one connection `tools`, caller alice) in its own process, as deployed; yields it.
    With `checkout`, the Bridge of that copy of the code (its own bench/bridge_bench.py serves it)."""
    script = checkout / "bench" / "bridge_bench.py" if checkout is not None else Path(__file__)
    proc = subprocess.Popen(
        [sys.executable, str(script), "--bridge-server", tools_url], stdout=subprocess.PIPE, text=True,
        stderr=subprocess.DEVNULL, env={**os.environ, "BENCH_ALICE_KEY": canary.ALICE_KEY},
    )
    try:
        assert proc.stdout is not None
        yield Served(proc.stdout.readline().strip(), proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def run_bridge_server(tools_url: str) -> None:
    """Subprocess entry: serve the Bridge over the tool server and print the URL (the parent's key is alice's)."""
    bridge_servers.KEYS[os.environ["BENCH_ALICE_KEY"]] = bridge_servers.KEYS[canary.ALICE_KEY]
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections wait in the backlog until the app has started
    with tempfile.TemporaryDirectory() as tmp:
        app = bridge_app(config(tools_url, "fed.db"), Path(tmp)).app
        # As `toolgate serve` runs it: uvicorn's defaults (uvloop, httptools), no access log.
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, ws="none"))
        print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
        server.run(sockets=[sock])


def run_tool_server(delay: float, handshake_only: bool = False) -> None:
    """Subprocess entry: serve the test tools and print the URL."""
    app = tool_server(CallLog(), delay=delay)
    if handshake_only:
        app = recording_app(McpServerState(), app, legacy_only=True)
    with serve(app) as server:
        print(server.url, flush=True)
        threading.Event().wait()


def fan_out(sizes: Sequence[int]) -> dict[str, Any]:
    """One graph with a pipeline `fan<N>` per size: input → N tool nodes → merge → output."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    pipelines = []
    for n in sizes:
        p = f"n{n}_"
        nodes += [node(f"{p}in", "input", outputs=["query"]), node(f"{p}m", "merge"), node(f"{p}out", "output", inputs=["all"])]
        nodes += [tool_node(f"{p}t{i}", "slow_a", inputs=["query"], outputs=["result"]) for i in range(n)]
        edges += [edge(f"{p}i{i}", f"{p}in.query", f"{p}t{i}.query") for i in range(n)]
        edges += [edge(f"{p}o{i}", f"{p}t{i}.result", f"{p}m.r{i}") for i in range(n)]
        edges.append(edge(f"{p}e", f"{p}m.out", f"{p}out.all"))
        pipelines.append(pipeline(f"fan{n}", f"{p}in", f"{p}out"))
    return graph(nodes, edges, pipelines)


def ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.9 * (len(ordered) - 1))] * 1000


async def timed_calls(url: str, name: str, args: dict[str, Any], repeat: int) -> list[float]:
    samples = []
    async with Client(streamable_http_client(url, http_client=mcp_http("alice-key"))) as client:
        await client.call_tool(name, args)  # warm-up (tool list cache, discover result)
        for _ in range(repeat):
            started = time.perf_counter()
            result = await client.call_tool(name, args)
            samples.append(time.perf_counter() - started)
            assert not result.is_error, result
    return samples


async def direct_open_session(url: str, repeat: int) -> list[float]:
    """One call at a time on one open SDK session: a tool delay plus one round trip."""
    samples = []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            for _ in range(repeat + 1):
                started = time.perf_counter()
                await client.call_tool("slow_a", {"query": "q"})
                samples.append(time.perf_counter() - started)
    return samples[1:]


async def direct_open_sessions(url: str, n: int, repeat: int) -> list[float]:
    """N parallel calls on N sessions opened beforehand: the tool server's own cost of N at once."""
    samples = []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(streamable_http_client(url, http_client=http))) for _ in range(n)]
        for client in clients:
            await client.call_tool("slow_a", {"query": "warm"})
        for _ in range(repeat):
            started = time.perf_counter()
            await asyncio.gather(*(client.call_tool("slow_a", {"query": "q"}) for client in clients))
            samples.append(time.perf_counter() - started)
    return samples


async def direct_fresh_sessions(url: str, n: int, repeat: int) -> list[float]:
    """N parallel calls straight to the tool server, each on a fresh SDK session: the floor."""

    async def one(http: httpx2.AsyncClient) -> None:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            await client.call_tool("slow_a", {"query": "q"})

    samples = []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http:
        for _ in range(repeat + 1):
            started = time.perf_counter()
            await asyncio.gather(*(one(http) for _ in range(n)))
            samples.append(time.perf_counter() - started)
    return samples[1:]


def config(tools_url: str, database: str) -> BridgeConfig:
    return BridgeConfig.model_validate(
        {
            "database": database,
            "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools_url}/mcp"}],
            "bridges": [{"id": "bench", "owner": "alice", "connections": ["tools"]}],
        }
    )


async def pipeline_rows(repeat: int) -> list[str]:
    rows = []
    with tool_process(DELAY) as tools, tempfile.TemporaryDirectory() as tmp:
        tools_url = tools.url
        med, p90 = ms(await direct_open_session(f"{tools_url}/mcp", repeat))
        rows.append(f"| baseline: 1 direct call on an open session (no Bridge) | 1 | {med:.1f} | {p90:.1f} | {med - DELAY * 1000:+.1f} |")
        for n in SIZES[1:]:
            med, p90 = ms(await direct_open_sessions(f"{tools_url}/mcp", n, repeat))
            rows.append(f"| baseline: N parallel direct calls on N open sessions (no Bridge) | {n} | {med:.1f} | {p90:.1f} | {med - DELAY * 1000:+.1f} |")
        for n in SIZES:
            med, p90 = ms(await direct_fresh_sessions(f"{tools_url}/mcp", n, repeat))
            rows.append(f"| baseline: N parallel direct calls, fresh SDK session each | {n} | {med:.1f} | {p90:.1f} | {med - DELAY * 1000:+.1f} |")
        app = bridge_app(config(tools_url, "bench.db"), Path(tmp))
        with serve(app.app) as bridge:
            async with mcp_http("alice-key") as http:
                response = await http.put(f"{bridge.url}/bridges/bench/graph", json=fan_out(SIZES))
                response.raise_for_status()
            for n in SIZES:
                med, p90 = ms(await timed_calls(f"{bridge.url}/mcp/bench", f"fan{n}", {"query": "q"}, repeat))
                rows.append(f"| pipeline through the Bridge | {n} | {med:.1f} | {p90:.1f} | {med - DELAY * 1000:+.1f} |")
    return rows


async def audit_rows(calls: int) -> list[str]:
    """Two Bridges, audit on and audit dropped, called alternately so drift hits both alike."""
    rows = []
    with tool_process(0) as tools, tempfile.TemporaryDirectory() as tmp:
        tools_url = tools.url
        on = bridge_app(config(tools_url, "on.db"), Path(tmp))
        off = bridge_app(config(tools_url, "off.db"), Path(tmp), store=DroppingStore(Path(tmp) / "drop.db"))
        broken = bridge_app(config(tools_url, "broken.db"), Path(tmp), store=FailingStore(Path(tmp) / "fail.db"))
        with serve(on.app) as on_srv, serve(off.app) as off_srv, serve(broken.app) as broken_srv:
            samples: dict[str, list[float]] = {
                "audit on (SQLite)": [], "store that discards every record": [], "audit store raises on every write": []
            }
            async with contextlib.AsyncExitStack() as stack:
                clients = {}
                for label, srv in zip(samples, (on_srv, off_srv, broken_srv), strict=True):
                    http = mcp_http("alice-key")
                    clients[label] = await stack.enter_async_context(
                        Client(streamable_http_client(f"{srv.url}/mcp", http_client=http))
                    )
                    await clients[label].call_tool("tools__echo", {"text": "warm"})
                for _ in range(calls):
                    for label, client in clients.items():
                        started = time.perf_counter()
                        result = await client.call_tool("tools__echo", {"text": "hello", "query": "q"})
                        samples[label].append(time.perf_counter() - started)
                        assert not result.is_error
        for (label, values), app in zip(samples.items(), (on, off, broken), strict=True):
            med, p90 = ms(values)
            written = app.registry.get_sample_value("toolgate_audit_written_total") or 0
            dropped = app.registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) or 0
            rows.append(
                f"| tools/call via /mcp, {label} ({written:.0f} accepted by the store, {dropped:.0f} dropped) | {calls} | {med:.2f} | {p90:.2f} |"
            )
    store = DroppingStore(":memory:")
    writer = AuditWriter(store, queue_size=calls * 10, registry=CollectorRegistry())
    args = {"owner": "acme", "repo": "site", "body": "x" * 500, "token": "ghp_" + "a" * 36}
    started = time.perf_counter()
    for _ in range(calls * 10):
        writer.submit(AuditRecord(time.time(), "mcp.tool_call", "a", None, "t", "federation", False,
                                  reduce_args(args), "success", 1.0))
    per_call_us = (time.perf_counter() - started) / (calls * 10) * 1e6
    rows.append(f"| in-process: reduce args + queue one record | {calls * 10} | {per_call_us / 1000:.4f} | — |")
    return rows


CONCURRENCY = (1, 10)


@dataclass
class Side:
    """One side of the comparison: per-call latencies, and the CPU seconds each process spent on them."""

    samples: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=lambda: {"clients": 0.0, "Bridge": 0.0, "tool server": 0.0})

    def cpu_ms_per_call(self, who: str) -> float:
        return self.cpu[who] / len(self.samples) * 1000


def own_cpu_seconds() -> float:
    """CPU time of this process (the clients), all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def side_by_side(
    tools: Served, bridges: dict[str, Served], concurrency: int, rounds: int, per_round: int
) -> dict[str, Side]:
    """`echo` by C direct clients vs C clients of each Bridge (all caller alice, so a Bridge's calls
    share alice's one upstream session), rounds alternating; each process's CPU time per side (the
    Bridge column of the direct side: the first Bridge, idle)."""
    names = ["direct", *bridges]
    sides = {name: Side() for name in names}
    bridge_of = {"direct": next(iter(bridges.values())), **bridges}
    async with contextlib.AsyncExitStack() as stack:
        direct_http = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)))
        clients: dict[str, list[tuple[Client, str]]] = {name: [] for name in names}
        for _ in range(concurrency):
            client = Client(streamable_http_client(f"{tools.url}/mcp", http_client=direct_http))
            clients["direct"].append((await stack.enter_async_context(client), "echo"))
            for name, bridge in bridges.items():
                http = await stack.enter_async_context(mcp_http("alice-key"))
                client = Client(streamable_http_client(f"{bridge.url}/mcp", http_client=http))
                clients[name].append((await stack.enter_async_context(client), "tools__echo"))

        async def caller(client: Client, tool: str, out: list[float], n: int) -> None:
            for _ in range(n):
                started = time.perf_counter()
                result = await client.call_tool(tool, {"text": "hello"})
                out.append(time.perf_counter() - started)
                assert not result.is_error, result

        def cpu_now(bridge: Served) -> dict[str, float]:
            return {"clients": own_cpu_seconds(), "Bridge": cpu_seconds(bridge.pid), "tool server": cpu_seconds(tools.pid)}

        for pairs in clients.values():  # warm-up: listings, upstream sessions
            await asyncio.gather(*(caller(c, t, [], 2) for c, t in pairs))
        for _ in range(rounds):
            for name, pairs in clients.items():
                side, before = sides[name], cpu_now(bridge_of[name])
                await asyncio.gather(*(caller(c, t, side.samples, per_round) for c, t in pairs))
                for who, spent in cpu_now(bridge_of[name]).items():
                    side.cpu[who] += spent - before[who]
    return sides


async def federated_rows(rounds: int, per_round: int = 20, baseline: Path | None = None) -> list[str]:
    """Direct vs federated `echo`, for a handshake-only and a stateless tool server, at each
    concurrency; with `baseline` (another checkout), its Bridge too, in the same rounds."""
    rows = []
    for generation, handshake_only in (("2025-11-25 sessions", True), ("stateless 2026-07-28", False)):
        with contextlib.ExitStack() as stack:
            tools = stack.enter_context(tool_process(0, handshake_only=handshake_only))
            bridges = {"federated through /mcp": stack.enter_context(bridge_process(tools.url))}
            if baseline is not None:
                bridges[f"federated through /mcp, {baseline.name}"] = stack.enter_context(bridge_process(tools.url, baseline))
            for concurrency in CONCURRENCY:
                load_before = os.getloadavg()[0]
                sides = await side_by_side(tools, bridges, concurrency, rounds, per_round)
                load = f"{load_before:.1f}–{os.getloadavg()[0]:.1f}"
                direct_p50, _ = ms(sides["direct"].samples)
                for name, side in sides.items():
                    p50, p90 = ms(side.samples)
                    what = "direct, open session" if name == "direct" else name
                    added = "—" if name == "direct" else f"{p50 - direct_p50:+.2f}"
                    ratio = "—" if name == "direct" else f"{p50 / direct_p50:.2f}×"
                    cpu = " | ".join(f"{side.cpu_ms_per_call(who):.2f}" for who in ("clients", "Bridge", "tool server"))
                    rows.append(
                        f"| {generation}: {what} | {concurrency} | {len(side.samples)} | {p50:.2f} | {p90:.2f} | {added} | {ratio} | {cpu} | {load} |"
                    )
    return rows


def cpu_model() -> str:
    """The CPU's model name and the flags that tell machines apart (AVX2, AVX-512, VNNI), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    shown = [flag for flag in ("avx2", "avx512f", "avx512_vnni", "avx_vnni") if flag in flags]
    return f"{fields.get('model name', platform.machine())} (flags: {', '.join(shown) or 'no AVX2'})"


def header() -> list[str]:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {cpu_model()}, Python {platform.python_version()}"
    return [
        f"Measured {when} on {machine}, {os.cpu_count()} CPUs (shared with other work); everything on loopback",
        "(the Bridge in its own process under uvicorn's defaults — uvloop, httptools — as `toolgate serve` runs it;",
        f"the tool server in another; the clients in the benchmark process). Command: `python bench/bridge_bench.py {' '.join(sys.argv[1:])}`.",
    ]


def federated_section(rows: list[str]) -> list[str]:
    return [
        "## Federated call vs direct call (F15)", "",
        "`echo` (no delay) on the tool server; each of C clients calls one after another, all C at once;",
        "direct and federated rounds alternate so drift hits both alike. Targets (issue 35): ≤ 1 ms added at p50",
        "at C = 1; at C = 10, federated p50 ≤ 1.5× the direct p50.",
        "CPU: user + system time of each process over its side's rounds, per call (the clients: this process).",
        "Load: the 1-minute load average before and after the rows' rounds.", "",
        "| what | C | calls | p50 ms | p90 ms | added at p50 ms | × direct | CPU ms/call: clients | Bridge | tool server | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
    ]


async def main(repeat: int, calls: int) -> str:
    pipe = await pipeline_rows(repeat)
    audit = await audit_rows(calls)
    federated = await federated_rows(max(repeat // 3, 3))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {platform.processor() or platform.platform()}, Python {platform.python_version()}"
    lines = [
        "# Bridge benchmark", "",
        f"Measured {when} on {machine}, {os.cpu_count()} CPUs; everything on loopback",
        f"(the Bridge under uvicorn in a thread of the benchmark process, the tool server in a subprocess). Tool delay: {DELAY * 1000:.0f} ms; "
        f"{repeat} calls per row after one warm-up. Command: `/work/venv/bin/python bench/bridge_bench.py`.",
        "", "## Pipeline of N independent nodes + merge (one wave of tools)", "",
        "| what | N | median ms | p90 ms | over one tool delay ms |", "|---|---|---|---|---|", *pipe,
        "", "## Audit log cost per call", "",
        "| what | calls | median ms | p90 ms |", "|---|---|---|---|", *audit, "",
        *header(), "", *federated_section(federated),
        "## Reading", "",
        "- One wave, not N: the N tool calls of a wave overlap, so N = 20 costs far less than 20 delays.",
        "- Compare each pipeline row with the baseline of the same N on open sessions (no Bridge, no session",
        "  set-up): that is what the tool server and the SDK client cost for N calls at once on these 2 shared",
        "  cores. The Bridge's own share (its endpoint, the graph, one fresh session per node as F10 asks) is",
        "  the difference. Per node the Bridge spends ~3 ms of CPU on the fresh session (one `tools/call`",
        "  request, the connection's discover result reused); the 'fresh SDK session each' rows show what the",
        "  same sessions cost a naive client (probe + listing before each call).",
        "- Audit: the audited rows (SQLite, a store that discards, a store that fails every write) differ by",
        "  less than the run-to-run noise; the in-process cost of reducing the arguments and queueing the",
        "  record is the last row. The store write happens in a",
        "  background task, off the call's path.",
        "- The machine is shared with other work: rows move by ±30 % between runs.", "",
    ]
    return "\n".join(lines)


PROFILE_SECONDS = 20
PROFILE_FRAMES = re.compile(
    r"gateway/|mcp/|httpx2/_client|httpcore2/_async/connection_pool|uvicorn/protocols|starlette/routing|anyio/_core/_tasks|audit"
)
PROFILE_PACKAGES = (
    "gateway/mcp", "gateway/bridge", "gateway/", "mcp_types", "mcp/server", "mcp/client", "mcp/shared", "httpx2",
    "httpcore2", "h11", "pydantic", "uvicorn", "starlette", "anyio", "asyncio", "concurrent/futures", "json", "contextlib",
)


async def drive(url: str, concurrency: int, seconds: float) -> int:
    """C clients (caller alice) calling `tools__echo` through `/mcp` one after another for `seconds`."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(concurrency):
            http = await stack.enter_async_context(mcp_http("alice-key"))
            clients.append(await stack.enter_async_context(Client(streamable_http_client(f"{url}/mcp", http_client=http))))
        await asyncio.gather(*(c.call_tool("tools__echo", {"text": "warm"}) for c in clients))
        end, calls = time.monotonic() + seconds, 0

        async def one(client: Client) -> None:
            nonlocal calls
            while time.monotonic() < end:
                assert not (await client.call_tool("tools__echo", {"text": "hello"})).is_error
                calls += 1

        await asyncio.gather(*(one(c) for c in clients))
        return calls


def profile_summary(raw: Path, calls: int, title: str, concurrency: int = 10) -> str:
    """A py-spy raw profile as markdown: own time by package, inclusive time of the request path's frames."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        total += int(count)
        path = re.search(r"\((.*?):\d+\)", frames[-1])
        leaf = path.group(1) if path else frames[-1]
        own[next((p.rstrip("/") for p in PROFILE_PACKAGES if p in leaf), "other")] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    lines = [
        f"# {title}", "", *header(), "",
        f"py-spy 0.4.1 (`record --gil -r 200`, only the thread holding the GIL: Python CPU time) on the Bridge process for "
        f"{PROFILE_SECONDS} s while {concurrency} client(s) call `tools__echo` through `/mcp` ({calls} calls); {total} samples.",
        "",
        "Own time by package (the innermost frame's):", "", "| package | share |", "|---|---|",
        *(f"| {name} | {100 * n / total:.1f} % |" for name, n in own.most_common(16)), "",
        "Inclusive time of the request path's frames (≥ 3 %):", "", "| frame | share |", "|---|---|",
        *(f"| `{frame[:110]}` | {100 * n / total:.1f} % |" for frame, n in inclusive.most_common(400)
          if n / total >= 0.03 and PROFILE_FRAMES.search(frame)), "",
    ]
    return "\n".join(lines)


def profile(out: Path, handshake_only: bool, checkout: Path | None, concurrency: int = 10) -> str:
    """Profile the Bridge (of `checkout`, default this one) at C = `concurrency` with py-spy (from this venv)."""
    spy = Path(sys.executable).with_name("py-spy")
    with tool_process(0, handshake_only=handshake_only) as tools, bridge_process(tools.url, checkout) as bridge:
        asyncio.run(drive(bridge.url, 1, 1))
        raw = out.with_suffix(".raw")
        recorder = subprocess.Popen(
            [str(spy), "record", "-p", str(bridge.pid), "-r", "200", "-d", str(PROFILE_SECONDS), "-f", "raw", "-o", str(raw),
             "--nonblocking", "--gil"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        calls = asyncio.run(drive(bridge.url, concurrency, PROFILE_SECONDS - 2))
        recorder.wait()
    generation = "2025-11-25 sessions" if handshake_only else "stateless 2026-07-28"
    return profile_summary(raw, calls, f"Bridge profile, {generation} tool server, C = {concurrency}", concurrency)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bridge.md"))
    parser.add_argument("--tool-server", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["federated"], default=None, help="run one section")
    parser.add_argument(
        "--profile", type=Path, default=None,
        help="profile the Bridge at C = 10 with py-spy (pip install py-spy into the venv) and write a markdown summary here",
    )
    parser.add_argument("--concurrency", type=int, default=10, help="with --profile: this many clients calling at once")
    parser.add_argument("--bridge-server", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--handshake-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--baseline", type=Path, default=None,
        help="with --only federated: also the Bridge of this other checkout (e.g. `git worktree add ../base main`), same rounds",
    )
    ns = parser.parse_args()
    if ns.tool_server is not None:
        run_tool_server(ns.tool_server, ns.handshake_only)
        sys.exit(0)
    if ns.bridge_server is not None:
        run_bridge_server(ns.bridge_server)
        sys.exit(0)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("httpx2", "mcp", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if ns.concurrency < 1:
        parser.error(f"--concurrency must be at least 1, not {ns.concurrency}")
    if ns.profile is not None:
        ns.profile.write_text(profile(ns.profile, ns.handshake_only, ns.baseline, ns.concurrency), encoding="utf-8")
        print(ns.profile.read_text(encoding="utf-8"))
        sys.exit(0)
    if ns.only == "federated":
        rows = asyncio.run(federated_rows(max(ns.repeat // 3, 3), baseline=ns.baseline))
        report = "\n".join(["# Bridge benchmark: federated calls", "", *header(), "", *federated_section(rows)])
        ns.out = str(Path(ns.out).with_name("bridge_federated.md"))
    else:
        report = asyncio.run(main(ns.repeat, ns.calls))
    Path(ns.out).write_text(report, encoding="utf-8")
    print(report)
