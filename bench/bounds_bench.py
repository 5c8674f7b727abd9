"""Bounds benchmark: the pipeline bounds of issue 15, and the result bounds of issue 32 (N2).

    .venv/bin/python bench/bounds_bench.py [--part chain|results|all] [--calls 20] [--result-calls 4]
                                           [--probes 300] [--baseline DIR]

chain (issue 15): one `toolgate serve` process (auth off, one bridge, no connection: the chain
needs none). In the same run: `/healthz` latency of another caller alone (baseline), then the same
while a first caller calls the 48-level chain over and over through `/mcp/<bridge>`; the chain
call's own latency; the server's resident memory before and at its peak during the calls (from
/proc). Targets: the chain refused or bounded in ≤ 100 ms with ≤ 10 MB extra memory, other
callers' latency unchanged. Writes its table between the `bounds` markers of bench/README.md.

results (issue 32, N2), as the probe measured it: a `toolgate serve` process, and a loopback MCP
server in its own process whose tool answers 50 MB (streamed, as a JSON body). A caller makes a
connection to it through the REST API and calls the tool through `/mcp`; then a bridge's pipeline
fans a 3.5 MB input out to 40 tool nodes. Meanwhile another caller's `/healthz` latency (its worst
is the stall), and the server's RSS idle, at its peak and 3 s after (from /proc). With
`--baseline DIR` (a checkout of the code before the bounds, e.g. the original main), the same
phases against that checkout's server in the same run. Targets: no caller stalls another for more
than 0.5 s; RSS never over 2× idle. Writes its table between the `result-bounds` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs import measured_on, write_section  # noqa: E402
from tests.security.test_pipeline_bounds import doubling_chain  # noqa: E402
from tests.security.test_result_bounds import FloodLog, flood_server  # noqa: E402
from tests.support.bridge_servers import edge, graph, node, pipeline, tool_node  # noqa: E402

LEVELS = 48
FLOOD_BYTES = 50_000_000
FAN = 40
FAN_INPUT = 3_500_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"{statistics.median(ordered) * 1000:.2f} / {ordered[int(0.99 * (len(ordered) - 1))] * 1000:.2f}"


async def probe(url: str, n: int) -> list[float]:
    """`n` sequential GET /healthz on one kept-alive connection (the other caller)."""
    samples = []
    async with httpx2.AsyncClient() as http:
        await http.get(url + "/healthz")
        for _ in range(n):
            started = time.perf_counter()
            (await http.get(url + "/healthz")).raise_for_status()
            samples.append(time.perf_counter() - started)
    return samples


async def chain_calls(
    url: str, pid: int, stop: asyncio.Event, samples: list[float], peak: list[float], name: str = "chain"
) -> str:
    async with Client(streamable_http_client(f"{url}/mcp/bench", http_client=httpx2.AsyncClient(timeout=60))) as client:
        text = ""
        while not stop.is_set() or not samples:
            started = time.perf_counter()
            result = await client.call_tool(name, {"q": "hello"})
            samples.append(time.perf_counter() - started)
            peak.append(rss_mib(pid))
            text = result.content[0].text if result.content else ""
    return text


async def run(url: str, pid: int, probes: int, calls: int) -> list[str]:
    async with httpx2.AsyncClient() as http:
        data = doubling_chain(LEVELS)
        data["nodes"] += [{"id": "tin", "kind": "input", "outputs": ["q"]}, {"id": "tout", "kind": "output", "inputs": ["r"]}]
        data["edges"].append({"id": "te", "from": {"node": "tin", "port": "q"}, "to": {"node": "tout", "port": "r"}})
        data["pipelines"].append({"id": "p_trivial", "name": "trivial", "inputNode": "tin", "outputNode": "tout"})
        saved = await http.put(f"{url}/bridges/bench/graph", json=data)
        saved.raise_for_status()
    alone = await probe(url, probes)
    before = rss_mib(pid)
    # warm-up: the first calls allocate what any pipeline call does (sessions, caches)
    warm: list[float] = []
    stop = asyncio.Event()
    stop.set()
    for _ in range(3):
        await chain_calls(url, pid, stop, warm, [])
    before = rss_mib(pid)
    trivial: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(chain_calls(url, pid, stop, trivial, [], "trivial"))
    beside_trivial = await probe(url, probes)
    stop.set()
    await task
    chain: list[float] = []
    peak: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(chain_calls(url, pid, stop, chain, peak))
    during = await probe(url, probes)
    while len(chain) < calls:
        await asyncio.sleep(0.05)
    stop.set()
    answer = await task
    return [
        f"| other caller's `/healthz`, alone (baseline) | {ms(alone)} ms | — |",
        f"| other caller's `/healthz`, while a trivial pipeline (in → out) is called | {ms(beside_trivial)} ms | "
        f"{len(trivial)} trivial calls meanwhile, {ms(trivial)} ms each |",
        f"| other caller's `/healthz`, while the chain is called | {ms(during)} ms | {len(chain)} chain calls meanwhile |",
        f"| the {LEVELS}-level chain call | {ms(chain)} ms | answer: `{answer}` |",
        f"| server memory (RSS) | {before:.1f} MiB before, {max(peak):.1f} MiB peak | +{max(peak) - before:.1f} MiB |",
    ]


def start_gateway(root: Path, config: dict[str, object], folder: str) -> tuple[subprocess.Popen[bytes], str]:
    """`toolgate serve` of the checkout at `root` with `config`, once it is ready."""
    path = Path(folder) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)],
                            cwd=root, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(root)})
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/readyz")
    return proc, url


def wait_ready(url: str) -> None:
    for _ in range(300):
        try:
            if httpx2.get(url).status_code < 500:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def chain_part(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = {
            "upstreams": [{"name": "none", "kind": "inspect"}],
            "routes": [{"model": "none", "upstream": "none"}],
            "server": {"log_level": "warning"},
            "bridge": {"database": "bridge.db", "bridges": [{"id": "bench", "owner": "anonymous"}]},
        }
        proc, url = start_gateway(ROOT, config, folder)
        try:
            rows = asyncio.run(run(url, proc.pid, args.probes, args.calls))
        finally:
            proc.terminate()
            proc.wait(10)
    table = "\n".join([
        f"Measured {measured_on()}; loopback; {args.probes} `/healthz` probes per phase (median / p99).",
        "",
        "| what | median / p99 | note |",
        "|---|---|---|",
        *rows,
    ])
    print(table)
    write_section("bounds", table, Path(args.readme), "pipeline bounds")


# -- results (issue 32, N2) ------------------------------------------------------------------------


def serve_flood(port: int) -> None:
    """The loopback MCP server of the results part (run in its own process)."""
    import uvicorn

    uvicorn.run(flood_server(FloodLog()), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def fan_graph() -> dict[str, object]:
    """in1.q → 40 `take` nodes → out1: one wave of 40 tool nodes, each sent the whole input."""
    nodes = [node("in1", "input", outputs=["q"]), node("out1", "output", inputs=[f"r{i}" for i in range(FAN)])]
    nodes += [tool_node(f"t{i}", "take", connection="fl", inputs=["text"], outputs=["result"]) for i in range(FAN)]
    edges = [edge(f"a{i}", "in1.q", f"t{i}.text") for i in range(FAN)]
    edges += [edge(f"b{i}", f"t{i}.result", f"out1.r{i}") for i in range(FAN)]
    return graph(nodes, edges, [pipeline("fan")])


@dataclass
class Phase:
    """One caller's calls, and what another caller and /proc saw meanwhile."""

    calls: list[float]
    answer: str
    probes: list[float]
    peak: float


