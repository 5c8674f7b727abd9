"""prompt_guard benchmark: the shipped guard (neural detector on) against, in the same run, the same
guard with an earlier neural model (`--earlier-model DIR`, e.g. the model the shipped one replaced)
or with the neural detector's earlier window budget (`--wide`, `WIDE_BUDGET` windows), the previous
scorer (the same guard with the neural detector off) and a plain `str.lower()` + `in` keyword scan:
held-out accuracy per file, source and language, 4 KB latency, the time of a 1 MB document, and
the model's load time; one core (onnxruntime runs single-threaded).

    .venv/bin/python bench/guard_bench.py [--earlier-model DIR] [--wide] [--out bench/results/guard.md] [--quick]
    .venv/bin/python bench/guard_bench.py --detectors [--out bench/results/guard_detectors.md]
    .venv/bin/python bench/guard_bench.py --latency [--out bench/results/guard_latency.md]
    bench/avx2_only/run.sh .venv/bin/python bench/guard_bench.py --latency --cpu-note "made AVX2-only: ..." \
        --out bench/results/guard_latency_avx2.md   # as on an AVX2-only CPU (bench/avx2_only/README.md)

Writes a Markdown table (with the date, `uname -m` and the CPU model) and prints it. `--detectors`
instead writes the per-source table of each detector alone beside their combination (issue 36), in
one run; `--latency` the latency of the cascade against reading every item, on this CPU, with its
flags and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.evaluation import Row, Tally, detector_scores, load_rows, pct
from plugins.prompt_guard.neural import DEFAULT_DIR, WINDOW_TOKENS, NeuralDetector, Window
from plugins.prompt_guard.plugin import build_guard
from plugins.prompt_guard.scanner import CLASSIFIER_ID, combine

ROOT = Path(__file__).resolve().parent
HELDOUT = ROOT / "data" / "guard_heldout.jsonl"
AGENTDOJO = ROOT / "data" / "guard_heldout_agentdojo.jsonl"
"""A second held-out set: AgentDojo's tool outputs with its attacks (see DATA.md)."""
HELDOUT_FILES = {
    "held-out (round 2)": HELDOUT,
    "AgentDojo": AGENTDOJO,
    "French/Ukrainian": ROOT / "data" / "guard_heldout_multilingual.jsonl",
    "technical docs (LLM/MCP)": ROOT / "data" / "guard_heldout_techdocs.jsonl",
    "red team (issue 15)": ROOT / "data" / "guard_heldout_redteam.jsonl",
}
"""Every held-out file (sources never seen in training or tuning; DATA.md), by report name."""
KEYWORDS = [
    "ignore previous instructions", "ignore all previous", "disregard previous", "system prompt",
    "you are now", "developer mode", "jailbreak", "reveal your", "new instructions", "do anything now",
    "<|im_start|>", "[inst]", "forget your instructions", "override", "pwned", "act as",
]
TOOL_KINDS = {"code", "email", "web", "file", "ticket", "tool_output"}
WIDE_BUDGET = 8
"""The neural detector's window budget before it was chosen for the 4 KB latency target
(docs/model_card.md, "Window budget"): measured beside the default with `--wide`."""


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


def cpu_flags() -> str:
    """The CPU's vector flags that decide the int8 kernels' speed (docs/model_card.md)."""
    try:
        found = set(re.findall(r"avx512[a-z0-9_]*|avx2|avx_vnni", Path("/proc/cpuinfo").read_text()))
    except OSError:
        return "unknown"
    return " ".join(sorted(found)) or "none"


def load_average() -> str:
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def model_alone(detector: NeuralDetector, rounds: int) -> float:
    """Milliseconds the model alone takes for a 4 KB result's tokens at the default budget: its
    `max_windows` windows of `WINDOW_TOKENS` (one batch; median of `rounds`). The same code is
    several times slower on some of our machines than on others; this line says how much of a
    4 KB result's latency is the CPU running the model, so figures of two machines can be compared."""
    window = Window(tuple(range(1000, 1000 + WINDOW_TOKENS)), 0)
    batch = [window] * detector.max_windows
    detector.probabilities(batch)  # warm-up
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        detector.probabilities(batch)
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


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


def tool_rows(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.kind != "prompt"]


def slices(rows: list[Row], scan: Callable[[str], bool]) -> dict[str, Tally]:
    """Tallies of tool-output rows: all, per source and per language."""
    groups: dict[str, Tally] = {}
    for row in tool_rows(rows):
        blocked = scan(row.text)
        for name in ("all", f"source {row.source}", f"lang {row.lang or 'en'}"):
            groups.setdefault(name, Tally()).add(row.label, blocked)
    return groups


