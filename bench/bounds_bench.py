"""Pipeline bounds benchmark (issue 15): the 48-level doubling merge chain against other callers.

    .venv/bin/python bench/bounds_bench.py [--calls 20] [--probes 300]

One `toolgate serve` process (auth off, one bridge, no connection: the chain needs none). In the
same run: `/healthz` latency of another caller alone (baseline), then the same while a first caller
calls the 48-level chain over and over through `/mcp/<bridge>`; the chain call's own latency; the
server's resident memory before and at its peak during the calls (from /proc). Targets: the chain
refused or bounded in ≤ 100 ms with ≤ 10 MB extra memory, other callers' latency unchanged.

Writes its table between the `bounds` markers of bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx2
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.security.test_pipeline_bounds import doubling_chain  # noqa: E402

LEVELS = 48


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--readme", default=str(ROOT / "bench" / "README.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        config = {
            "upstreams": [{"name": "none", "kind": "inspect"}],
            "routes": [{"model": "none", "upstream": "none"}],
            "server": {"log_level": "warning"},
            "bridge": {"database": "bridge.db", "bridges": [{"id": "bench", "owner": "anonymous"}]},
        }
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)],
                                cwd=ROOT, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx2.get(url + "/readyz").status_code == 200:
                        break
                except httpx2.HTTPError:
                    pass
                time.sleep(0.1)
            rows = asyncio.run(run(url, proc.pid, args.probes, args.calls))
        finally:
            proc.terminate()
            proc.wait(10)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    table = "\n".join([
        f"Measured {when} on {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}; loopback; "
        f"{args.probes} `/healthz` probes per phase (median / p99).",
        "",
        "| what | median / p99 | note |",
        "|---|---|---|",
        *rows,
    ])
    print(table)
    readme = Path(args.readme)
    text = readme.read_text()
    block = f"<!-- bounds:start -->\n{table}\n<!-- bounds:end -->"
    text = re.sub(r"<!-- bounds:start -->.*<!-- bounds:end -->", lambda m: block, text, flags=re.S)
    readme.write_text(text)


if __name__ == "__main__":
    main()
