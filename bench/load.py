"""Bounded load test: many concurrent conversations, each turn a tool round through mcp_bridge and
prompt_guard, against a real `toolgate serve` process. Loopback only; it stops by itself.

    /work/venv/bin/python bench/load.py [--conversations 200] [--turns 10] [--idle 40] [--seconds 150]
                                        [--guard enforce|monitor] [--replicas 3] [--no-write]

Each turn: the client sends the conversation so far with `X-Conversation-Id`; the scripted model
(bench/loadkit.py, own process) calls `count` and `echo`; the gateway runs both on the
conversation's pooled MCP session (a session-ful SDK server, own process), prompt_guard (enforce)
inspects both results, the model answers quoting them. Odd turns are streamed. A turn is an error
when the status is not 200, the transport fails, a tool failed, or the answer lacks this turn's
echo. The `count` result names the MCP session and counts its calls, so the client also sees
whether the conversation kept one session (call n on turn n): a *continuity break* otherwise.

Sessions are counted on the MCP server (opened, and still open `idle + 5 s` after the last call).
A second run sends the same load through HAProxy (deploy/haproxy.cfg) to `--replicas` processes.
With `--bridge-postgres`, each run's gateways keep their Bridge store in a fresh database on the
PostgreSQL server at 127.0.0.1:5432 and call `echo` through the Bridge (bridge `b1`, reached
through HAProxy when there are replicas: S1, S2), so every turn writes one audit record; the
records are counted in the database after the run. Writes bench/results/load.md (`--no-write` to skip).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.loadkit import Child, Gateway, Replicated, free_port, gateway_config  # noqa: E402
from tests.support import postgres  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "load.md"
COUNT = re.compile(r"session (\S+) call (\d+)")
GRACE_SECONDS = 5.0


@dataclass
class Conversation:
    """What one conversation saw: per-turn latency, errors, the MCP sessions that served it."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    breaks: int = 0
    backends: set[str] = field(default_factory=set)


@dataclass
class LoadResult:
    conversations: int
    turns: int
    idle_seconds: float
    guard_mode: str = "enforce"
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    error_kinds: Counter[str] = field(default_factory=Counter)
    continuity_breaks: int = 0
    latencies: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    peak_rss_kib: list[int] = field(default_factory=list)
    sessions_opened: int = 0
    sessions_open_after_idle: int = -1
    seconds_to_all_closed: float | None = None
    sessions_per_conversation: dict[int, int] = field(default_factory=dict)
    gateway_metrics: dict[str, float] = field(default_factory=dict)
    audit_records: int | None = None
    """Audit records of tool calls in the Bridge's PostgreSQL store after the run (`--bridge-postgres`)."""
    first_turn: list[float] = field(default_factory=list)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    ended: float = 0.0

    def percentile(self, p: float, which: str = "all") -> float:
        """Latency percentile in ms (nearest rank): of every turn, the first turns, or the later ones."""
        if which == "all":
            ordered = sorted(self.latencies)
        elif which == "first":
            ordered = sorted(self.first_turn)
        else:
            later = list(self.latencies)
            for value in self.first_turn:
                later.remove(value)
            ordered = sorted(later)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))] * 1000


def error_kind(error: str) -> str:
    """A short class of an error line, for counting: `status 502 bad_gateway`, `tool failed: <reason>`, …"""
    what = error.split(": ", 1)[1] if ": " in error else error
    if what.startswith("status "):
        code = re.search(r'"code":\s*"([^"]+)"', what)
        return what.split(":", 1)[0] + (f" {code.group(1)}" if code else "")
    if what.startswith("stream error event"):
        return ": ".join(what.split(": ")[:3])
    if what.startswith("tool failed"):
        reason = re.search(r"the tool failed: ([^|]+)", what)
        return "tool failed: " + (reason.group(1).strip() if reason else "?")
    return what.split(":", 1)[0]


def _answer_of_stream(lines: list[str]) -> tuple[str, str | None]:
    """The streamed content, and an error if the stream carried one or never finished."""
    content, done, error = [], False, None
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        event = json.loads(data)
        if "error" in event:
            error = f"stream error event: {event['error'].get('code')}: {str(event['error'].get('message'))[:200]}"
        for choice in event.get("choices", []):
            content.append(choice.get("delta", {}).get("content") or "")
    if error is None and not done:
        error = "stream ended without [DONE]"
    return "".join(content), error