async def sample_rss(pid: int, stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak.append(rss_mib(pid))
        await asyncio.sleep(0.01)


async def probe_until(url: str, stop: asyncio.Event) -> list[float]:
    """GET /healthz one after another (another caller, its own connection) until `stop`."""
    samples = []
    async with httpx2.AsyncClient(timeout=120) as http:
        await http.get(url + "/healthz")
        while not stop.is_set() or not samples:
            started = time.perf_counter()
            (await http.get(url + "/healthz")).raise_for_status()
            samples.append(time.perf_counter() - started)
    return samples


async def phase(url: str, pid: int, path: str, tool: str, arguments: dict[str, object], calls: int) -> Phase:
    stop = asyncio.Event()
    peak: list[float] = []
    sampler = asyncio.create_task(sample_rss(pid, stop, peak))
    prober = asyncio.create_task(probe_until(url, stop))
    took: list[float] = []
    answer = ""
    transport = streamable_http_client(f"{url}{path}", http_client=httpx2.AsyncClient(timeout=300),
                                       max_sse_event_size=1024 * 1024 * 1024)
    try:
        async with Client(transport, mode="legacy") as client:
            for _ in range(calls):
                started = time.perf_counter()
                result = await client.call_tool(tool, arguments)
                took.append(time.perf_counter() - started)
                text = result.content[0].text if result.content and isinstance(result.content[0], TextContent) else ""
                answer = text if result.is_error else f"a result of {len(text):,} characters"
                del result, text
    finally:
        stop.set()
        probes = await prober
        await sampler
    return Phase(took, answer, probes, max(peak))


def ms_most(samples: list[float]) -> str:
    """median / max in ms (a handful of calls: a p99 would be the max anyway)."""
    return f"{statistics.median(samples) * 1000:.0f} / {max(samples) * 1000:.0f}"


async def settled_rss(pid: int, seconds: float = 3.0) -> float:
    await asyncio.sleep(seconds)
    return rss_mib(pid)


async def results_run(url: str, pid: int, probes: int, calls: int, flood_url: str) -> list[str]:
    async with httpx2.AsyncClient() as http:
        made = await http.post(f"{url}/connections", json={"id": "mine", "endpoint": f"{flood_url}/mcp"})
        assert made.status_code == 201, made.text
        (await http.put(f"{url}/bridges/fan/graph", json=fan_graph())).raise_for_status()
    # warm-up: what any call allocates (sessions, the tool lists, the pipeline's plan)
    await phase(url, pid, "/mcp", "mine__flood", {"bytes": 1000}, 3)
    await phase(url, pid, "/mcp/fan", "fan", {"q": "x"}, 2)
    idle = await settled_rss(pid, 1.0)
    alone = await probe(url, probes)
    direct = await phase(url, pid, "/mcp", "mine__flood", {"bytes": FLOOD_BYTES}, calls)
    after_direct = await settled_rss(pid)
    fan = await phase(url, pid, "/mcp/fan", "fan", {"q": "z" * FAN_INPUT}, max(1, calls // 2))
    after_fan = await settled_rss(pid)
    stall = max(direct.probes + fan.probes)
    return [
        f"{ms(alone)} ms",
        f"{ms(direct.probes)} ms, worst {max(direct.probes) * 1000:.0f} ms ({len(direct.probes)} probes)",
        f"{ms_most(direct.calls)} ms ({len(direct.calls)} calls): `{direct.answer}`",
        f"{ms(fan.probes)} ms, worst {max(fan.probes) * 1000:.0f} ms ({len(fan.probes)} probes)",
        f"{ms_most(fan.calls)} ms ({len(fan.calls)} calls): `{fan.answer}`",
        f"{idle:.0f} MiB idle, {direct.peak:.0f} peak during the 50 MB calls, {after_direct:.0f} 3 s after",
        f"{fan.peak:.0f} MiB peak during the fan-out, {after_fan:.0f} 3 s after",
        f"stall {stall * 1000:.0f} ms (target ≤ 500); RSS peak {max(direct.peak, fan.peak) / idle:.2f}× idle (target ≤ 2×)",
    ]


def results_for(root: Path, args: argparse.Namespace, flood_url: str) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        config = {
            "upstreams": [{"name": "none", "kind": "inspect"}],
            "routes": [{"model": "none", "upstream": "none"}],
            "server": {"log_level": "warning"},
            "bridge": {
                "database": "bridge.db",
                "apiEndpointAllowPrivate": ["127.0.0.0/8"],  # the caller's connection points at loopback
                "connections": [{"id": "fl", "owner": "anonymous", "endpoint": f"{flood_url}/mcp"}],
                "bridges": [{"id": "fan", "owner": "anonymous", "connections": ["fl"]}],
            },
        }
        proc, url = start_gateway(root, config, folder)
        try:
            return asyncio.run(results_run(url, proc.pid, args.probes, args.result_calls, flood_url))
        finally:
            proc.terminate()
            proc.wait(10)


def results_part(args: argparse.Namespace) -> None:
    port = free_port()
    flood = subprocess.Popen([sys.executable, __file__, "--flood-port", str(port)], cwd=ROOT)
    flood_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(flood_url + "/mcp")
        columns = [("with the bounds", results_for(ROOT, args, flood_url))]
        if args.baseline:
            columns.append((f"before them (`{args.baseline_label}`)", results_for(Path(args.baseline), args, flood_url)))
    finally:
        flood.terminate()
        flood.wait(10)
    what = [
        "another caller's `/healthz` alone",
        "`/healthz` during the 50 MB calls",
        f"one `tools/call` answered with {FLOOD_BYTES / 1e6:.0f} MB (`/mcp`, a connection the caller made)",
        "`/healthz` during the fan-out calls",
        f"a pipeline fanning a {FAN_INPUT / 1e6:.1f} MB input out to {FAN} tool nodes",
        "server memory (RSS), direct calls",
        "server memory (RSS), fan-out",
        "against the targets",
    ]
    table = "\n".join([
        f"Measured {measured_on()}; loopback; {args.probes} `/healthz` probes alone, then probes one after another "
        f"while the calls run (median / p99, and the worst: the stall); {args.result_calls} direct calls, "
        f"{max(1, args.result_calls // 2)} fan-out calls (median / max).",
        "",
        "| what | " + " | ".join(label for label, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
        *(f"| {label} | " + " | ".join(rows[i] for _, rows in columns) + " |" for i, label in enumerate(what)),
    ])
    print(table)
    write_section("result-bounds", table, Path(args.readme), "result bounds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["chain", "results", "all"], default="all")
    parser.add_argument("--calls", type=int, default=20, help="chain calls (chain part)")
    parser.add_argument("--result-calls", type=int, default=4, help="50 MB calls; half as many fan-out calls (results part)")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--baseline", help="a checkout of the code before the result bounds (results part)")
    parser.add_argument("--baseline-label", default="0a1fc24")
    parser.add_argument("--readme", default=str(ROOT / "bench" / "README.md"))
    parser.add_argument("--flood-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_port:
        serve_flood(args.flood_port)
        return
    if args.part in ("chain", "all"):
        chain_part(args)
    if args.part in ("results", "all"):
        results_part(args)


if __name__ == "__main__":
    main()
