"""Evaluation of a guard on labelled JSONL (P4, P7): precision, recall, false-positive rate,
breakdowns per `source`, `kind` and `lang`, latency per KB, and the rules behind each miss and false
alarm. Used by `toolgate guard eval` and by the benchmark/eval scripts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins.prompt_guard.scanner import CLASSIFIER_ID, HEURISTIC_IDS, Guard, Verdict, combine

LABELS = ("injection", "benign")


class EvalInputError(ValueError):
    """A labelled file that cannot be evaluated; the message names the line."""


@dataclass(frozen=True)
class Row:
    """One labelled example."""

    line: int
    text: str
    label: str
    source: str | None = None
    kind: str | None = None
    lang: str | None = None


def load_rows(path: str | Path) -> list[Row]:
    """Read `{"text", "label", ["source"], ["kind"], ["lang"]}` rows; raise `EvalInputError` on bad input."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 may stand inside a row
    except OSError as exc:
        raise EvalInputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise EvalInputError(f"{path}: not UTF-8 text") from None
    rows: list[Row] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalInputError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise EvalInputError(f"{path}:{number}: expected an object with a string 'text'")
        if data.get("label") not in LABELS:
            raise EvalInputError(f"{path}:{number}: 'label' must be \"injection\" or \"benign\", got {data.get('label')!r}")
        source, kind, lang = data.get("source"), data.get("kind"), data.get("lang")
        rows.append(Row(number, data["text"], data["label"], None if source is None else str(source),
                        None if kind is None else str(kind), None if lang is None else str(lang)))
    if not rows:
        raise EvalInputError(f"{path}: no rows")
    return rows


@dataclass
class Tally:
    """Confusion counts of one slice."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0

    def add(self, label: str, blocked: bool) -> None:
        if label == "injection":
            self.tp, self.fn = self.tp + blocked, self.fn + (not blocked)
        else:
            self.fp, self.tn = self.fp + blocked, self.tn + (not blocked)

    def metrics(self) -> dict[str, Any]:
        pos, neg, flagged = self.tp + self.fn, self.fp + self.tn, self.tp + self.fp
        return {
            "rows": pos + neg, "injection": pos, "benign": neg,
            "tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
            "precision": round(self.tp / flagged, 4) if flagged else None,
            "recall": round(self.tp / pos, 4) if pos else None,
            "fpr": round(self.fp / neg, 4) if neg else None,
        }


@dataclass
class Report:
    """Everything `guard eval` prints."""

    overall: Tally = field(default_factory=Tally)
    by_source: dict[str, Tally] = field(default_factory=dict)
    by_kind: dict[str, Tally] = field(default_factory=dict)
    by_lang: dict[str, Tally] = field(default_factory=dict)
    predictions: list[Verdict] = field(default_factory=list)
    misses: list[dict[str, Any]] = field(default_factory=list)
    false_alarms: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    kilobytes: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The metrics as one JSON-able object (`--json`)."""
        return {
            **self.overall.metrics(),
            "latency_ms_per_kb": round(1000 * self.seconds / self.kilobytes, 4) if self.kilobytes else None,
            "by_source": {k: v.metrics() for k, v in sorted(self.by_source.items())},
            "by_kind": {k: v.metrics() for k, v in sorted(self.by_kind.items())},
            "by_lang": {k: v.metrics() for k, v in sorted(self.by_lang.items())},
            "misses": self.misses,
            "false_alarms": self.false_alarms,
        }


def evaluate(guard: Guard, rows: Iterable[Row]) -> Report:
    """Scan every row and tally the verdicts against the labels."""
    report = Report()
    for row in rows:
        started = time.perf_counter()
        verdict = guard.scan(row.text)
        report.seconds += time.perf_counter() - started
        report.kilobytes += len(row.text.encode("utf-8")) / 1024
        report.predictions.append(verdict)
        report.overall.add(row.label, verdict.blocked)
        if row.source is not None:
            report.by_source.setdefault(row.source, Tally()).add(row.label, verdict.blocked)
        if row.kind is not None:
            report.by_kind.setdefault(row.kind, Tally()).add(row.label, verdict.blocked)
        if row.lang is not None:
            report.by_lang.setdefault(row.lang, Tally()).add(row.label, verdict.blocked)
        if verdict.blocked != (row.label == "injection"):
            entry = {"line": row.line, "source": row.source, "kind": row.kind, "score": verdict.score,
                     "rules": list(verdict.rules)}
            (report.misses if row.label == "injection" else report.false_alarms).append(entry)
    return report


