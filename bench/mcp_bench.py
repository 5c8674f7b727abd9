"""mcp_bridge benchmark: what pooling costs and saves, in one run.

    /work/venv/bin/python bench/mcp_bench.py [--calls 300] [--turns 10]

1. One tool call: through the bridge's pooled session vs the SDK called directly on an open
   session (baseline) vs a new session per call (connect + call + close, shared HTTP client).
   Both server generations: a 2025-11-25 session-ful server and a 2026-07-28 stateless one.
   Target: pooled adds <= 1 ms (median) over the direct call.
2. Prefetch + 3 resources against a server that delays each call by 100 ms. Target: the request
   is delayed ~100 ms (concurrent), not ~400 ms (the sequential sum, measured for contrast).
3. A conversation of N turns x 2 tool calls through the gateway (openai client, scripted model):
   pooled (X-Conversation-Id) vs unpooled (anonymous, a session per request).

Servers run in child processes; the gateway and the scripted model in threads of this process.
Writes bench/results/mcp_bridge.md (date and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import mcp  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from bench.procs import machine  # noqa: E402
from gateway.identity import Identity  # noqa: E402
from gateway.plugins import InspectItem, PluginContext, PluginEnv  # noqa: E402
from plugins.mcp_bridge.config import McpBridgeConfig  # noqa: E402
from plugins.mcp_bridge.operations import call_tool, read_resource  # noqa: E402
from plugins.mcp_bridge.plugin import McpBridgePlugin  # noqa: E402
from tests.support.mcp_servers import HttpSubprocess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "mcp_bridge.md"

NOTES = """## Reading the numbers

- Pooled vs direct: a pooled call adds a job task, a future with its timeout, the pool look-up and
  the result conversion to the SDK call; the median difference is within run-to-run noise.
  Calls are timed in blocks of 20 in alternating order, so drift and connection effects hit both.
- A new session per call pays the handshake (plus the GET stream and DELETE on a session-ful
  server) every time, and loses whatever state the server keeps in the session.
- Prefetch + 3 resources: a request pays the slowest call plus a little, not the sum. The rest is
  CPU: the Python test server spends ~4 ms on each request and handles the four one after another
  (with no delay, the four concurrent calls take about as long as four sequential ones).
- Conversation: the gateway, the scripted model and the openai client share this process (threads,
  one GIL), the MCP server has its own; absolute per-turn times are inflated alike in every row.
- Conversation: `no tools` is the cost of one model call through the gateway and the scripted
  model; a pooled tool turn is two such calls plus two concurrent MCP calls on the open session.
