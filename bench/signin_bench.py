"""Console sign-in flood benchmark (issue 32, N3): can one tenant sign everyone out of the console?

    .venv/bin/python bench/signin_bench.py [--signins 10050] [--concurrency 8] [--before TREE]

One `toolgate serve` process on loopback (API keys for alice and bob, the Bridge on, so the console
is served). alice signs in once. Then the probe's flood, twice: bob's `--signins` sign-ins with his
own key reusing ONE sign-in form token (as the probe did), then as many with a fresh form each
time (GET the form, post it) — every sign-in as a new browser, so nothing replaces his last
session. During each flood another caller measures `/healthz` one request after another; before
them the same caller alone is the baseline. After each flood: how many of bob's sessions still
open (every session cookie he got, checked on the REST API), and alice's status with her session.

Target: alice keeps her session (200), bob holds at most his per-identity cap, no caller is
stalled by another for more than 0.5 s. `--before TREE` runs the same against another checkout
(e.g. `git worktree add /tmp/base 0a1fc24`) in the same run, for the figures before the fix.

Writes its table between the `signin` markers of bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the bench helpers are imported from here
    sys.path.insert(0, str(ROOT))

from bench.procs import edited, measured_on, write_section  # noqa: E402
SESSION = "toolgate_console"
FORM = "toolgate_console_signin"
TOKEN = re.compile(r'name="signin_token" value="([^"]+)"')
STALL_TARGET_SECONDS = 0.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def session_cookie(response: httpx2.Response) -> str | None:
    """The console session a sign-in answer sets, if any."""
    for header in response.headers.get_list("set-cookie"):
        name, _, rest = header.partition("=")
        if name == SESSION and rest.split(";", 1)[0]:
            return rest.split(";", 1)[0]
    return None


async def form(http: httpx2.AsyncClient) -> str:
    """A fresh sign-in form's token (its cookie has the same value). The Cookie header is explicit
    on every request of this bench, so the client's cookie jar never sends anything."""
    page = await http.get("/console", headers={"cookie": "bench=1"})
    found = TOKEN.search(page.text)
    if found is None:
        raise RuntimeError(f"no sign-in form at /console ({page.status_code})")
    return found.group(1)


async def sign_in(http: httpx2.AsyncClient, key: str, token: str) -> httpx2.Response:
    return await http.post("/console/signin", data={"signin_token": token, "api_key": key},
                           headers={"cookie": f"{FORM}={token}"})


async def status_with(http: httpx2.AsyncClient, cookie: str) -> int:
    """What the Bridge's REST API answers a console session: 200 open, 401 gone."""
    return (await http.get("/bridges", headers={"cookie": f"{SESSION}={cookie}"})).status_code


@dataclass
class Flood:
    """One flood of bob's sign-ins and what another caller saw meanwhile."""

    label: str
    seconds: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    cookies: list[str] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)
    bob_open: int = 0
    alice: int = 0


async def probe_until(url: str, done: asyncio.Event, samples: list[float], at_least: int = 0) -> None:
    """GET /healthz one after another on one kept-alive connection until `done` (the other caller)."""
    async with httpx2.AsyncClient(base_url=url, timeout=30) as http:
        await http.get("/healthz")
        while not done.is_set() or len(samples) < at_least:
            started = time.perf_counter()
            (await http.get("/healthz")).raise_for_status()
            samples.append(time.perf_counter() - started)


async def flood(url: str, key: str, signins: int, concurrency: int, fresh: bool, flood_: Flood) -> None:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        shared = await form(http)
        left = iter(range(signins))

        async def worker() -> None:
            for _ in left:
                token = await form(http) if fresh else shared
                response = await sign_in(http, key, token)
                flood_.statuses[response.status_code] += 1
                cookie = session_cookie(response)
                if cookie:
                    flood_.cookies.append(cookie)

        done = asyncio.Event()
        prober = asyncio.create_task(probe_until(url, done, flood_.probes))
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        flood_.seconds = time.perf_counter() - started
        done.set()
        await prober


async def count_open(url: str, cookies: list[str], concurrency: int) -> int:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        left = iter(cookies)
        open_ = 0

        async def worker() -> None:
            nonlocal open_
            for cookie in left:
                is_open = await status_with(http, cookie) == 200  # awaited first: `open_ +=` would read it before
                open_ += is_open

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return open_