def prediction_line(verdict: Verdict) -> str:
    """One `--predictions` line."""
    return json.dumps({"verdict": verdict.verdict, "score": verdict.score, "rules": list(verdict.rules)})


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal; "-" when undefined (no rows)."""
    return "-" if value is None else f"{100 * value:.1f}%"


def _table(title: str, slices: dict[str, Tally]) -> list[str]:
    out = [f"{title:<28} {'rows':>6} {'precision':>10} {'recall':>8} {'FPR':>7}"]
    for name, tally in sorted(slices.items()):
        m = tally.metrics()
        out.append(f"{name:<28} {m['rows']:>6} {pct(m['precision']):>10} {pct(m['recall']):>8} {pct(m['fpr']):>7}")
    return out


def format_report(report: Report, limit: int = 20) -> str:
    """Human-readable report; lists at most `limit` misses and false alarms each."""
    data = report.to_json()
    lines = _table("overall", {"all": report.overall})
    if report.by_kind:
        lines += [""] + _table("by kind", report.by_kind)
    if report.by_lang:
        lines += [""] + _table("by language", report.by_lang)
    if report.by_source:
        lines += [""] + _table("by source", report.by_source)
    lines.append("")
    lines.append(f"latency: {data['latency_ms_per_kb']} ms per KB ({report.kilobytes:.0f} KB scanned)")
    for title, items in (("misses (injection allowed)", report.misses), ("false alarms (benign blocked)", report.false_alarms)):
        lines.append(f"\n{title}: {len(items)}")
        for item in items[:limit]:
            where = "/".join(str(x) for x in (item["source"], item["kind"]) if x)
            lines.append(f"  line {item['line']} {where} score {item['score']:.2f} rules: {', '.join(item['rules']) or '-'}")
        if len(items) > limit:
            lines.append(f"  … {len(items) - limit} more (use --json for all)")
    return "\n".join(lines)


@dataclass(frozen=True)
class DetectorScores:
    """What each detector alone says of one text (for fitting the combination on validation rows,
    `training/combination.py`, and for the per-detector columns of `bench/guard_bench.py`)."""

    rules: float
    """the rules' evidence in the best chunk, noisy-OR"""
    heuristics: float
    """the heuristics' evidence (raw text, decoded payloads, best chunk), noisy-OR"""
    ngram: float
    """the n-gram model's best window logit over all chunks (-inf without a model)"""
    cheap: float
    """the rules and heuristics together, noisy-OR (what the neural model's evidence joined before issue 36)"""
    previous: float
    """the cheap detectors' score as the guard with `detectors: {neural: false}` gives it"""
    first: float | None
    """the neural model's first window (`NeuralDetector.first_read`), as a margin"""
    more: bool
    """whether the text holds more than that window"""
    second: float | None
    """the rest of its budget (`second_read`), as a margin (None when there is no rest)"""
    full: float | None
    """the neural model reading its whole budget at once (`probability`, the read before the cascade), as a margin"""
    chars: int
    short: dict[int, float] | None = None
    """the first read with fewer tokens (`first_read(..., tokens)`), as margins, by tokens (None: not asked)"""
    edges: dict[int, float] | None = None
    """the second read with shorter head and tail windows (`second_read(..., edge)`), as margins, by tokens"""

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and v == float("-inf") else v) for k, v in self.__dict__.items()}


def detector_scores(guard: Guard, text: str, short: Sequence[int] = (), edges: Sequence[int] = ()) -> DetectorScores:
    """Every detector of `guard` on `text` alone, the neural model read every way the cascade
    can read it (batched as the runtime batches, so its probabilities are the runtime's; `short`:
    first reads of these many tokens too; `edges`: second reads with head and tail windows of these
    many tokens). Only the first `max_scan_bytes` characters are scored."""
    raw = text[: guard.settings.max_scan_bytes]
    found, best, scored, norm = guard.cheap_piece(raw)
    kept = [e for e in found + best if e.id not in guard.disabled]
    heuristic = [e for e in kept if e.id in HEURISTIC_IDS or e.id.startswith("heuristic.")]
    rules = [e for e in best if e.id not in HEURISTIC_IDS and e.id != CLASSIFIER_ID and e.id not in guard.disabled
             and not e.id.startswith("classifier")]
    ngram = max((logit for _, logit, _ in scored), default=float("-inf"))
    first = second = full = None
    shorts: dict[int, float] | None = None
    edged: dict[int, float] | None = None
    more = False
    neural = guard.neural
    if neural is not None:
        ranked: list[list[tuple[int, int]]] = []

        def suspects() -> list[tuple[int, int]]:
            if not ranked:
                ranked.append(guard._suspect_spans(raw, norm, scored))
            return ranked[0]

        p, more = neural.first_read(raw, suspects)
        first = neural.margin(p)
        shorts = {n: neural.margin(neural.first_read(raw, suspects, n)[0]) for n in short} if short else None
        if more:
            second = neural.margin(neural.second_read(raw, suspects))
            edged = {n: neural.margin(neural.second_read(raw, suspects, n)) for n in edges} if edges else None
        full = neural.margin(neural.probability(raw, suspects))
    cheap = combine(e for e in kept if e.id != CLASSIFIER_ID)
    return DetectorScores(combine(rules), combine(heuristic), ngram, cheap, combine(kept), first, more, second, full,
                          len(raw), shorts, edged)
