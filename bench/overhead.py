"""Gateway overhead on loopback: direct to a stub vs through toolgate (empty chain) — chat
completions, the Responses API and the Messages API — vs the LiteLLM proxy (when
`--litellm-venv PATH` names a venv with `litellm[proxy]`).

Measures, in one run: latency at concurrency 1 (median, p95) and requests/s at concurrency 50,
non-streaming and streaming (time to first byte at c=1). Writes the table into bench/README.md
(section `overhead` with the LiteLLM rows, `overhead-apis` without them).

    python bench/overhead.py [--litellm-venv bench/.litellm-venv] [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.procs import Proc, free_port, machine, write_section  # noqa: E402

CHAT = {"model": "bench", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
RESPONSES = {"model": "bench", "input": "Say hello.", "max_output_tokens": 16}
MESSAGES = {"model": "bench", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
CHAT_PATH = "toolgate, empty chain"
BEFORE = "before, "
"""Rows of the `--before` checkout's gateway start with this."""
BENCH_KEY = "sk-bench-client"
BENCH_KEY_SHA256 = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
"""The gateway runs with API-key auth (issue 35 measures that path); the stub ignores the header."""
AUTH = {"authorization": f"Bearer {BENCH_KEY}"}
Target = tuple[str, str, dict[str, str], dict[str, object]]
"""(row name, URL, headers, request body)."""


async def one(client: httpx2.AsyncClient, url: str, stream: bool, headers: dict[str, str], body: dict[str, object]) -> tuple[float, float]:
    """(time to first body byte, total time) in seconds."""
    started = time.perf_counter()
    first = 0.0
    if stream:
        async with client.stream("POST", url, json={**body, "stream": True}, headers=headers) as response:
            response.raise_for_status()
            async for _ in response.aiter_raw():
                if not first:
                    first = time.perf_counter() - started
        return first, time.perf_counter() - started
    response = await client.post(url, json=body, headers=headers)
    response.raise_for_status()
    elapsed = time.perf_counter() - started
    return elapsed, elapsed