async def _turn(http: httpx2.AsyncClient, url: str, cid: str, messages: list[dict[str, Any]], stream: bool,
                reconnect: bool = False) -> tuple[str, str | None]:
    """One chat completion; (answer text, error or None). `reconnect`: a new connection for it."""
    body = {"model": "assistant", "messages": messages, "stream": stream}
    headers = {"x-conversation-id": cid, **({"connection": "close"} if reconnect else {})}
    if stream:
        async with http.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                return "", f"status {response.status_code}: {(await response.aread())[:200]!r}"
            return _answer_of_stream([line async for line in response.aiter_lines()])
    response = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
    if response.status_code != 200:
        return "", f"status {response.status_code}: {response.text[:200]}"
    return response.json()["choices"][0]["message"]["content"] or "", None


async def conversation(http: httpx2.AsyncClient, url: str, cid: str, turns: int, stream_odd: bool, deadline: float,
                       reconnect: bool = False) -> Conversation:
    """`turns` turns of one conversation, checked as they come back; turns past `deadline` are errors."""
    seen = Conversation()
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        said = f"{cid} turn {turn}"
        messages.append({"role": "user", "content": said})
        start = time.perf_counter()
        left = deadline - time.monotonic()
        if left <= 0:
            seen.errors += [f"{cid} turn {t}: not sent, the run's deadline had passed" for t in range(turn, turns)]
            break
        try:
            answer, error = await asyncio.wait_for(_turn(http, url, cid, messages, stream_odd and turn % 2 == 1, reconnect), left)
        except TimeoutError:
            answer, error = "", "no answer before the run's deadline"
        except httpx2.HTTPError as exc:
            answer, error = "", f"transport: {type(exc).__name__}"
        seen.latencies.append(time.perf_counter() - start)
        if error is None and "the tool failed" in answer:
            error = f"tool failed: {answer[:200]}"
        if error is None and json.dumps({"said": said}) not in answer:
            error = f"answer lacks this turn's echo: {answer[:200]}"
        counted = COUNT.search(answer)
        if error is None and counted is None:
            error = f"answer lacks the count result: {answer[:200]}"
        if error is not None:
            seen.errors.append(f"{cid} turn {turn}: {error}")
        if counted is not None:
            session, calls = counted.group(1), int(counted.group(2))
            if session not in seen.sessions:
                seen.sessions.append(session)
            if calls != turn + 1 or session != seen.sessions[0]:
                seen.breaks += 1
        if answer.startswith("["):
            seen.backends.add(answer[1:answer.index("]")])
        messages.append({"role": "assistant", "content": answer or "(no answer)"})
    return seen


async def drive(url: str, conversations: int, turns: int, *, prefix: str = "conv", stream_odd: bool = True,
                seconds: float = 150.0, reconnect: bool = False) -> list[Conversation]:
    """All conversations at once, each on its own task, for at most `seconds`; one HTTP client with room for all
    (keep-alive connections shared by every conversation; `reconnect`: a new connection per request)."""
    deadline = time.monotonic() + seconds
    limits = httpx2.Limits(max_connections=conversations + 10, max_keepalive_connections=conversations + 10)
    async with httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(seconds, connect=30)) as http:
        return await asyncio.gather(*(conversation(http, url, f"{prefix}-{i}", turns, stream_odd, deadline, reconnect)
                                      for i in range(conversations)))


def mcp_stats(mcp: Child) -> dict[str, Any]:
    data: dict[str, Any] = httpx2.get(mcp.url + "/stats", timeout=10).json()
    return data


def gateway_metrics(urls: list[str]) -> dict[str, float]:
    """The pool and request counters of the gateway processes at `urls`, summed."""
    wanted = ("toolgate_mcp_sessions_opened_total", "toolgate_mcp_sessions_open", "toolgate_mcp_sessions_closed_total",
              "toolgate_requests_total", "toolgate_audit_dropped_total", "toolgate_audit_written_total")
    out: dict[str, float] = {}
    for url in urls:
        for line in httpx2.get(url + "/metrics", timeout=10).text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in wanted and not line.startswith("#"):
                value = float(line.rsplit(" ", 1)[1])
                out[name] = out.get(name, 0.0) + value
                server = re.search(r'server="([^"]+)"', line)
                if name == "toolgate_mcp_sessions_opened_total" and server is not None:  # per MCP client node
                    key = f"sessions opened by {server.group(1)}"
                    out[key] = out.get(key, 0.0) + value
    return out


@dataclass
class Harness:
    """The processes of a run: the model, the MCP server, and one gateway or replicas behind HAProxy."""

    model: Child
    mcp: Child
    gateway: Gateway | Replicated
    idle_seconds: float
    guard_mode: str
    database: str | None = None
    """The Bridge's PostgreSQL database (`--bridge-postgres`)."""


