"""What OpenTelemetry tracing (O3) adds to the empty-chain path, in one run.

    .venv/bin/python bench/tracing_overhead.py [--requests 600] [--no-write]

Three gateways in their own processes, on one stub model, measured at concurrency 1 with their
requests interleaved in blocks of 20 (drift on a shared machine hits all alike):

- baseline: a `git worktree` of HEAD with the runtime changes of every commit whose message has
  "traces (O3)" reversed (`git apply -R`), except the `telemetry:` config model, so the only
  difference from the next row is the instrumentation and its wiring;
- tracing off: this tree, no `telemetry:` section (target: ≈ 0 added);
- tracing on: this tree, `telemetry.enabled` exporting every span over OTLP/HTTP to a local
  receiver (tests/support/otlp.py, which decodes the protobuf), sample_ratio 1.

Also, in-process: what one instrumentation point (`gateway.tracing.span`) costs with tracing off.
Writes the table between `<!-- tracing-overhead:start/end -->` in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from datetime import datetime, timezone
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs import free_port, machine, write_section  # noqa: E402
from tests.support.otlp import otlp_receiver  # noqa: E402

CHAT = {"model": "bench", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
MARK = "traces (O3)"
KEPT = (":(exclude)gateway/config.py", ":(exclude)gateway/tracing.py")
"""Kept in the baseline: the config model (so its YAML parses) and the module it imports; every
instrumentation point and the wiring in gateway/app.py are reverted."""


def gateway_yaml(stub: str, telemetry: str = "") -> str:
    return f"""
server: {{log_level: warning}}
auth: {{mode: none}}
upstreams: [{{name: stub, kind: openai, api_base: "{stub}/v1"}}]
routes: [{{model: bench, upstream: stub, upstream_model: stub}}]
{telemetry}
"""


class Server:
    """A server subprocess run from `cwd` (so it imports that tree's code), ready on `ready`."""

    def __init__(self, argv: list[str], cwd: Path, url: str, ready: str) -> None:
        self.url = url
        self.proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv} exited: {self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ''}")
            try:
                if httpx2.get(url + ready, timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{argv} not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def baseline_tree(where: Path) -> tuple[Path, list[str]]:
    """A worktree of HEAD with the tracing commits reverted; (its path, the reverted commits)."""
    commits = subprocess.run(["git", "log", "--format=%h", f"--grep={MARK}", "--fixed-strings"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["git", "worktree", "add", "--detach", str(where), "HEAD"], cwd=ROOT, check=True, capture_output=True)
    for commit in commits:  # newest first
        patch = subprocess.run(["git", "show", "--format=", commit, "--", "gateway", "plugins", *KEPT], cwd=ROOT,
                               capture_output=True, check=True).stdout
        if patch:
            subprocess.run(["git", "apply", "-R"], cwd=where, input=patch, check=True, capture_output=True)
    return where, commits


async def serial(targets: dict[str, str], n: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in targets}
    async with httpx2.AsyncClient(timeout=60) as client:
        for url in targets.values():
            for _ in range(50):
                (await client.post(url, json=CHAT)).raise_for_status()
        for _ in range(max(1, n // 20)):
            for name, url in targets.items():
                for _ in range(20):
                    started = time.perf_counter()
                    (await client.post(url, json=CHAT)).raise_for_status()
                    samples[name].append(time.perf_counter() - started)
    return samples


def span_cost_off(n: int = 200_000) -> float:
    """ns for one `with span(...)` at an instrumentation point while tracing is off, its
    attributes dict included (best of 5)."""
    from gateway.tracing import span

    def point() -> None:
        with span("chain before_model", {"toolgate.route": "bench", "toolgate.plugins": 0}):
            pass

    return min(timeit.repeat(point, number=n, repeat=5)) / n * 1e9


def measure(python: str, tmp: Path, base: Path, endpoint: str, servers: list[Server], n: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Start the stub and the three gateways (appended to `servers`), then time them."""
    port = free_port()
    stub = Server([python, "-m", "uvicorn", "--factory", "bench.stub:create_app", "--port", str(port), "--log-level", "warning"],
                  ROOT, f"http://127.0.0.1:{port}", "/health")
    servers.append(stub)
    on = f"telemetry: {{enabled: true, otlp_endpoint: '{endpoint}', sample_ratio: 1.0}}"
    targets: dict[str, str] = {}
    for name, tree, telemetry in (("baseline (tracing commits reverted)", base, ""), ("tracing off", ROOT, ""),
                                  ("tracing on, OTLP to a local receiver", ROOT, on)):
        config = tmp / f"{len(targets)}.yaml"
        config.write_text(gateway_yaml(stub.url, telemetry))
        gport = free_port()
        servers.append(Server([python, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(gport)],
                              tree, f"http://127.0.0.1:{gport}", "/readyz"))
        targets[name] = f"http://127.0.0.1:{gport}/v1/chat/completions"
    return asyncio.run(serial(targets, n)), targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    python = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-tracing-bench-"))
    servers: list[Server] = []
    base, reverted = baseline_tree(tmp / "baseline")
    try:
        with otlp_receiver() as receiver:
            try:
                samples, targets = measure(python, tmp, base, receiver.endpoint, servers, args.requests)
            finally:  # a gateway exports what it still holds as it stops, so stop them before counting
                for server in reversed(servers):
                    server.stop()
            exported = len(receiver.snapshot())
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
    cost = span_cost_off()
    names = list(targets)
    p50 = {name: statistics.median(samples[name]) * 1000 for name in names}
    lines = [
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}; loopback; {len(samples[names[0]])} "
        f"requests per row at c=1 (rows interleaved in blocks of 20), JSON, empty chain. Baseline: HEAD with "
        f"{len(reverted)} tracing commit(s) reverted ({', '.join(reverted) or 'none found'}).",
        "",
        "| gateway | p50 | added p50 | p95 |",
        "|---|---|---|---|",
    ]
    for name in names:
        ordered = sorted(samples[name])
        added = "—" if name == names[0] else f"{p50[name] - p50[names[0]]:+.3f} ms"
        lines.append(f"| {name} | {p50[name]:.3f} ms | {added} | {ordered[int(len(ordered) * 0.95)] * 1000:.3f} ms |")
    lines += ["", f"Spans the receiver decoded from the traced gateway: {exported}. One instrumentation point "
              f"(`with span(...)`) with tracing off: {cost:.0f} ns in-process."]
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_section("tracing-overhead", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