- Run on a shared machine: see the load average above; rerun when it is low for steadier p95s.
"""


def ms(values: list[float]) -> tuple[float, float]:
    """Median and p95 in milliseconds."""
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


async def _allow(item: InspectItem) -> None:
    return None


def ctx(key: str | None, request_id: str = "bench") -> PluginContext:
    """A request context for conversation `key`."""
    return PluginContext(Identity(user_id="bench"), key, request_id, "bench", time.monotonic() + 600, _allow)


async def started_bridge(**fields: Any) -> tuple[McpBridgePlugin, httpx2.AsyncClient]:
    """A started bridge (and the env HTTP client to close after it)."""
    plugin = McpBridgePlugin(McpBridgeConfig.model_validate({"type": "mcp_bridge", "id": "bench", **fields}))
    http = httpx2.AsyncClient()
    await plugin.start(PluginEnv(http=http, metrics=CollectorRegistry(), route="bench"))
    return plugin, http


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    """Seconds one awaited call takes."""
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def tool_call_bench(url: str, calls: int) -> dict[str, list[float]]:
    """Pooled, direct and per-call-session timings, interleaved so drift hits all alike."""
    plugin, http = await started_bridge(endpoint=url)
    shared = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300))
    out: dict[str, list[float]] = {"direct": [], "pooled": [], "per_call": []}
    try:
        async with mcp.Client(streamable_http_client(url, http_client=shared), cache=None) as direct:
            for _ in range(20):  # warm both paths (sessions, tool lists, connections)
                await direct.call_tool("count", {})
                await plugin.call_tool(ctx("conv"), "count", {})

            async def fresh() -> None:
                async with mcp.Client(streamable_http_client(url, http_client=shared), cache=None) as once:
                    await once.call_tool("count", {})

            paths: dict[str, Callable[[], Awaitable[Any]]] = {
                "direct": lambda: direct.call_tool("count", {}),
                "pooled": lambda: plugin.call_tool(ctx("conv"), "count", {}),
            }
            # Blocks of 20 in alternating order: interleaving single calls of two TCP connections
            # trips delayed-ACK timing on loopback and skews whichever path goes second.
            for block in range(max(calls // 20, 2)):
                order = ["direct", "pooled"] if block % 2 == 0 else ["pooled", "direct"]
                for name in order:
                    for _ in range(20):
                        out[name].append(await timed(paths[name]))
            for _ in range(max(calls // 5, 10)):
                out["per_call"].append(await timed(fresh))
    finally:
        await plugin.stop()
        await http.aclose()
        await shared.aclose()
    return out


async def prefetch_bench(url: str, runs: int) -> dict[str, list[float]]:
    """`before_model` with prefetch + 3 resources (concurrent) vs the same four calls in sequence."""
    plugin, http = await started_bridge(
        endpoint=url, prefetchTool="echo", prefetchArguments={"q": "{{last_user_message}}"}, resources="docs://index\nguide\nnotes"
    )
    request = {"messages": [{"role": "user", "content": "what is toolgate?"}]}
    out: dict[str, list[float]] = {"concurrent": [], "sequential": []}
    try:
        await plugin.before_model(ctx("conv"), request)  # session and resource list exist, as on later turns

        async def sequential() -> None:
            await plugin.pool.run("conv", "bench", call_tool("echo", {"q": "x"}, 30))
            for reference in ("docs://index", "guide", "notes"):
                await plugin.pool.run("conv", "bench", read_resource(reference))

        for _ in range(runs):
            out["concurrent"].append(await timed(lambda: plugin.before_model(ctx("conv"), request)))
            out["sequential"].append(await timed(sequential))
    finally:
        await plugin.stop()
        await http.aclose()
    return out


def conversation_bench(url: str, turns: int) -> dict[str, Any]:
    """N turns x 2 tool calls through the gateway, pooled vs unpooled; per-turn latency."""
    import httpx2 as sync_http

    from tests.support.gateway import client, running_gateway, simple_config
    from tests.support.http_server import serve
    from tests.support.upstream import Reply, ScriptedUpstream

    upstream = ScriptedUpstream()
    results: dict[str, Any] = {}
    with serve(upstream.app) as model:
        config = simple_config(model.url, [{"type": "mcp_bridge", "id": "bench", "endpoint": url}])
        config["routes"].append({"model": "plain", "upstream": "scripted", "plugins": []})
        with running_gateway(config) as gw:
            runs = (("pooled", "assistant", {"X-Conversation-Id": "bench-conv"}), ("unpooled", "assistant", {}), ("no tools", "plain", {}))
            for label, route, headers in runs:
                sdk = client(gw, **headers)
                messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
                warm = sdk.chat.completions.create(model=route, messages=messages)  # warm the route
                messages.append({"role": "assistant", "content": warm.choices[0].message.content or ""})
                times: list[float] = []
                for turn in range(turns):
                    if route == "assistant":
                        upstream.push(Reply(tool_calls=[("count", {}), ("echo", {"turn": turn})]))
                    upstream.push(Reply(content=f"answer {turn}"))
                    messages.append({"role": "user", "content": f"turn {turn}"})
                    start = time.perf_counter()
                    answer = sdk.chat.completions.create(model=route, messages=messages)
                    times.append(time.perf_counter() - start)
                    messages.append({"role": "assistant", "content": answer.choices[0].message.content})
                results[label] = times
            metrics = sync_http.get(gw.url + "/metrics").text
    opened = [line for line in metrics.splitlines() if line.startswith("toolgate_mcp_sessions_opened_total")]
    results["sessions_opened_total"] = float(opened[0].rsplit(" ", 1)[1]) if opened else 0.0
    return results


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    """Run the three measurements and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    os.chdir(ROOT)
    sections: list[str] = []

    rows = []
    for label, flags in (("session-ful 2025-11-25", ("--legacy-only",)), ("stateless 2026-07-28", ())):
        server = HttpSubprocess(*flags)
        try:
            timings = asyncio.run(tool_call_bench(server.url, args.calls))
        finally:
            server.stop()
        direct, pooled, per_call = (ms(timings[k]) for k in ("direct", "pooled", "per_call"))
        rows.append((label, f"{direct[0]:.2f} / {direct[1]:.2f}", f"{pooled[0]:.2f} / {pooled[1]:.2f}",
                     f"{pooled[0] - direct[0]:+.2f}", f"{per_call[0]:.2f} / {per_call[1]:.2f}"))
        print(rows[-1], flush=True)
    sections.append("## One tool call (ms, median / p95)\n\n" + table(
        rows, ("server", "SDK direct, open session", "bridge, pooled session", "pooled − direct (median)", "new session per call"))
        + "\n\nTarget: pooled adds <= 1 ms (median) over the direct SDK call — "
        + ("met" if all(float(r[3]) <= 1.0 for r in rows) else "NOT met") + " in this run.")

    server = HttpSubprocess("--legacy-only", "--delay", "0.1")
    try:
        prefetch = asyncio.run(prefetch_bench(server.url, 10))
    finally:
        server.stop()
    concurrent, sequential = ms(prefetch["concurrent"]), ms(prefetch["sequential"])
    sections.append(
        "## Prefetch + 3 resources, server delays each call by 100 ms (ms, median / p95 of 10)\n\n"
        + table([("before_model (concurrent, what a request pays)", f"{concurrent[0]:.1f} / {concurrent[1]:.1f}"),
                 ("the same 4 calls in sequence (contrast)", f"{sequential[0]:.1f} / {sequential[1]:.1f}")],
                ("what", "time"))
        + f"\n\nTarget: ~100 ms, not ~400 ms — the request paid {concurrent[0]:.0f} ms, the sum would be {sequential[0]:.0f} ms."
    )
    print(sections[-1], flush=True)

    server = HttpSubprocess("--legacy-only")
    try:
        convo = conversation_bench(server.url, args.turns)
    finally:
        server.stop()
    rows = []
    for label in ("pooled", "unpooled", "no tools"):
        med, p95 = ms(convo[label])
        rows.append((label, f"{med:.1f} / {p95:.1f}", f"{sum(convo[label]) * 1000:.0f}"))
    sections.append(
        f"## Conversation: {args.turns} turns x 2 tool calls through the gateway (session-ful server)\n\n"
        + table(rows, ("run", "per turn, median / p95 (ms)", f"all {args.turns} turns (ms)"))
        + "\n\nA tool turn is 2 model calls + 2 concurrent MCP calls; `no tools` is the same conversation on a"
        " route without the bridge (1 model call per turn), the gateway + scripted-model baseline."
        + f"\n\nMCP sessions opened in total (both runs, incl. one warm-up request each): {convo['sessions_opened_total']:.0f}"
        f" — pooled: 1 for the whole conversation, warm-up included; unpooled: one per request ({args.turns + 1})."
    )
    print(sections[-1], flush=True)

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        f"# mcp_bridge benchmark\n\n{stamp} — {machine()} — mcp {mcp_version()}"
        f" — load average at the end {os.getloadavg()[0]:.1f}\n\n"
        "`/work/venv/bin/python bench/mcp_bench.py` (servers in child processes, loopback).\n\n"
        + "\n\n".join(sections) + "\n\n" + NOTES
    )
    print(f"wrote {RESULTS}")


def mcp_version() -> str:
    """The installed SDK version."""
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    main()