def _noisy_or(a: float, b: float) -> float:
    return 1.0 - (1.0 - a) * (1.0 - b)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(z, 60.0), -60.0)))


DETECTOR_COLUMNS = ("rules", "heuristics", "n-gram alone", "neural alone", "cheap together", "before issue 36",
                    "combination (shipped)")


def detectors_report(out: Path) -> None:
    """Per held-out file, source, language (and AgentDojo attack): each detector alone and the shipped
    combination, in one run. Thresholds: rules, heuristics and the cheap detectors together at 0.5
    (their shipped meaning); the n-gram model alone at the logit `combination.json` records (chosen on
    validation, as the neural model's threshold was: at most 1 % of each validation slice's benign
    tool output); the neural model alone at its own threshold, reading its whole budget; "before issue
    36": the neural model's evidence with the rules and heuristics, the n-gram model not counted (the
    default until 2026-12-05); the combination: the shipped guard's verdict (`Guard.scan`)."""
    from plugins.prompt_guard.combination import DEFAULT_FILE

    card = json.loads(DEFAULT_FILE.read_text())
    ngram_gate = card["alone"]["ngram_logit"]
    guard = build_guard(PromptGuardConfig(type="prompt_guard"))
    assert guard.combination is not None, "the shipped models have no fitted combination"
    groups: dict[tuple[str, str], dict[str, Tally]] = {}
    raw: dict[str, list[tuple[bool, dict[str, float], bool]]] = {}
    started = time.perf_counter()
    for label, path in HELDOUT_FILES.items():
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("kind") == "prompt":
                continue
            text = row["text"]
            s = detector_scores(guard, text)
            full = s.full if s.full is not None else -math.inf
            votes = {
                "rules": s.rules >= 0.5,
                "heuristics": s.heuristics >= 0.5,
                "n-gram alone": s.ngram >= ngram_gate,
                "neural alone": full >= 0,
                "cheap together": s.previous >= 0.5,
                "before issue 36": _noisy_or(s.cheap, _sigmoid(full)) >= 0.5,
                "combination (shipped)": guard.scan(text).blocked,
            }
            raw.setdefault(label, []).append((row["label"] == "injection", {
                "rules": s.rules, "heuristics": s.heuristics, "n-gram alone": s.ngram, "neural alone": full,
                "cheap together": s.previous}, votes["combination (shipped)"]))
            keys = ["all", f"source {row.get('source')}"]
            if row.get("lang"):
                keys.append(f"lang {row['lang']}")
            if row.get("attack"):
                keys.append(f"attack {row['attack']}")
            for key in keys:
                cells = groups.setdefault((label, key), {name: Tally() for name in DETECTOR_COLUMNS})
                for name, blocked in votes.items():
                    cells[name].add(row["label"], blocked)
    seconds = time.perf_counter() - started
    lines = [
        "# prompt_guard: each detector alone and the combination (held-out tool output)",
        "",
        f"{datetime.date.today().isoformat()} · `{platform.machine()}` · {cpu_model()} · flags {cpu_flags()} · "
        f"Python {platform.python_version()} · one run, {seconds:.0f} s · load average at the end {load_average()}",
        "",
        f"Thresholds: rules, heuristics and the cheap detectors together (the previous scorer) at 0.5; the n-gram "
        f"model alone at logit {ngram_gate:.3f} (chosen on validation: at most 1 % of each validation slice's benign "
        "tool output); the neural model alone at its own threshold, reading its whole budget; before issue 36: the "
        "neural model's evidence with the rules and heuristics, the n-gram model not counted; the combination: the "
        "shipped guard (`combination.json`, fitted on validation rows only). Cells: recall / FPR.",
        "",
        "| file | slice | injection | benign | " + " | ".join(DETECTOR_COLUMNS) + " |",
        "|---|---|---|---|" + "---|" * len(DETECTOR_COLUMNS),
    ]
    for (label, key), cells in sorted(groups.items(), key=lambda kv: (list(HELDOUT_FILES).index(kv[0][0]),
                                                                      kv[0][1] != "all", kv[0][1])):
        m = cells[DETECTOR_COLUMNS[0]].metrics()
        lines.append(f"| {label} | {key} | {m['injection']} | {m['benign']} | " + " | ".join(
            f"{pct(c.metrics()['recall'])} / {pct(c.metrics()['fpr'])}" for c in cells.values()) + " |")
    lines += ["", "## At the combination's false-alarm rate", "",
              "Each detector alone at the threshold that gives it the most recall on the file without more false "
              "alarms than the combination has there (thresholds read off the held-out rows themselves, so this "
              "flatters the single detectors; a report, never used to choose anything). Cells: recall / FPR.", "",
              "| file | combination (shipped) | " + " | ".join(SWEPT) + " |", "|---|---|" + "---|" * len(SWEPT)]
    for label, items in raw.items():
        positives = sum(y for y, _, _ in items) or 1
        negatives = sum(not y for y, _, _ in items) or 1
        fp = sum(b and not y for y, _, b in items)
        cells = [f"{sum(b and y for y, _, b in items) / positives:.1%} / {fp / negatives:.1%}"]
        for name in SWEPT:
            best = (0.0, 0.0)
            for cut in sorted({sc[name] for _, sc, _ in items}):
                false = sum(sc[name] >= cut and not y for y, sc, _ in items)
                if false <= fp:
                    best = max(best, (sum(sc[name] >= cut and y for y, sc, _ in items) / positives, -false / negatives))
            cells.append(f"{best[0]:.1%} / {abs(best[1]):.1%}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)


SWEPT = ("rules", "heuristics", "n-gram alone", "neural alone", "cheap together")
"""The detectors whose threshold `detectors_report` sweeps to the combination's false-alarm rate."""


def padded(rows: list[Row], filler: str, size: int = 4096) -> list[str]:
    """Held-out injected tool outputs, each in the middle of benign held-out text, cut to `size` characters."""
    out = []
    for i, row in enumerate(r for r in rows if r.label == "injection" and r.kind in TOOL_KINDS and len(r.text) < size):
        pad = size - len(row.text)
        start = (i * 977) % max(1, len(filler) - size)
        out.append(filler[start : start + pad // 2] + row.text + filler[start + pad // 2 : start + pad - pad // 2])
    return out


FIRST_CASCADE = {"read_on": -0.75, "edge_tokens": 64}
"""The cascade's settings of its first fit (2026-12-05, session 18) that the second changed, for a
before/after row in `latency_report`."""


def latency_report(out: Path, quick: bool, cpu_note: str = "") -> None:
    """The cascade (shipped) against the full read (the guard as it read before issue 36) and the
    cheap detectors alone: 4 KB benign and injected items, p50/p99, and a 1 MB document; the CPU,
    its flags (and `cpu_note`, e.g. how it was made to look like another CPU) and the load average
    before and after each row."""
    rows = load_rows(HELDOUT)
    small, big = corpus(rows)
    injected = padded(rows, "\n".join(small))[:200]
    shipped = build_guard(PromptGuardConfig(type="prompt_guard"))
    before = build_guard(PromptGuardConfig(type="prompt_guard"))
    before.combination = None
    first_cascade = build_guard(PromptGuardConfig(type="prompt_guard"))
    first_cascade.combination = dataclasses.replace(first_cascade.combination, **FIRST_CASCADE)
    cheap = build_guard(PromptGuardConfig(type="prompt_guard", detectors={"neural": False}))
    detector = shipped.neural
    kernel = model_alone(detector, 5 if quick else 50)
    one = Window(tuple(range(1000, 1000 + WINDOW_TOKENS)), 0)
    single = statistics.median(_timed(lambda: detector.probabilities([one]), 5 if quick else 50))
    combo = shipped.combination
    short = Window(tuple(range(1000, 1000 + combo.first_tokens)), 0)
    first = statistics.median(_timed(lambda: detector.probabilities([short]), 5 if quick else 50))
    edges = [Window(tuple(range(1000, 1000 + combo.edge_tokens)), 0)] * 2
    second = statistics.median(_timed(lambda: detector.probabilities(edges), 5 if quick else 50))
    cpu = f"{cpu_model()}{f' ({cpu_note})' if cpu_note else ''}"
    rounds = 2 if quick else 10
    lines = [
        "# prompt_guard latency: the cascade against reading every item",
        "",
        f"{datetime.date.today().isoformat()} · `{platform.machine()}` · {cpu} · Python {platform.python_version()} · "
        "one core (single process, onnxruntime single-threaded)",
        "",
        f"CPU flags: {cpu_flags()}. The shipped model alone: {1000 * single:.1f} ms for one window of {WINDOW_TOKENS} "
        f"tokens, {kernel:.1f} ms for two in one batch; the cascade's first read ({combo.first_tokens} tokens) "
        f"{1000 * first:.1f} ms, its second (head and tail, {combo.edge_tokens} tokens each, one batch) "
        f"{1000 * second:.1f} ms (medians).",
        "",
        "| guard | CPU, flags | load average before | 4 KB benign p50 | p99 | 4 KB injected p50 | p99 | 1 MB document | load average after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, guard in (("shipped: combination + cascade", shipped),
                        ("the first cascade (read on at z >= -0.75, head and tail 64 tokens each)", first_cascade),
                        ("before issue 36: the model reads every item (2 windows)", before),
                        ("cheap detectors alone (`neural: false`)", cheap)):
        latencies(guard.scan, small[:20] + injected[:20], 1)  # warm-up
        load_before = load_average()
        benign = sorted(latencies(guard.scan, small, rounds))
        hostile = sorted(latencies(guard.scan, injected, rounds))
        [mbps] = throughputs([guard.scan], big, 3 if quick else 7)
        p = lambda xs, q: 1e3 * xs[int(q * (len(xs) - 1))]  # noqa: E731
        lines.append(f"| {name} | {cpu}, {cpu_flags()} | {load_before} | {p(benign, 0.5):.2f} ms | "
                     f"{p(benign, 0.99):.2f} ms | {p(hostile, 0.5):.2f} ms | {p(hostile, 0.99):.2f} ms | "
                     f"{1000 * len(big.encode('utf-8')) / 1e6 / mbps:.0f} ms | {load_average()} |")
        print(lines[-1], flush=True)
    reads = [0, 0, 0]
    for text in small:
        found, best, scored, norm = shipped.cheap_piece(text)
        ngram = max((logit for _, logit, _ in scored), default=-math.inf)
        rest = combine(e for e in found + best if e.id != CLASSIFIER_ID)
        if not combo.reads(ngram, rest, len(text)):
            reads[0] += 1
            continue
        p1, more = detector.first_read(text, lambda: shipped._suspect_spans(text, norm, scored), combo.first_tokens)
        reads[2 if more and combo.reads_on(ngram, detector.margin(p1)) else 1] += 1
    lines += ["", f"Of the {len(small)} benign 4 KB items the model read {reads[0]} not at all, {reads[1]} in its first "
              f"read only ({combo.first_tokens} tokens), {reads[2]} on (its second read too). Items: {len(small)} different 4 KB benign held-out tool results and "
              f"{len(injected)} held-out injected tool outputs each set in the middle of benign held-out text to 4 KB, "
              f"x {rounds} rounds, each item's time the median of its rounds, p50/p99 across the items; 1 MB: the "
              "held-out benign tool results joined, median of the scans.", ""]
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)


def _timed(call: Callable[[], object], rounds: int) -> list[float]:
    call()
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    parser.add_argument("--earlier-model", type=Path, help="a neural model folder to measure beside the shipped one")
    parser.add_argument("--earlier-name", default="the earlier model", help="its name in the tables")
    parser.add_argument("--wide", action="store_true", help=f"also the shipped model at `max_windows: {WIDE_BUDGET}`")
    parser.add_argument("--detectors", action="store_true", help="the per-detector table (issue 36) only")
    parser.add_argument("--latency", action="store_true", help="the cascade's latency table only")
    parser.add_argument("--cpu-note", default="", help="said beside the CPU's name in --latency (e.g. how its "
                        "features were masked: bench/avx2_only/README.md)")
    args = parser.parse_args()
    if args.detectors:
        return detectors_report(args.out or ROOT / "results" / "guard_detectors.md")
    if args.latency:
        return latency_report(args.out or ROOT / "results" / "guard_latency.md", args.quick, args.cpu_note)
    args.out = args.out or ROOT / "results" / "guard.md"
    loads = []
    for _ in range(3):
        began = time.perf_counter()
        detector = NeuralDetector.load(DEFAULT_DIR)
        loads.append(time.perf_counter() - began)
    kernel = model_alone(detector, 5 if args.quick else 50)

    def guard_of(**settings: object) -> Callable[[str], bool]:
        guard = build_guard(PromptGuardConfig.model_validate({"type": "prompt_guard", **settings}))
        return lambda t: guard.scan(t).blocked

    budget = PromptGuardConfig(type="prompt_guard").neural.max_windows
    before = build_guard(PromptGuardConfig(type="prompt_guard"))
    before.combination = None
    first_cascade = build_guard(PromptGuardConfig(type="prompt_guard"))
    first_cascade.combination = dataclasses.replace(first_cascade.combination, **FIRST_CASCADE)
    scanners: list[tuple[str, str, Callable[[str], bool]]] = [
        (f"prompt_guard, shipped default (combination of every detector, cascade, neural budget {budget} windows)",
         "shipped", guard_of()),
        ("before issue 36 (the neural model reads every item, the n-gram model not counted)", "before",
         lambda t: before.scan(t).blocked)]
    if args.earlier_model:
        scanners.append((f"the same guard with {args.earlier_name} (`neural.model_dir`)", args.earlier_name,
                         guard_of(neural={"model_dir": str(args.earlier_model.resolve())})))
    if args.wide:
        scanners.append((f"the same with `neural.max_windows: {WIDE_BUDGET}`", f"{WIDE_BUDGET} windows",
                         guard_of(neural={"max_windows": WIDE_BUDGET})))
    scanners += [("previous scorer (cheap detectors: rules, heuristics, n-gram model)", "previous",
                  guard_of(detectors={"neural": False})),
                 ("baseline: str.lower() + in, 16 keywords", "keywords", keyword_scan)]
    files = {name: load_rows(path) for name, path in HELDOUT_FILES.items() if path.is_file()}
    small, big = corpus(files["held-out (round 2)"])
    rounds = 2 if args.quick else 10
    for _, _, scan in scanners:
        latencies(scan, small, 1)  # warm-up: first touches of the model tables and regex caches
    speeds = throughputs([scan for _, _, scan in scanners], big, 3 if args.quick else 9)
    lines = [
        "# prompt_guard benchmark",
        "",
        f"{datetime.date.today().isoformat()} · `{platform.machine()}` · {cpu_model()} · Python "
        f"{platform.python_version()} · one core (single process, onnxruntime single-threaded)",
        "",
        f"Neural model load (start-up): {1000 * statistics.median(loads):.0f} ms (median of 3). The shipped model "
        f"alone on {detector.max_windows} windows of {WINDOW_TOKENS} tokens (a 4 KB result's budget, one batch): "
        f"{kernel:.1f} ms on this CPU (median).",
        "",
        "| scanner | 1 MB document | 4 KB tool result p50 | p99 | " + " | ".join(f"{n} recall / FPR" for n in files) + " |",
        "|---|---|---|---|" + "---|" * len(files),
    ]
    detail: dict[str, dict[str, dict[str, Tally]]] = {}
    size = len(big.encode("utf-8"))
    for (name, _, scan), mbps in zip(scanners, speeds):
        lat = sorted(latencies(scan, small, rounds))
        p50, p99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
        detail[name] = {label: slices(rows, scan) for label, rows in files.items()}
        cells = [f"{pct(g['all'].metrics()['recall'])} / {pct(g['all'].metrics()['fpr'])}" for g in detail[name].values()]
        lines.append(f"| {name} | {1000 * size / 1e6 / mbps:.0f} ms ({mbps:.1f} MB/s) | {p50 * 1e3:.2f} ms | "
                     f"{p99 * 1e3:.2f} ms | " + " | ".join(cells) + " |")
    compared = scanners[:-1]  # the keyword baseline only in the summary
    lines += ["", "Tool-output rows by file, source and language (recall / FPR; " + ", then ".join(s for _, s, _ in compared)
              + "):", "",
              "| file | slice | injection | benign | " + " | ".join(f"{s} recall | {s} FPR" for _, s, _ in compared) + " |",
              "|---|---|---|---|" + "---|---|" * len(compared)]
    first = compared[0][0]
    for label in files:
        for key, tally in sorted(detail[first][label].items(), key=lambda kv: (kv[0] != "all", kv[0])):
            m = tally.metrics()
            cells = [detail[name][label][key].metrics() for name, _, _ in compared]
            lines.append(f"| {label} | {key} | {m['injection']} | {m['benign']} | "
                         + " | ".join(f"{pct(c['recall'])} | {pct(c['fpr'])}" for c in cells) + " |")
    lines += ["", "Data: " + ", ".join(f"`{HELDOUT_FILES[n].relative_to(ROOT.parent)}` ({len(r)} rows)" for n, r in files.items())
              + "; provenance in `training/DATA.md`. Only tool-output rows (every kind but `prompt`) are "
              f"counted. Latency: {len(small)} different 4 KB benign held-out tool results x {rounds} rounds; "
              f"p50/p99 across the results, each result's time the median of its rounds. 1 MB document: its size "
              f"over the median time of {3 if args.quick else 9} scans interleaved across the scanners.", ""]
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(json.dumps({"written": str(args.out)}))


if __name__ == "__main__":
    main()