async def run(url: str, keys: dict[str, str], signins: int, concurrency: int, probes: int) -> tuple[list[float], list[Flood]]:
    async with httpx2.AsyncClient(base_url=url, timeout=60) as http:
        signed_in = await sign_in(http, keys["alice"], await form(http))
        alice = session_cookie(signed_in)
        if signed_in.status_code != 303 or alice is None:
            raise RuntimeError(f"alice could not sign in ({signed_in.status_code})")
        alone: list[float] = []
        done = asyncio.Event()
        done.set()
        await probe_until(url, done, alone, probes)
        floods = []
        for label, fresh in (("one form token reused", False), ("a fresh form each time", True)):
            result = Flood(label)
            await flood(url, keys["bob"], signins, concurrency, fresh, result)
            result.bob_open = await count_open(url, result.cookies, concurrency)
            result.alice = await status_with(http, alice)
            floods.append(result)
    return alone, floods


def serve_and_run(tree: Path, signins: int, concurrency: int, probes: int) -> tuple[str, list[float], list[Flood]]:
    """Start `toolgate serve` from `tree` (its `gateway` package first on the path), run, stop."""
    keys = {"alice": "alice-" + secrets.token_hex(16), "bob": "bob-" + secrets.token_hex(16)}
    with tempfile.TemporaryDirectory(prefix="signin-bench-") as folder:
        config = {
            "server": {"log_level": "warning"},
            "auth": {"mode": "api_keys", "api_keys": [{"key": "env:BENCH_ALICE_KEY", "user_id": "alice"},
                                                     {"key": "env:BENCH_BOB_KEY", "user_id": "bob"}]},
            "upstreams": [{"name": "none", "kind": "inspect"}],
            "routes": [{"model": "none", "upstream": "none"}],
            "bridge": {"enabled": True, "database": str(Path(folder) / "bridge.db")},
        }
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        env = {**os.environ, "BENCH_ALICE_KEY": keys["alice"], "BENCH_BOB_KEY": keys["bob"], "PYTHONPATH": str(tree)}
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)],
                                cwd=tree, env=env, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx2.get(url + "/readyz").status_code == 200:
                        break
                except httpx2.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the gateway did not start")
                time.sleep(0.1)
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
            alone, floods = asyncio.run(run(url, keys, signins, concurrency, probes))
        finally:
            proc.terminate()
            proc.wait(10)
    return commit, alone, floods


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    return f"{statistics.median(ordered) * 1000:.1f} / {p99 * 1000:.1f} / {ordered[-1] * 1000:.1f}"


def rows(code: str, alone: list[float], floods: list[Flood]) -> list[str]:
    out = [f"| {code} | — (another caller alone) | — | — | — | — | {ms(alone)} |"]
    for f in floods:
        statuses = ", ".join(f"{n:,}× {s}" for s, n in sorted(f.statuses.items()))
        out.append(
            f"| {code} | {f.label} | {f.seconds:.1f} s ({sum(f.statuses.values()) / f.seconds:,.0f}/s): {statuses} "
            f"| {f.bob_open:,} of {len(f.cookies):,} | {f.alice} | {'yes' if max(f.probes) <= STALL_TARGET_SECONDS else 'NO'} "
            f"| {ms(f.probes)} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--signins", type=int, default=10_050, help="bob's sign-ins per flood (the probe: 10,050)")
    parser.add_argument("--concurrency", type=int, default=8, help="bob's sign-ins in flight at once")
    parser.add_argument("--probes", type=int, default=300, help="/healthz probes of the other caller alone")
    parser.add_argument("--before", type=Path, help="also run another checkout (the code before the fix)")
    parser.add_argument("--readme", default=str(ROOT / "bench" / "README.md"))
    args = parser.parse_args()
    table_rows = []
    for tree in ([args.before] if args.before else []) + [ROOT]:
        commit, alone, floods = serve_and_run(tree.resolve(), args.signins, args.concurrency, args.probes)
        label = f"{commit}{' (before)' if tree == args.before else ' + working tree' if edited(tree) else ''}"
        table_rows += rows(label, alone, floods)
    table = "\n".join([
        f"Measured {measured_on()}; loopback; "
        f"{args.signins:,} sign-ins of bob per flood, {args.concurrency} at once; the other caller's `/healthz` "
        f"one request after another (median / p99 / max).",
        "",
        "| code | bob's flood | time: answers | bob's sessions open after | alice's session after | no stall > 0.5 s | other caller's `/healthz` ms |",
        "|---|---|---|---|---|---|---|",
        *table_rows,
    ])
    print(table)
    write_section("signin", table, Path(args.readme), "console sign-in flood")


if __name__ == "__main__":
    main()
