"""What rate limits add to the empty-chain path (O2: ≤ 0.2 ms added p50 with Redis limits on), in one run.

    .venv/bin/python bench/limits_overhead.py [--requests 2000] [--no-write]

Eight `toolgate serve` processes in front of one stub upstream (bench/stub.py), differing only in
`limits:`: none; one requests-per-minute rule on Redis, leased (gateway/limits/leases.py: one Lua
round trip per lease) and with a round trip per request (`lease_share: 0, stale_seconds: 0`, the
code before leases); requests, tokens and a budget on Redis, leased/read and with a round trip
each; every kind of limit on Redis (concurrency slots always take a round trip: the charge and
the freed slot ride on the next admission's script); and the same rules counted in the process
(no `limits.redis`). A last gateway without limits is the control. Requests go at concurrency 1, the gateways interleaved in blocks of 20 so drift on a shared
machine hits all alike (bench/overhead.py's `serial`). The limits are high enough never to refuse.
Redis is the machine's (127.0.0.1:6379), under a key prefix of this run, deleted after. Writes
its table between `<!-- limits-overhead:start/end -->` in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.overhead import CHAT, serial  # noqa: E402
from bench.procs import Proc, free_port, machine, write_section  # noqa: E402

REDIS = "redis://127.0.0.1:6379/0"
RPM = [{"per": "route", "requests_per_minute": 10_000_000}]
RATES = [{"name": "rates", "per": "route", "requests_per_minute": 10_000_000, "tokens_per_minute": 1_000_000_000},
         {"name": "spend", "per": "route", "budget": {"usd": 1_000_000, "period": "day"}}]
EVERY = [{**RATES[0], "concurrent": 10_000}, RATES[1]]
PRICES = {"stub": {"input_per_million": 0.4, "output_per_million": 1.6}}
ROUND_TRIP_EACH = {"lease_share": 0, "stale_seconds": 0}
CONFIGS: dict[str, dict[str, Any] | None] = {
    "limits off": None,
    "Redis: requests/min": {"redis": REDIS, "rules": RPM},
    "Redis: requests/min, a round trip each (no leases)": {"redis": REDIS, "rules": RPM, **ROUND_TRIP_EACH},
    "Redis: requests, tokens, budget": {"redis": REDIS, "rules": RATES, "prices": PRICES},
    "Redis: requests, tokens, budget, a round trip each": {"redis": REDIS, "rules": RATES, "prices": PRICES, **ROUND_TRIP_EACH},
    "Redis: requests, tokens, concurrent, budget": {"redis": REDIS, "rules": EVERY, "prices": PRICES},
    "in-process: requests, tokens, concurrent, budget": {"rules": EVERY, "prices": PRICES},
    "limits off, a second process (control)": None,
}
"""The control is the first configuration again in a process of its own, measured last in each
block: what it "adds" is what process placement and position alone make on this machine."""


def config(stub: str, limits: dict[str, Any] | None, prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        "server": {"log_level": "error"}, "auth": {"mode": "none"},
        "upstreams": [{"name": "stub", "kind": "openai", "api_base": f"{stub}/v1"}],
        "routes": [{"model": "bench", "upstream": "stub", "upstream_model": "stub"}],
    }
    if limits is not None:
        found["limits"] = {**limits, "key_prefix": prefix}
    return found


def clean(prefix: str) -> None:
    with redis.Redis.from_url(REDIS) as client:
        found = list(client.scan_iter(match=prefix + "*", count=1000))
        if found:
            client.delete(*found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    python = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-bench-limits-"))
    prefix = f"toolgate-bench-{secrets.token_hex(4)}:"
    procs: list[Proc] = []
    try:
        port = free_port()
        stub = Proc([python, "-m", "uvicorn", "--factory", "bench.stub:create_app", "--port", str(port), "--log-level", "warning"],
                    f"http://127.0.0.1:{port}", "/health").start()
        procs.append(stub)
        targets = []
        pids: dict[str, int] = {}
        for i, (name, limits) in enumerate(CONFIGS.items()):
            path = tmp / f"gw{i}.yaml"
            path.write_text(yaml.safe_dump(config(stub.url, limits, prefix)))
            gport = free_port()
            gw = Proc([python, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(gport)],
                      f"http://127.0.0.1:{gport}", "/readyz").start()
            procs.append(gw)
            targets.append((name, gw.url + "/v1/chat/completions", {"authorization": "Bearer sk-bench"}, CHAT))
            assert gw.proc is not None
            pids[name] = gw.proc.pid
        samples = asyncio.run(serial(targets, False, args.requests, pids))
        ping = ping_p50()
    finally:
        for proc in reversed(procs):
            proc.stop()
        clean(prefix)
    medians = {name: statistics.median(totals) * 1000 for name, (_, totals, _) in samples.items()}
    p95s = {name: sorted(totals)[int(len(totals) * 0.95)] * 1000 for name, (_, totals, _) in samples.items()}
    cpu = {name: used * 1000 for name, (_, _, used) in samples.items()}
    table = render(medians, p95s, cpu, args.requests, ping)
    print(table)
    if not args.no_write:
        write_section("limits-overhead", table)
    return 0


def ping_p50(n: int = 2000) -> float:
    """The p50 of one Redis PING round trip from this process (ms): the floor under a Redis check."""
    with redis.Redis.from_url(REDIS) as client:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def render(medians: dict[str, float], p95s: dict[str, float], cpu: dict[str, float], n: int, ping: float) -> str:
    base = medians["limits off"]
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}; loopback, Redis "
             f"{redis_version()} on the same machine; {n} non-streaming chat requests per gateway at c=1 (gateways "
             "interleaved in blocks of 20, in a new order each round), empty chain, stub upstream; the gateway "
             "process's CPU per request beside (its own work, whatever else the machine runs).", "",
             "| gateway | p50 | added p50 | p95 | gateway CPU per request |", "|---|---|---|---|---|"]
    for name, median in medians.items():
        added = "—" if name == "limits off" else f"{median - base:+.3f} ms"
        lines.append(f"| {name} | {median:.3f} ms | {added} | {p95s[name]:.3f} ms | {cpu[name]:.3f} ms |")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines += ["", f"A Redis PING round trip from the bench process in the same run: {ping:.3f} ms p50; "
              f"load average at the end: {load}."]
    return "\n".join(lines)


def redis_version() -> str:
    with redis.Redis.from_url(REDIS) as client:
        return str(client.info("server")["redis_version"])


if __name__ == "__main__":
    sys.exit(main())
