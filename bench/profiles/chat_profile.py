"""Where the gateway's CPU goes on the chat path: py-spy samples `toolgate serve` while 50 clients
send requests through it (the overhead bench's stub, config and API-key auth), then writes the
top frames by self and by cumulative time, and self time by package, to bench/profiles/NAME.md.

    .venv/bin/pip install py-spy==0.4.3      # ad hoc, for profiling only (not a dependency)
    python bench/profiles/chat_profile.py --name before [--requests 3000]

One profile per (API, json/stream): chat completions, Responses and Messages. py-spy runs as the
same user (root here, or `ptrace_scope` 0); at 250 samples/s it slows the process a little, alike
for every profile.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.overhead import AUTH, CHAT, MESSAGES, RESPONSES, fifty_clients, gateway_config, gateway_proc  # noqa: E402
from bench.procs import Proc, free_port, machine  # noqa: E402

APIS = {"chat": ("/v1/chat/completions", CHAT, {}), "responses": ("/v1/responses", RESPONSES, {}),
        "messages": ("/v1/messages", MESSAGES, {"anthropic-version": "2023-06-01"})}
FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


async def load(url: str, stream: bool, n: int, headers: dict[str, str], body: dict[str, object]) -> float:
    """`n` requests from 50 concurrent clients; requests per second."""
    async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=100, max_keepalive_connections=100)) as client:
        return n / await fifty_clients(client, url, stream, headers, body, n)


def package(path: str) -> str:
    """A frame's file as what it belongs to: our modules by file (`gateway/chat.py`), others by top-level package or module."""
    parts = Path(path).parts  # py-spy shortens a file to its package's part: anyio/_backends/_asyncio.py
    if not parts:
        return path
    return path if parts[0] == "gateway" else parts[0].removesuffix(".py")


def summarise(raw: str, title: str, rate: float, requests: int, top: int = 25) -> str:
    """Self and cumulative time per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    cumulative: collections.Counter[str] = collections.Counter()
    by_package: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";")[1:]:  # the first entry is the process
            match = FRAME.match(frame)
            name = f"{match['fn']} ({match['file']})" if match else frame
            frames.append((name, match["file"] if match else frame))
        if not frames:
            continue
        own[frames[-1][0]] += count
        by_package[package(frames[-1][1])] += count
        for name in dict.fromkeys(name for name, _ in frames):
            cumulative[name] += count
    lines = [f"### {title}", "", f"{total} samples at {rate:g}/s, {total / requests:.2f} a request (a sample is taken whenever the "
             "process is not idle: on a loaded machine, waiting for a core counts too; the shares hold).", "",
             "| self | function (file) |", "|---|---|"]
    lines += [f"| {count / total:.1%} | `{name}` |" for name, count in own.most_common(top)]
    lines += ["", "| cumulative | function (file) |", "|---|---|"]
    lines += [f"| {count / total:.1%} | `{name}` |" for name, count in cumulative.most_common(top)]
    lines += ["", "| self, by package | package |", "|---|---|"]
    lines += [f"| {count / total:.1%} | {name} |" for name, count in by_package.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="the profile's file: bench/profiles/NAME.md")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--apis", default="chat,responses,messages")
    parser.add_argument("--modes", default="json,stream")
    parser.add_argument("--tree", type=Path, default=None, help="profile the gateway of another checkout (as bench/overhead.py --before)")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    python = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-profile-"))  # the raw stacks stay there
    procs: list[Proc] = []
    sections = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = f"{commit} (the gateway from {args.tree})" if args.tree else commit
    try:
        port = free_port()
        stub = Proc([python, "-m", "uvicorn", "--factory", "bench.stub:create_app", "--port", str(port), "--log-level", "warning"],
                    f"http://127.0.0.1:{port}", "/health")
        procs.append(stub.start())
        (tmp / "gw.yaml").write_text(gateway_config(stub.url))
        gw = gateway_proc(python, tmp / "gw.yaml", args.tree.resolve() if args.tree else None)
        procs.append(gw.start())
        assert gw.proc is not None
        for api in args.apis.split(","):
            path, body, extra = APIS[api]
            for mode in args.modes.split(","):
                stream = mode == "stream"
                headers = {**AUTH, **extra}
                asyncio.run(load(gw.url + path, stream, 200, headers, body))  # warm up
                out = tmp / f"{api}-{mode}.txt"
                sampler = subprocess.Popen([spy, "record", "--pid", str(gw.proc.pid), "--rate", str(args.rate), "--format", "raw",
                                            "--function", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(1.0)  # py-spy attaches
                load_avg = os.getloadavg()[0]
                rps = asyncio.run(load(gw.url + path, stream, args.requests, headers, body))
                sampler.send_signal(signal.SIGINT)
                sampler.wait(60)
                raw = out.read_text() if out.exists() else ""
                title = f"{api}, {mode}: {args.requests} requests at c=50, {rps:.0f} req/s under the sampler, load average {load_avg:.1f}"
                sections.append(summarise(raw, title, args.rate, args.requests))
                print(title, out, flush=True)
    finally:
        for proc in reversed(procs):
            proc.stop()
    head = (f"# Chat-path profile: {args.name}\n\nRecorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {commit} "
            f"on {machine()} by `python bench/profiles/chat_profile.py --name {args.name}{' --tree ' + str(args.tree) if args.tree else ''}` (py-spy {args.rate}/s, "
            "on-CPU samples of the `toolgate serve` process only, functions aggregated across lines). Self: the function was "
            "running; cumulative: it was on the stack.\n")
    (Path(__file__).parent / f"{args.name}.md").write_text(head + "\n" + "\n\n".join(sections) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