@contextmanager
def harness(*, idle_seconds: float = 40.0, guard_mode: str = "enforce",
            model_keep_alive: float = 5.0, replicas: int = 0, bridge_postgres: bool = False) -> Iterator[Harness]:
    """Start the scripted model, the counted MCP server and `toolgate serve` (route `assistant`);
    with `replicas`, that many `toolgate serve` processes behind HAProxy; with `bridge_postgres`,
    their Bridge on a fresh PostgreSQL database (dropped after)."""
    model = Child("model", "--keep-alive", str(model_keep_alive))
    mcp = gateway = database = None
    try:
        mcp = Child("mcp")
        model.wait_ready()
        mcp.wait_ready()
        port = free_port()
        if bridge_postgres:
            database = asyncio.run(postgres.create_database())
        store = (database, f"http://127.0.0.1:{port}") if database is not None else None
        config = gateway_config(model.url, mcp.url, idle_seconds=idle_seconds, guard_mode=guard_mode, bridge_store=store)
        gateway = (Replicated(config, replicas, port=port) if replicas else Gateway(config, port=port)).wait_ready()
        yield Harness(model, mcp, gateway, idle_seconds, guard_mode, database)
        died = gateway.died()
        if died is not None:
            raise RuntimeError(f"a gateway died during the run:\n{died}")
    finally:
        if gateway is not None:
            gateway.stop()
        if mcp is not None:
            mcp.stop()
        model.stop()
        if database is not None:
            asyncio.run(postgres.drop_database(database))


def measure(h: Harness, conversations: int, turns: int, *, prefix: str = "conv", stream_odd: bool = True,
            seconds: float = 150.0, reconnect: bool = False) -> LoadResult:
    """Drive `conversations` × `turns` through the harness's gateway and collect what was seen."""
    result = LoadResult(conversations, turns, h.idle_seconds, h.guard_mode)
    before = mcp_stats(h.mcp)["opened"]
    parts = {"gateway": h.gateway.cpu_seconds, "model": h.model.cpu_seconds, "MCP server": h.mcp.cpu_seconds,
             "load client": time.process_time}
    if isinstance(h.gateway, Replicated):
        parts["HAProxy"] = h.gateway.proxy_cpu_seconds
    cpu_before = {name: read() for name, read in parts.items()}
    start = time.perf_counter()
    seen = asyncio.run(drive(h.gateway.url, conversations, turns, prefix=prefix, stream_odd=stream_odd,
                             seconds=seconds, reconnect=reconnect))
    result.wall_seconds = time.perf_counter() - start
    result.ended = time.monotonic()
    result.cpu_seconds = {name: read() - cpu_before[name] for name, read in parts.items()}
    result.peak_rss_kib = h.gateway.peak_rss_kib()
    for conv in seen:
        result.requests += len(conv.latencies)
        result.latencies += conv.latencies
        result.first_turn += conv.latencies[:1]
        result.errors += len(conv.errors)
        result.error_kinds.update(error_kind(e) for e in conv.errors)
        result.error_samples += conv.errors[: max(0, 5 - len(result.error_samples))]
        result.continuity_breaks += conv.breaks
        n = len(conv.sessions)
        result.sessions_per_conversation[n] = result.sessions_per_conversation.get(n, 0) + 1
    result.sessions_opened = mcp_stats(h.mcp)["opened"] - before
    result.gateway_metrics = gateway_metrics(h.gateway.metrics_urls)
    if h.database is not None:
        result.audit_records = audit_records(h.database, result.requests - result.errors)
    return result


def audit_records(database: str, expected: int) -> int:
    """Tool-call audit records in the Bridge's database, once the writers have flushed (or 15 s passed)."""
    def count() -> int:
        return int(postgres.scalar(database, "SELECT count(*) FROM audit WHERE action = 'mcp.tool_call'"))  # type: ignore[call-overload]

    wait_until(lambda: count() >= expected, timeout=15, interval=0.2)
    return count()


def wait_idle(h: Harness, result: LoadResult) -> None:
    """Every session's last call ended by `result.ended`: all must be closed one lifetime later."""
    closed = wait_until(lambda: mcp_stats(h.mcp)["live"] == 0, timeout=h.idle_seconds + GRACE_SECONDS, interval=0.2)
    if closed:
        result.seconds_to_all_closed = time.monotonic() - result.ended
    result.sessions_open_after_idle = mcp_stats(h.mcp)["live"]
    open_now = gateway_metrics(h.gateway.metrics_urls).get("toolgate_mcp_sessions_open", -1.0)
    result.gateway_metrics["toolgate_mcp_sessions_open_after_idle"] = open_now


