"""Calibrate an ensemble of shipped neural models on the validation split (P7), never on held-out data.

Run by hand (never in CI), on the training files of DATA.md:

    python -m training.ensemble --data D/train.jsonl --data D/train_round4.jsonl … \\
        --members default high_recall --out plugins/prompt_guard/model/ensemble [--scores S.jsonl]

Every validation row (`neural.is_validation`) is scanned by the default guard the way the runtime
scans it; each member reads it at the default budget, with its own tokenizer and the same suspicious
ranges, and its margin (the logit of its highest window probability minus the logit of its own
threshold) is recorded beside the rest of the guard's score (rules and heuristics). `--scores`
keeps them, so that choosing again does not score again.

Then, for each weight `w` of the first member (the second gets `1 - w`; `WEIGHTS`), the ensemble's
threshold is the lowest at which it alone blocks at most `--max-fpr` of the benign tool-output rows
of each validation slice (as `neural calibrate` does for one model), and the `w` with the most
tool-output recall there is chosen (a tie: the larger `w`, the first member's). The cascade bound
is then the smallest `L` in `CASCADE_BOUNDS` whose cascade (later members read an item only when the
first member's margin is above `-L`) loses at most `CASCADE_RECALL_LOSS` of that recall. The card
(`model.json`) names the members by folder and model.onnx sha256 and records what was chosen.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.neural import (
    ENSEMBLE_FORMAT,
    SHIPPED_MODELS,
    Ensemble,
    EnsembleDetector,
    NeuralDetector,
    file_sha256,
    sigmoid,
)
from plugins.prompt_guard.plugin import build_guard
from training.neural import Scored, binding_rows, fpr_cut, validation_slice
from training.window_budget import validation_rows

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
"""The first member's weights tried (1.0: the first member alone)."""
CASCADE_BOUNDS = tuple(range(1, 11))
CASCADE_RECALL_LOSS = 0.003
"""The validation tool-output recall a cascade may lose against the full ensemble (0.3 point)."""


@dataclass(frozen=True)
class MemberScores:
    """One validation row: each member's margin, the rest of the guard's score, and its labels."""

    margins: tuple[float, ...]
    rest: float
    injection: bool
    kind: str
    slice: str
    source: str

    @property
    def tool(self) -> bool:
        return self.kind != "prompt"


class _Recording(EnsembleDetector):
    """The members at weights that do not matter, recording each item's margins; its evidence is
    0 so the guard's score is the rest of the guard's (a noisy-OR term of 0 changes nothing)."""

    recorded: list[list[float]]

    def margins(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple) -> list[float]:
        margins = super().margins(raw, suspects)
        self.recorded.append(margins)
        return margins

    def evidence(self, probability: float) -> float:
        return 0.0


def score(files: Sequence[Path], members: Sequence[Path]) -> list[MemberScores]:
    """Scan every validation row of `files` with the default guard, each member reading it."""
    guard = build_guard(PromptGuardConfig(type="prompt_guard"))
    detectors = [NeuralDetector.load(m) for m in members]
    recording = _Recording(detectors, Ensemble(tuple(1.0 for _ in detectors)), 0.5, "validation")
    guard.neural = recording
    out = []
    for row in validation_rows(files):
        recording.recorded = []
        verdict = guard.scan(row["text"])
        # a text over the scan cap is read as two pieces: the higher margin of each member stands
        margins = tuple(max(m[i] for m in recording.recorded) for i in range(len(detectors)))
        out.append(MemberScores(margins, verdict.score, row["label"] == "injection", row.get("kind") or "?",
                          validation_slice(row["text"], row.get("source")) or "hash", row.get("source") or "?"))
    return out


def combined(row: MemberScores, ensemble: Ensemble) -> float:
    """The ensemble's margin on a scored row, as `EnsembleDetector` computes it."""
    first = row.margins[0]
    return ensemble.margin(row.margins if ensemble.reads_on(first) else (first,))


def threshold(rows: Sequence[MemberScores], ensemble: Ensemble, max_fpr: float) -> float:
    """The lowest margin threshold at which the ensemble alone blocks at most `max_fpr` of the
    benign tool-output rows of every slice."""
    cuts = [fpr_cut([combined(r, ensemble) for r in rows if r.slice == name and r.tool and not r.injection], max_fpr)
            for name in sorted({r.slice for r in rows})]
    return max((c for c in cuts if c is not None), default=-math.inf)


def rates(rows: Sequence[MemberScores], blocked: Sequence[bool]) -> tuple[float, float, int, int]:
    """Recall and FPR of `blocked` over `rows`, with their injection and benign counts."""
    pos = [b for r, b in zip(rows, blocked) if r.injection]
    neg = [b for r, b in zip(rows, blocked) if not r.injection]
    return sum(pos) / max(1, len(pos)), sum(neg) / max(1, len(neg)), len(pos), len(neg)


def alone(rows: Sequence[MemberScores], ensemble: Ensemble, cut: float) -> list[bool]:
    return [combined(r, ensemble) >= cut for r in rows]


def guard_blocks(rows: Sequence[MemberScores], ensemble: Ensemble, cut: float, guard_threshold: float = 0.5) -> list[bool]:
    """The whole guard's decisions: the rest of its score noisy-OR the ensemble's evidence."""
    return [1 - (1 - r.rest) * (1 - sigmoid(combined(r, ensemble) - cut)) >= guard_threshold for r in rows]


@dataclass(frozen=True)
class Choice:
    weight: float
    cut: float
    recall: float
    cascade: float | None = None
    second_share: float = 1.0
    """share of the benign tool-output rows the later members read"""


