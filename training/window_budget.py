"""Choose the neural detector's window budget (`neural.max_windows`) on the validation split (P7).

Run by hand (never in CI), on the training files of DATA.md:

    python -m training.window_budget --data D/train.jsonl \\
        --data D/train_round4.jsonl --data D/short.jsonl [--budgets 1 2 3 4 8]

Reads only the validation rows of those files (`neural.is_validation`: the rows the model never
trained on; held-out files are never read here) and scans each with the default guard at each
budget, at the default thresholds: recall and FPR on tool-output rows (all of them, those
longer than two windows, the only ones a budget of 2 or more changes, and those of the sources
kept out of training whole, one column per `neural.SOURCE_SLICES`) and on prompts, and the
model tokens read per long row (the model's time is linear in them). Each window's probability
is computed once, alone, and shared by the budgets, so the figures differ only by what is read.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.evaluation import Tally, pct
from plugins.prompt_guard.neural import DEFAULT_DIR, NeuralDetector, Window, model_text
from plugins.prompt_guard.plugin import build_guard
from training.neural import SOURCE_SLICES, is_validation, validation_slice


def validation_rows(files: Sequence[Path]) -> list[dict[str, str]]:
    """The validation rows of labelled JSONL training files."""
    rows = []
    for path in files:
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            if row.get("text", "").strip() and is_validation(row["text"], row.get("source")):
                rows.append(row)
    return rows


class CachedDetector(NeuralDetector):
    """The shipped model at another budget; window probabilities shared through `cache`."""

    def __init__(self, base: NeuralDetector, max_windows: int, cache: dict[tuple[int, ...], float],
                 read: list[int]) -> None:
        super().__init__(base.session, base.tokenizer, base.threshold, max_windows, base.source,
                         base.special_tokens)
        self.cache = cache
        self.read = read

    def probabilities(self, windows: Sequence[Window]) -> list[float]:
        for w in windows:
            if w.ids not in self.cache:
                self.cache[w.ids] = super().probabilities([w])[0]
        self.read.append(sum(len(w.ids) for w in windows))
        return [self.cache[w.ids] for w in windows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, action="append", required=True, help="a training JSONL file (repeat)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    parser.add_argument("--model", type=Path, default=DEFAULT_DIR, help="model folder (default: the shipped model)")
    args = parser.parse_args()
    rows = validation_rows(args.data)
    base = NeuralDetector.load(args.model)
    long = [len(base.windows(model_text(r["text"][:20_000]), 3)) > 2 for r in rows]
    cache: dict[tuple[int, ...], float] = {}
    slice_of = [validation_slice(r["text"], r.get("source")) for r in rows]
    lines = ["| budget (windows of 128 tokens) | tool output recall / FPR | tool output > 2 windows recall / FPR | "
             "prompts recall / FPR | " + " | ".join(f"{name} tool output recall / FPR" for name in SOURCE_SLICES)
             + " | model tokens per long row (mean) |",
             "|---|---|---|---|" + "---|" * len(SOURCE_SLICES) + "---|"]
    for budget in args.budgets:
        guard = build_guard(PromptGuardConfig(type="prompt_guard"))
        guard.combination = None  # the whole read at each budget, not the cascade (training/combination.py)
        read: list[int] = []
        guard.neural = CachedDetector(base, budget, cache, read)
        tallies = {name: Tally() for name in ("tool", "long", "prompt", *SOURCE_SLICES)}
        long_read = []
        for row, is_long, name in zip(rows, long, slice_of):
            before = len(read)
            blocked = guard.scan(row["text"]).blocked
            tallies["prompt" if row["kind"] == "prompt" else "tool"].add(row["label"], blocked)
            if name in SOURCE_SLICES and row["kind"] != "prompt":
                tallies[name].add(row["label"], blocked)
            if is_long and row["kind"] != "prompt":
                tallies["long"].add(row["label"], blocked)
                long_read.append(sum(read[before:]))
        cells = [f"{pct(t.metrics()['recall'])} / {pct(t.metrics()['fpr'])}" for t in tallies.values()]
        lines.append(f"| {budget} | " + " | ".join(cells) + f" | {sum(long_read) / max(1, len(long_read)):.0f} |")
        print(lines[-1], flush=True)
    tool = [r for r in rows if r["kind"] != "prompt"]
    print("\n".join(["", *lines, "", f"{len(rows)} validation rows of {', '.join(p.name for p in args.data)}: "
                     f"{len(tool)} tool output ({sum(r['label'] == 'injection' for r in tool)} injection), "
                     f"{sum(l for l, r in zip(long, rows) if r['kind'] != 'prompt')} of them longer than two windows; "
                     f"{len(rows) - len(tool)} prompts."]))


if __name__ == "__main__":
    main()
