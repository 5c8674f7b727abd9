"""prompt_guard benchmark: scan throughput and 4 KB latency on one core, plus the held-out
evaluation, against a plain `str.lower()` + `in` keyword scan measured in the same run.

    /work/venv/bin/python bench/guard_bench.py [--out bench/results/guard.md] [--quick]

Writes a Markdown table (with the date, `uname -m` and the CPU model) and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.evaluation import Row, Tally, load_rows
from plugins.prompt_guard.plugin import build_guard

ROOT = Path(__file__).resolve().parent
HELDOUT = ROOT / "data" / "guard_heldout.jsonl"
AGENTDOJO = ROOT / "data" / "guard_heldout_agentdojo.jsonl"
"""A second held-out set: AgentDojo's tool outputs with its attacks (see DATA.md)."""
KEYWORDS = [
    "ignore previous instructions", "ignore all previous", "disregard previous", "system prompt",
    "you are now", "developer mode", "jailbreak", "reveal your", "new instructions", "do anything now",
    "<|im_start|>", "[inst]", "forget your instructions", "override", "pwned", "act as",
]
STRICT_THRESHOLD = 0.75
"""A stricter setting measured alongside the default, to show the recall/FPR trade-off."""
TOOL_KINDS = {"code", "email", "web", "file", "ticket", "tool_output"}


def keyword_scan(text: str) -> bool:
    """The baseline: lowercase the text and look for each keyword."""
    low = text.lower()
    return any(k in low for k in KEYWORDS)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def latencies(scan: Callable[[str], object], texts: list[str], rounds: int) -> list[float]:
    """Per text, the median of `rounds` timed scans (rounds interleaved over the texts).

    The median per text keeps each text's real cost but drops one-off stalls from other
    processes on a shared VM; p50/p99 are then taken across the texts."""
    times: list[list[float]] = [[] for _ in texts]
    for _ in range(rounds):
        for i, text in enumerate(texts):
            start = time.perf_counter()
            scan(text)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def throughputs(scans: list[Callable[[str], object]], text: str, rounds: int) -> list[float]:
    """MB/s of each scanner on `text`: its size over the median of `rounds` timed scans. The
    rounds are interleaved across the scanners, so a stall of the shared machine falls on all
    of them alike instead of on whichever ran at that moment."""
    times: list[list[float]] = [[] for _ in scans]
    for _ in range(rounds):
        for i, scan in enumerate(scans):
            begin = time.perf_counter()
            scan(text)
            times[i].append(time.perf_counter() - begin)
    size = len(text.encode("utf-8"))
    return [size / statistics.median(t) / 1e6 for t in times]


def corpus(rows: list[Row]) -> tuple[list[str], str]:
    """4 KB benign tool results and one ~1 MB mixed benign document, from held-out rows."""
    benign = [r.text for r in rows if r.label == "benign" and r.kind in TOOL_KINDS]
    blob = "\n".join(benign)
    pieces = [blob[i : i + 4096] for i in range(0, min(len(blob), 4096 * 200), 4096)]
    return [p for p in pieces if len(p) == 4096], (blob * (1 + 1_000_000 // max(1, len(blob))))[:1_000_000]


def evaluation(rows: list[Row], scan: Callable[[str], bool]) -> dict[str, Tally]:
    groups: dict[str, Tally] = {}
    for row in rows:
        blocked = scan(row.text)
        group = "tool output" if row.kind in TOOL_KINDS else "user prompts"
        for name in (group, f"{group}: {row.kind}", f"{group}: source {row.source}"):
            groups.setdefault(name, Tally()).add(row.label, blocked)
    return groups


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "guard.md")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    args = parser.parse_args()
    guard = build_guard(PromptGuardConfig(type="prompt_guard"))
    python = build_guard(PromptGuardConfig(type="prompt_guard"), native=False)
    strict = build_guard(PromptGuardConfig(type="prompt_guard", threshold=STRICT_THRESHOLD))
    rows = load_rows(HELDOUT)
    agentdojo = load_rows(AGENTDOJO)
    small, big = corpus(rows)
    rounds = 2 if args.quick else 10
    lines = [
        "# prompt_guard benchmark",
        "",
        f"{datetime.date.today().isoformat()} · `{platform.machine()}` · {cpu_model()} · Python "
        f"{platform.python_version()} · one core (single process, no threads)",
        "",
        "| scanner | throughput, 1 MB document | 4 KB tool result p50 | p99 | held-out tool output recall / FPR | user prompts recall / FPR | AgentDojo tool output recall / FPR |",
        "|---|---|---|---|---|---|---|",
    ]
    results = {}
    scanners: list[tuple[str, Callable[[str], bool]]] = [
        (f"prompt_guard (default config, {guard.backend} scorer)", lambda t: guard.scan(t).blocked),
        ("prompt_guard (default config, pure-Python scorer)", lambda t: python.scan(t).blocked),
        (f"prompt_guard, threshold {STRICT_THRESHOLD}", lambda t: strict.scan(t).blocked),
        ("baseline: str.lower() + in, 16 keywords", keyword_scan),
    ]
    for _, scan in scanners:
        latencies(scan, small, 1)  # warm-up: first touches of the model tables and regex caches
    speeds = throughputs([scan for _, scan in scanners], big, 5 if args.quick else 21)
    for (name, scan), mbps in zip(scanners, speeds):
        lat = sorted(latencies(scan, small, rounds))
        groups = evaluation(rows, scan)
        tool, prompt = groups["tool output"].metrics(), groups["user prompts"].metrics()
        dojo_groups = evaluation(agentdojo, scan)
        dojo = dojo_groups["tool output"].metrics()
        groups.update({f"AgentDojo {name}": tally for name, tally in dojo_groups.items() if name != "tool output"})
        p50, p99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
        results[name] = groups
        lines.append(
            f"| {name} | {mbps:.1f} MB/s | {p50 * 1e3:.3f} ms | {p99 * 1e3:.3f} ms | "
            f"{pct(tool['recall'])} / {pct(tool['fpr'])} | {pct(prompt['recall'])} / {pct(prompt['fpr'])} | "
            f"{pct(dojo['recall'])} / {pct(dojo['fpr'])} |"
        )
    lines += ["", "Held-out evaluation by kind (prompt_guard, default threshold 0.5):", "",
              "| slice | rows | injection | benign | recall | FPR | precision |", "|---|---|---|---|---|---|---|"]
    for name, tally in sorted(results[f"prompt_guard (default config, {guard.backend} scorer)"].items()):
        m = tally.metrics()
        lines.append(f"| {name} | {m['rows']} | {m['injection']} | {m['benign']} | {pct(m['recall'])} | "
                     f"{pct(m['fpr'])} | {pct(m['precision'])} |")
    lines += ["", f"Data: `bench/data/guard_heldout.jsonl` ({len(rows)} rows) and "
              f"`bench/data/guard_heldout_agentdojo.jsonl` ({len(agentdojo)} rows; provenance of both in "
              f"`plugins/prompt_guard/DATA.md`). Latency: {len(small)} different 4 KB benign held-out "
              f"tool results x {rounds} rounds; "
              f"p50/p99 are taken across the results, each result's time being the median of its "
              f"{rounds} rounds. Throughput: 1 MB over the median time of its scans, "
              f"{5 if args.quick else 21} rounds interleaved across the scanners.", ""]
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(json.dumps({"written": str(args.out)}))


if __name__ == "__main__":
    main()