async def serial(targets: list[Target], stream: bool, n: int, pids: dict[str, int]) -> dict[str, tuple[list[float], list[float], float]]:
    """Concurrency 1, targets interleaved in blocks of 20 so drift on a shared machine hits all alike
    (in a new order each round, shuffled with a fixed seed, so no target always follows another server's).
    Per target: (times to first byte, total times, CPU seconds per request of the server process it talks to)."""
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _, _ in targets}
    cpu = {name: 0.0 for name, _, _, _ in targets}
    async with httpx2.AsyncClient(timeout=60) as client:
        for name, url, headers, body in targets:
            for _ in range(30):
                await one(client, url, stream, headers, body)
        for block in range(max(1, n // 20)):
            order = list(targets)
            random.Random(block).shuffle(order)  # the first block after a switch of server runs slower: no target always comes after another server's
            for name, url, headers, body in order:
                used = cpu_seconds(pids[name])
                for _ in range(20):
                    first, total = await one(client, url, stream, headers, body)
                    samples[name][0].append(first)
                    samples[name][1].append(total)
                cpu[name] += cpu_seconds(pids[name]) - used
    return {name: (*samples[name], cpu[name] / len(samples[name][1])) for name in samples}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far: its own work, whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughputs(targets: list[Target], stream: bool, n: int, rounds: int = 3) -> dict[str, float]:
    """Requests per second of each target with 50 concurrent clients: `n` requests each, in
    `rounds` parts taken in turn (so drift on a shared machine hits every target alike)."""
    spent = {name: 0.0 for name, _, _, _ in targets}
    async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=100, max_keepalive_connections=100)) as client:
        for name, url, headers, body in targets:
            await asyncio.gather(*(one(client, url, stream, headers, body) for _ in range(50)))
        for _ in range(rounds):
            for name, url, headers, body in targets:
                spent[name] += await fifty_clients(client, url, stream, headers, body, n // rounds)
    return {name: (n // rounds) * rounds / seconds for name, seconds in spent.items()}


async def fifty_clients(client: httpx2.AsyncClient, url: str, stream: bool, headers: dict[str, str],
                        body: dict[str, object], n: int) -> float:
    """`n` requests from 50 concurrent workers on `client`; the seconds they took."""
    queue = list(range(n))

    async def worker() -> None:
        while queue:
            queue.pop()
            await one(client, url, stream, headers, body)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(50)))
    return time.perf_counter() - started


def summarise(firsts: list[float], totals: list[float], cpu: float, rps: float) -> dict[str, float]:
    totals, firsts = sorted(totals), sorted(firsts)
    return {"median": statistics.median(totals) * 1000, "p95": totals[int(len(totals) * 0.95)] * 1000,
            "ttfb": statistics.median(firsts) * 1000, "cpu": cpu * 1000, "rps": rps}


STUB_COMPLETION = {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Hello from the stub."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


STUB_BATCHES = [[_chunk({"role": "assistant", "content": ""})], *([_chunk({"content": w})] for w in ("Hello ", "from ", "the ", "stub.")),
                [_chunk({}, "stop"), {**_chunk({}), "choices": [], "usage": STUB_COMPLETION["usage"]}]]


def translation_cost(n: int = 5000) -> dict[tuple[str, bool], float]:
    """In-process CPU cost (µs, best of 5) of each dialect's own work for the stub's answer:
    parse + translate the body, then render the completion (json) or encode the chunks (stream)."""
    import json
    import timeit

    from gateway.api.chat import ChatDialect
    from gateway.api.messages import MessagesDialect
    from gateway.api.responses import ResponsesDialect
    from gateway.json_bytes import json_bytes

    dialects = {CHAT_PATH: (ChatDialect(), CHAT), "toolgate, Responses API": (ResponsesDialect(), RESPONSES),
                "toolgate, Messages API": (MessagesDialect(), MESSAGES)}
    costs = {}
    for name, (dialect, body) in dialects.items():
        raw = json.dumps(body)
        raw_stream = json.dumps({**body, "stream": True})

        def whole() -> None:
            json_bytes(dialect.parse(json.loads(raw), {}).render(json.loads(json.dumps(STUB_COMPLETION))))

        def streamed() -> None:
            encoder = dialect.parse(json.loads(raw_stream), {}).encoder()
            for batch in STUB_BATCHES:
                encoder.batch(batch)
            encoder.end()

        for stream, fn in ((False, whole), (True, streamed)):
            costs[(name, stream)] = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    return costs


def gateway_config(stub: str) -> str:
    return f"""
server: {{log_level: info}}
auth: {{mode: api_keys, api_keys: [{{key_sha256: "{BENCH_KEY_SHA256}", user_id: bench}}]}}
upstreams: [{{name: stub, kind: openai, api_base: "{stub}/v1"}}]
routes: [{{model: bench, upstream: stub, upstream_model: stub}}]
"""


def litellm_config(stub: str) -> str:
    return f"""
model_list:
  - model_name: bench
    litellm_params: {{model: openai/stub, api_base: "{stub}/v1", api_key: sk-stub}}
general_settings: {{master_key: sk-bench-master}}
"""


def gateway_proc(python: str, config: Path, tree: Path | None = None) -> Proc:
    """`toolgate serve` on a free port: this checkout's, or the one in `tree` (its package first on sys.path)."""
    port = free_port()
    if tree is None:
        argv = [python, "-m", "gateway.cli", "serve"]
    else:
        argv = [python, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); from gateway.cli import main; sys.exit(main())", "serve"]
    return Proc([*argv, "--config", str(config), "--port", str(port)], f"http://127.0.0.1:{port}", "/readyz")


def api_targets(prefix: str, url: str) -> list[Target]:
    """The three client APIs of one gateway, named `prefix` + the API."""
    return [
        (f"{prefix}empty chain", url + "/v1/chat/completions", AUTH, CHAT),
        (f"{prefix}Responses API", url + "/v1/responses", AUTH, RESPONSES),
        (f"{prefix}Messages API", url + "/v1/messages", {**AUTH, "anthropic-version": "2023-06-01"}, MESSAGES),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--litellm-venv", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of an earlier toolgate (e.g. `git archive REV | tar -x -C DIR`): its gateway is measured in the same rounds")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    python = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-bench-"))
    procs: list[Proc] = []
    loads = [os.getloadavg()[0]]
    try:
        port = free_port()
        stub = Proc([python, "-m", "uvicorn", "--factory", "bench.stub:create_app", "--port", str(port), "--log-level", "warning"],
                    f"http://127.0.0.1:{port}", "/health")
        procs.append(stub.start())
        (tmp / "gw.yaml").write_text(gateway_config(stub.url))
        gw = gateway_proc(python, tmp / "gw.yaml")
        procs.append(gw.start())
        targets: list[Target] = [("direct to the stub", stub.url + "/v1/chat/completions", AUTH, CHAT), *api_targets("toolgate, ", gw.url)]
        if args.before is not None:
            before = gateway_proc(python, tmp / "gw.yaml", args.before.resolve())
            procs.append(before.start())
            targets += api_targets(BEFORE, before.url)
        servers = {proc.url: proc.proc.pid for proc in procs if proc.proc is not None}
        if args.litellm_venv:
            (tmp / "litellm.yaml").write_text(litellm_config(stub.url))
            lport = free_port()
            env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            ll = Proc([str(args.litellm_venv / "bin" / "litellm"), "--config", str(tmp / "litellm.yaml"), "--host", "127.0.0.1",
                       "--port", str(lport), "--num_workers", "1"], f"http://127.0.0.1:{lport}", "/health/liveliness", env=env, timeout=120)
            procs.append(ll.start())
            targets.append(("LiteLLM proxy", ll.url + "/v1/chat/completions", {"authorization": "Bearer sk-bench-master"}, CHAT))
            servers[ll.url] = ll.proc.pid if ll.proc is not None else 0
        pids = {name: next(pid for base, pid in servers.items() if url.startswith(base + "/")) for name, url, _, _ in targets}
        rows = {}
        for stream in (False, True):
            samples = asyncio.run(serial(targets, stream, args.requests, pids))
            rates = asyncio.run(throughputs(targets, stream, args.requests * 3))
            loads.append(os.getloadavg()[0])
            for name, _, _, _ in targets:
                rows[(name, stream)] = summarise(*samples[name], rates[name])
                print(name, "stream" if stream else "json", {k: round(v, 2) for k, v in rows[(name, stream)].items()}, flush=True)
    finally:
        for proc in reversed(procs):
            proc.stop()
    table = render(rows, args.requests, translation_cost(), loads)
    print(table)
    if not args.no_write:
        write_section("overhead" if args.litellm_venv else "overhead-apis", table)
    return 0


def render(rows: dict[tuple[str, bool], dict[str, float]], n: int, costs: dict[tuple[str, bool], float], loads: list[float]) -> str:
    base = {s: rows[("direct to the stub", s)] for s in (False, True)}
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; loopback; API-key auth; {n} requests "
             f"per path at c=1 (paths interleaved in blocks of 20, shuffled each round), {3 * n} at c=50 (in 3 rounds taken in turn); load average "
             f"(1 min) {' / '.join(f'{x:.1f}' for x in loads)} at the start, after json, after stream.", "",
             "| path | mode | c=1 median | added | vs chat path | c=1 p95 | server CPU / request | c=50 req/s | c=50 vs direct | TTFB median | TTFB added |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, stream), r in rows.items():
        b = base[stream]
        build = BEFORE if name.startswith(BEFORE) else "toolgate, "
        chat = rows.get((build + "empty chain", stream))
        added = "—" if name.startswith("direct") else f"+{r['median'] - b['median']:.2f} ms"
        vs_chat = f"{r['median'] - chat['median']:+.2f} ms" if chat is not None and name.startswith(build) and not name.endswith("empty chain") else "—"
        share = "—" if name.startswith("direct") else f"{r['rps'] / b['rps']:.0%}"
        ttfb_added = "—" if name.startswith("direct") or not stream else f"+{r['ttfb'] - b['ttfb']:.2f} ms"
        lines.append(f"| {name} | {'stream' if stream else 'json'} | {r['median']:.2f} ms | {added} | {vs_chat} | {r['p95']:.2f} ms | "
                     f"{r['cpu']:.2f} ms | {r['rps']:.0f} | {share} | {r['ttfb']:.2f} ms | {ttfb_added} |")
    lines += ["", "The dialects' own CPU work, in-process (parse and translate the body, then render the answer or encode the "
              "stream's chunks; best of 5):", "", "| path | json | stream | json vs chat | stream vs chat |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(name for name, _ in costs):
        json_cost, stream_cost = costs[(name, False)], costs[(name, True)]
        vs = ("—", "—") if name == CHAT_PATH else (f"{json_cost - costs[(CHAT_PATH, False)]:+.0f} µs",
                                                   f"{stream_cost - costs[(CHAT_PATH, True)]:+.0f} µs")
        lines.append(f"| {name.removeprefix('toolgate, ')} | {json_cost:.0f} µs | {stream_cost:.0f} µs | {vs[0]} | {vs[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