def run_load(conversations: int, turns: int, *, idle_seconds: float = 40.0, guard_mode: str = "enforce",
             model_keep_alive: float = 5.0, seconds: float = 150.0, replicas: int = 0,
             bridge_postgres: bool = False) -> LoadResult:
    """One gateway process (or `replicas` behind HAProxy): drive the load, then wait out the idle lifetime."""
    with harness(idle_seconds=idle_seconds, guard_mode=guard_mode, model_keep_alive=model_keep_alive,
                 replicas=replicas, bridge_postgres=bridge_postgres) as h:
        result = measure(h, conversations, turns, seconds=seconds)
        wait_idle(h, result)
    return result


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return f"{nproc} cores (nproc), {cpu}, Python {sys.version.split()[0]}"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def _errors(result: LoadResult) -> str:
    kinds = "; ".join(f"{kind}: {n}" for kind, n in result.error_kinds.most_common(4))
    return f"{result.errors}" + (f" ({kinds})" if kinds else "")


def _side_by_side(one: LoadResult, many: LoadResult, replicas: int) -> list[str]:
    """The replicas run beside the one-process run, same load, same machine, same run."""
    def row(run: LoadResult) -> list[str]:
        per = ", ".join(f"{n}: {c}" for n, c in sorted(run.sessions_per_conversation.items()))
        return [f"{run.requests} / {_errors(run)}", f"{run.requests / run.wall_seconds:.0f}",
                f"{run.percentile(50):.0f} / {run.percentile(95):.0f} / {run.percentile(99):.0f} ms",
                f"{run.sessions_opened} ({run.sessions_opened / run.conversations:.2f} per conversation); {per}",
                str(run.continuity_breaks), str(run.sessions_open_after_idle),
                ", ".join(f"{k} {v:.1f}" for k, v in run.cpu_seconds.items()),
                " + ".join(_mib(k) for k in run.peak_rss_kib), _audited(run)]
    heads = ["requests / errors", "req/s", "p50 / p95 / p99", "MCP sessions opened; conversations by sessions seen",
             "continuity breaks", "sessions open after the idle lifetime", "CPU seconds", "peak RSS per gateway",
             "audit records in PostgreSQL / turns answered"]
    lines = [f"### {replicas} replicas behind HAProxy (deploy/haproxy.cfg) against one process, same load",
             "", f"| | one process | {replicas} replicas + HAProxy |", "|---|---|---|"]
    lines += [f"| {h} | {a} | {b} |" for h, a, b in zip(heads, row(one), row(many))]
    if many.error_samples:
        lines += ["", "First errors (replicas):", "", *[f"- `{e}`" for e in many.error_samples]]
    return lines


def _audited(run: LoadResult) -> str:
    if run.audit_records is None:
        return "— (no --bridge-postgres)"
    by = {k.removeprefix("sessions opened by "): v for k, v in run.gateway_metrics.items() if k.startswith("sessions opened by ")}
    sessions = (f" (MCP sessions the gateways opened: {by.get('tools', 0):.0f} to the server for `count`, "
                f"{by.get('audited', 0):.0f} to the Bridge for `echo`; so {run.sessions_opened - by.get('tools', 0):.0f} of the "
                "server's were opened by the Bridge)")
    dropped = run.gateway_metrics.get("toolgate_audit_dropped_total", 0.0)
    return f"{run.audit_records} / {run.requests - run.errors}, {dropped:.0f} dropped{sessions}"