def choose(rows: Sequence[MemberScores], max_fpr: float) -> tuple[Choice, list[Choice]]:
    """The weight with the most validation tool-output recall at its threshold, then the cascade."""
    tool = [r for r in rows if r.tool]
    tried = []
    for w in WEIGHTS:
        ensemble = Ensemble((w, 1 - w))
        cut = threshold(rows, ensemble, max_fpr)
        tried.append(Choice(w, cut, rates(tool, alone(tool, ensemble, cut))[0]))
    best = max(tried, key=lambda c: (round(c.recall, 6), c.weight))
    benign = [r for r in tool if not r.injection]
    for bound in CASCADE_BOUNDS:
        ensemble = Ensemble((best.weight, 1 - best.weight), -float(bound))
        recall = rates(tool, alone(tool, ensemble, best.cut))[0]
        if best.recall - recall <= CASCADE_RECALL_LOSS:
            share = sum(ensemble.reads_on(r.margins[0]) for r in benign) / max(1, len(benign))
            return Choice(best.weight, best.cut, recall, -float(bound), share), tried
    return best, tried


def report(rows: Sequence[MemberScores], choice: Choice) -> list[str]:
    """Per slice and kind: the first member alone at its own threshold, and the chosen ensemble,
    the model alone and the whole guard."""
    first = Ensemble((1.0, 0.0))
    chosen = Ensemble((choice.weight, 1 - choice.weight), choice.cascade)
    lines = ["| slice | kind | injection / benign | first member alone | ensemble alone | "
             "whole guard, first member | whole guard, ensemble |", "|---|---|---|---|---|---|---|"]
    for name in sorted({r.slice for r in rows}):
        for kind, part in (("tool output", [r for r in rows if r.slice == name and r.tool]),
                           ("prompts", [r for r in rows if r.slice == name and not r.tool])):
            if not part:
                continue
            cells = []
            for blocked in (alone(part, first, 0.0), alone(part, chosen, choice.cut),
                            guard_blocks(part, first, 0.0), guard_blocks(part, chosen, choice.cut)):
                recall, fpr, pos, neg = rates(part, blocked)
                cells.append(f"{100 * recall:.1f} % / {100 * fpr:.2f} %")
            lines.append(f"| {name} | {kind} | {pos} / {neg} | " + " | ".join(cells) + " |")
    return lines


def binding(rows: Sequence[MemberScores], choice: Choice) -> str:
    """Where the benign tool-output rows the ensemble alone blocks come from (`neural.binding_rows`)."""
    chosen = Ensemble((choice.weight, 1 - choice.weight), choice.cascade)
    return binding_rows([Scored(sigmoid(combined(r, chosen) - choice.cut), r.injection, r.kind, r.slice, r.source)
                         for r in rows], 0.5)


def write_card(out: Path, members: Sequence[Path], choice: Choice, max_fpr: float, rows: int) -> Path:
    """The ensemble's model.json: members by folder (relative to `out`) and model.onnx sha256."""
    out.mkdir(parents=True, exist_ok=True)
    card = {
        "format": ENSEMBLE_FORMAT,
        "members": [{"dir": os.path.relpath(m.resolve(), out.resolve()), "model.onnx": file_sha256(m / "model.onnx")}
                    for m in members],
        "weights": [round(choice.weight, 6), round(1 - choice.weight, 6)],
        "threshold": round(sigmoid(choice.cut), 9),
        "cascade": choice.cascade,
        "threshold_rule": (f"validation split ({rows} rows): for each first-member weight in {list(WEIGHTS)}, the lowest "
                           f"threshold at which the ensemble alone blocks at most {max_fpr} of the benign tool-output rows "
                           "of each slice; the weight with the most tool-output recall; the cascade bound the smallest of "
                           f"{list(CASCADE_BOUNDS)} losing at most {CASCADE_RECALL_LOSS} of it"),
    }
    path = out / "model.json"
    path.write_text(json.dumps(card, indent=1) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, action="append", required=True, help="a training JSONL file (repeat)")
    parser.add_argument("--members", nargs=2, default=["default", "high_recall"],
                        help="two shipped model names or model folders, the first read first")
    parser.add_argument("--out", type=Path, required=True, help="folder for the ensemble's model.json")
    parser.add_argument("--scores", type=Path, help="JSONL of scored rows: read if it exists, else written")
    parser.add_argument("--max-fpr", type=float, default=0.01)
    args = parser.parse_args()
    members = [SHIPPED_MODELS[m] if m in SHIPPED_MODELS else Path(m) for m in args.members]
    if args.scores and args.scores.is_file():
        rows = [MemberScores(**{**row, "margins": tuple(row["margins"])})
                for row in map(json.loads, args.scores.open(encoding="utf-8"))]
    else:
        rows = score(args.data, members)
        if args.scores:
            args.scores.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    choice, tried = choose(rows, args.max_fpr)
    print("| first member's weight | threshold (margin) | validation tool-output recall, ensemble alone |")
    print("|---|---|---|")
    for c in tried:
        print(f"| {c.weight:.1f} | {c.cut:+.3f} | {100 * c.recall:.1f} % |")
    print(f"chosen: weight {choice.weight:.1f}, threshold {choice.cut:+.3f}, cascade {choice.cascade}, "
          f"later members read {100 * choice.second_share:.1f} % of benign tool output; recall {100 * choice.recall:.1f} %")
    print(binding(rows, choice))
    print("\n".join(report(rows, choice)))
    print(f"-> {write_card(args.out, members, choice, args.max_fpr, len(rows))}")


if __name__ == "__main__":
    main()
