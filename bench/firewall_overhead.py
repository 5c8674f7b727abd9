"""What the tool-call firewall adds to a tool round (T7: at most 1 ms at p50), in one run.

    .venv/bin/python bench/firewall_overhead.py [--requests 300] [--rounds 4]

1. Through the real gateway: a conversation turn of N tool rounds (the scripted model reads the
   inbox, then mails a recipient the user named, so every round is judged and runs), on two
   gateways that differ only in `firewall.enabled` (prompt_guard's detectors off in both, so the
   firewall alone is measured); requests alternate between them. Added per round = (p50 with -
   p50 without) / rounds.
2. The decision alone, in-process: labelling a 4 KB tool result and judging a 4-argument call
   against a context of 1 + k such results.

Writes bench/results/firewall_overhead.md (date and machine).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from bench.procs import machine  # noqa: E402
from gateway.plugins import ToolCall  # noqa: E402
from gateway.provenance import Provenance  # noqa: E402
from plugins.prompt_guard.config import FirewallConfig  # noqa: E402
from plugins.prompt_guard.firewall import decide  # noqa: E402
from tests.support.gateway import running_gateway, simple_config  # noqa: E402
from tests.support.http_server import serve  # noqa: E402
from tests.support.office_server import OfficeState, office_app  # noqa: E402
from tests.support.upstream import Reply, ScriptedUpstream  # noqa: E402

USER = "Read my inbox and tell bob@corp.example what it says about lunch."
DETECTORS_OFF = {"rules": False, "heuristics": False, "classifier": False, "neural": False}


def scripted(rounds: int) -> Any:
    """The model: `rounds` tool rounds (inbox, then mail to the user's recipient, alternating), then an answer."""

    def reply(body: dict[str, Any]) -> Reply:
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if done >= rounds:
            return Reply(content="Done.")
        if done % 2 == 0:
            return Reply(tool_calls=[("read_inbox", {})])
        return Reply(tool_calls=[("send_email", {"to": "bob@corp.example", "subject": "lunch", "body": "Lunch at noon."})])

    return reply


def through_gateway(requests: int, rounds: int) -> dict[str, list[float]]:
    upstream = ScriptedUpstream(default=Reply(content="Done."))
    upstream.expected_key = None
    office = OfficeState()
    times: dict[str, list[float]] = {"off": [], "on": []}
    with serve(upstream.app) as up, serve(office_app(office)) as server:
        def config(enabled: bool) -> dict[str, Any]:
            guard = {"type": "prompt_guard", "mode": "enforce", "detectors": DETECTORS_OFF, "firewall": {"enabled": enabled}}
            node = {"type": "mcp_bridge", "id": "office", "endpoint": server.url + "/mcp", "maxConsecutiveToolCalls": rounds + 2}
            return simple_config(up.url, [guard, node])

        with running_gateway(config(False)) as off, running_gateway(config(True)) as on:
            clients = {name: openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                                           default_headers={"X-Conversation-Id": f"bench-{name}"})
                       for name, gw in (("off", off), ("on", on))}
            for i in range(requests + 20):
                for name in (("off", "on") if i % 2 else ("on", "off")):
                    upstream.script.clear()
                    upstream.default = scripted(rounds)  # type: ignore[assignment]
                    started = time.perf_counter()
                    answer = clients[name].chat.completions.create(model="assistant", messages=[{"role": "user", "content": USER}])
                    elapsed = time.perf_counter() - started
                    assert answer.choices[0].message.content == "Done.", answer
                    if i >= 20:  # warm-up: sessions, imports, caches
                        times[name].append(elapsed)
    sent = len(office.calls_of("send_email"))
    assert sent == (requests + 20) * 2 * (rounds // 2), f"every mail should have run: {sent}"
    return times


def decision_alone(results: int, repeats: int = 2000) -> float:
    """Median seconds to label one 4 KB result and judge one call, with `results` results before it."""
    text = ("Lunch at noon on Friday, room 4.12. The quarterly figures are attached; invoice 2291 is due. " * 45)[:4096]
    samples = []
    for _ in range(repeats):
        p = Provenance.from_messages([{"role": "system", "content": "You are a helpful assistant." * 30},
                                      {"role": "user", "content": USER}])
        for _ in range(results):
            p.add("tool_result", "office", "read_inbox", text, trusted=False)
        call = ToolCall("send_email", "office", "send_email",
                        {"to": "bob@corp.example", "cc": ["carol@corp.example"], "subject": "lunch", "body": "Lunch at noon."},
                        "side_effect")
        started = time.perf_counter()
        p.add("tool_result", "office", "read_inbox", text, trusted=False)
        decide(call, p, FirewallConfig())
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    times = through_gateway(args.requests, args.rounds)
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    p95 = {name: statistics.quantiles(values, n=20)[18] * 1000 for name, values in times.items()}
    added = (p50["on"] - p50["off"]) / args.rounds
    alone = {k: decision_alone(k) * 1e6 for k in (0, 4, 16)}
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Tool-call firewall: overhead per tool round", "",
        f"Measured {when} on {machine()}; loopback; `{' '.join(['bench/firewall_overhead.py', *sys.argv[1:]])}`.", "",
        f"Through the gateway: {args.requests} requests per configuration, {args.rounds} tool rounds each, alternating.", "",
        "| gateway | p50 per request | p95 per request |", "|---|---|---|",
        f"| firewall off (detectors off) | {p50['off']:.2f} ms | {p95['off']:.2f} ms |",
        f"| firewall on (detectors off) | {p50['on']:.2f} ms | {p95['on']:.2f} ms |", "",
        f"**Added per tool round (p50): {added:+.3f} ms** (target ≤ 1 ms).", "",
        "The decision alone (label a 4 KB result, judge a 4-argument call), median:", "",
        "| results already in the context | time |", "|---|---|",
        *[f"| {k} × 4 KB | {v:.0f} µs |" for k, v in alone.items()], "",
    ]
    out = ROOT / "bench" / "results" / "firewall_overhead.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