def report(main: LoadResult, command: str, replicated: tuple[int, LoadResult] | None = None) -> str:
    """The markdown results (bench/results/load.md; copied into bench/README.md's `## load`)."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = Path("/proc/loadavg").read_text().split()[0]
    per_conv = ", ".join(f"{n} session(s): {c}" for n, c in sorted(main.sessions_per_conversation.items()))
    rows = [
        ("conversations × turns", f"{main.conversations} × {main.turns} (all at once; odd turns streamed)", "—"),
        ("requests", f"{main.requests} of {main.conversations * main.turns} in {main.wall_seconds:.1f} s "
                     f"({main.requests / main.wall_seconds:.0f} req/s)", "all"),
        ("errors (turns failed or not sent)", _errors(main), "0"),
        ("latency p50 / p95 / p99 (per turn, 2 model calls + 2 MCP calls)",
         f"{main.percentile(50):.0f} / {main.percentile(95):.0f} / {main.percentile(99):.0f} ms (max {max(main.latencies) * 1000:.0f})", "—"),
        ("— first turns (open the session) / later turns, p50 / p99",
         f"{main.percentile(50, 'first'):.0f} / {main.percentile(99, 'first'):.0f} ms; "
         f"{main.percentile(50, 'later'):.0f} / {main.percentile(99, 'later'):.0f} ms", "—"),
        ("CPU seconds during the run", ", ".join(f"{k} {v:.1f}" for k, v in main.cpu_seconds.items()), "—"),
        ("peak RSS of the gateway (VmHWM)", _mib(main.peak_rss_kib[0]) if main.peak_rss_kib else "?", "—"),
        ("MCP sessions opened (counted by the server)", f"{main.sessions_opened} for {main.conversations} conversations", "one per conversation"),
        ("conversations by sessions seen (client side)", per_conv, f"{main.conversations} with 1"),
        ("session continuity breaks (count result not `call n` on turn n)", str(main.continuity_breaks), "0"),
        ("audit records in PostgreSQL / turns answered (one `echo` through the Bridge each)", _audited(main), "equal"),
        (f"sessions still open {main.idle_seconds:g} s + {GRACE_SECONDS:g} s after the last call",
         f"{main.sessions_open_after_idle}" + (f" (all closed {main.seconds_to_all_closed:.1f} s after the last turn)"
                                                 if main.seconds_to_all_closed is not None else ""), "0"),
    ]
    lines = [
        f"{when} — {machine()} — load average at the end {load}",
        "",
        f"`{command}` — loopback only; the scripted model, the MCP server (mcp SDK, session-ful "
        "Streamable HTTP) and `toolgate serve` each in their own process, the client (httpx2, asyncio) in the "
        f"benchmark's. Route: prompt_guard ({main.guard_mode}) + mcp_bridge, `sessionIdleSeconds: {main.idle_seconds:g}`.",
        "",
        "### One gateway process",
        "",
        "| what | measured | target |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
    ]
    if main.gateway_metrics:
        m = main.gateway_metrics
        lines += ["", f"Gateway's own counters: `toolgate_mcp_sessions_opened_total` {m.get('toolgate_mcp_sessions_opened_total', 0):.0f}, "
                  f"`toolgate_mcp_sessions_open` {m.get('toolgate_mcp_sessions_open_after_idle', -1):.0f} after the idle lifetime, "
                  f"`toolgate_requests_total` {m.get('toolgate_requests_total', 0):.0f}."]
    if main.error_samples:
        lines += ["", "First errors:", "", *[f"- `{e}`" for e in main.error_samples]]
    if replicated is not None:
        lines += ["", *_side_by_side(main, replicated[1], replicated[0])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--idle", type=float, default=40.0,
                        help="sessionIdleSeconds of the main run; must exceed the longest gap between two turns (default 40)")
    parser.add_argument("--seconds", type=float, default=150.0, help="the main run's deadline; turns past it are errors")
    parser.add_argument("--model-keep-alive", type=float, default=5.0,
                        help="keep-alive of the scripted model's server, seconds (uvicorn's and vLLM's default: 5)")
    parser.add_argument("--guard", default="enforce", choices=["enforce", "monitor"],
                        help="prompt_guard's mode on the route (monitor: it inspects every result but refuses nothing)")
    parser.add_argument("--replicas", type=int, default=3,
                        help="then the same load through HAProxy in front of this many replicas (0: skip; needs haproxy)")
    parser.add_argument("--bridge-postgres", action="store_true",
                        help="the gateways' Bridge on PostgreSQL at 127.0.0.1:5432 (a fresh database per run), "
                             "and `echo` called through it, audited")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results/load.md")
    args = parser.parse_args()
    command = ("python bench/load.py " + " ".join(sys.argv[1:])).strip()
    main_run = run_load(args.conversations, args.turns, idle_seconds=args.idle, model_keep_alive=args.model_keep_alive,
                        seconds=args.seconds, guard_mode=args.guard, bridge_postgres=args.bridge_postgres)
    print(report(main_run, command), flush=True)
    replicated = None
    if args.replicas:
        many = run_load(args.conversations, args.turns, idle_seconds=args.idle, model_keep_alive=args.model_keep_alive,
                        seconds=args.seconds, guard_mode=args.guard, replicas=args.replicas,
                        bridge_postgres=args.bridge_postgres)
        replicated = (args.replicas, many)
    text = report(main_run, command, replicated)
    if replicated is not None:
        print(text[text.index("### " + str(args.replicas) + " replicas"):], flush=True)
    if not args.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text("# Load test\n\n(written by `bench/load.py`)\n\n" + text)


if __name__ == "__main__":
    main()
