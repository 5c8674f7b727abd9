"""Fit prompt_guard's combination of detectors and its cascade's gates on validation rows (issue 36).

Run by hand (never in CI), in two steps:

    python -m training.combination features --data D/train.jsonl --data D/train_round4.jsonl \\
        --data D/train_round5.jsonl --data D/short.jsonl --out V.jsonl
    python -m training.combination fit --features V.jsonl --out plugins/prompt_guard/model/combination.json

`features` scores the validation rows of training files (`neural.validation_slice`: rows the neural
model never trained on; held-out files are never read here) with every detector alone
(`evaluation.detector_scores`: rules, heuristics, the n-gram logit, the neural model's margins as
the cascade reads). `--heldout` instead scores every row of the given files, for the benchmark's
per-detector table only; `fit` refuses a features file made that way.

`fit` chooses, on validation tool-output rows only:

1. the direction of the line across the n-gram logit and the neural margin (clipped,
   `combination.CLIP`; the weights `cos t`, `sin t` for `t` on a grid over [0, 90] degrees), and
2. its bias: for each direction the highest bias at which the whole guard (the combined evidence
   in a noisy-OR with the rules and heuristics) blocks at most `--max-fpr` of the benign
   tool-output rows of each validation slice (`hash`, `unseen-source`, `prompt-docs`), as `neural
   calibrate` chose the model's threshold; of the directions, the one with the most recall on the
   injected tool-output rows of sources the n-gram model never trained on (ties: fewer false alarms);
3. the cascade's gates and its reads' lengths (`first_tokens` from `--first-tokens`, the first
   read over the most suspicious span; `edge_tokens` from `--edge-tokens`, the head and tail windows
   of the second): of the settings that lose at most `--max-loss` of the validation injections the
   guard blocks reading every item in its whole budget and keep every slice within `--max-fpr`, the
   one whose model reading costs least (in full windows; the model's time is linear in its tokens):
   first the most any long row costs (what an attacker's 4 KB item can make it cost: it can always
   make the first read leave the verdict open), then the cost that at most `--max-whole` of the
   long benign tool-output rows exceed (a benign 4 KB item's p99), then the mean.
   `--keep-line FILE` keeps the line (1-2) of a combination file and refits only this.

The n-gram model (round 2) trained on a 10 % split of another build of train.jsonl: rows of its
own sources may be ones it trained on, so its scores there are optimistic; `fit` therefore weighs
the logistic model on the rows of the sources it never saw (round 3's packages and documents,
rounds 4 and 5), and says how many.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROUND2_SOURCES = ("s-labs", "site-packages", "npm-", "gnu-info", "man-pages", "google-cloud", "rust-toolchain",
                  "synthetic-email-train", "synthetic-ticket-train", "libxslt")
"""Source name prefixes of round 2's training documents and prompts in train.jsonl (what the n-gram
model may have trained on); short.jsonl's injections are round 2's short prompts."""


def _round2(source: str | None, file: str) -> bool:
    if file == "short.jsonl":
        return True
    return file == "train.jsonl" and source is not None and source.startswith(ROUND2_SOURCES)


def features(args: argparse.Namespace) -> None:
    from plugins.prompt_guard.config import PromptGuardConfig
    from plugins.prompt_guard.evaluation import detector_scores
    from plugins.prompt_guard.plugin import build_guard
    from training.neural import validation_slice

    guard = build_guard(PromptGuardConfig(type="prompt_guard"))
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(json.dumps({"meta": {"heldout": args.heldout, "files": [str(p) for p in args.data],
                                       "date": datetime.date.today().isoformat()}}) + "\n")
        for path in args.data:
            for number, line in enumerate(path.open(encoding="utf-8"), start=1):
                row = json.loads(line)
                text = row.get("text", "")
                if not text.strip():
                    continue
                name = "heldout" if args.heldout else validation_slice(text, row.get("source"))
                if name is None:
                    continue
                scores = detector_scores(guard, text, args.short, args.edges)
                out.write(json.dumps({"file": path.name, "line": number, "slice": name, "label": row["label"],
                                      "kind": row.get("kind"), "source": row.get("source"), "lang": row.get("lang"),
                                      "attack": row.get("attack"), "round2": _round2(row.get("source"), path.name),
                                      **scores.to_json()}) + "\n")
                out.flush()


def load_features(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0])["meta"], [json.loads(line) for line in lines[1:] if line.strip()]


def _noisy_or(a: float, b: float) -> float:
    return 1.0 - (1.0 - a) * (1.0 - b)


def fit_logistic(x: Sequence[Sequence[float]], y: Sequence[int], l2: float = 1e-3, steps: int = 50) -> list[float]:
    """Weights (the last one the bias) of a logistic regression, by Newton's method."""
    import numpy as np

    X = np.hstack([np.asarray(x, dtype=float), np.ones((len(x), 1))])
    t = np.asarray(y, dtype=float)
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -60, 60)))
        grad = X.T @ (p - t) + l2 * np.r_[w[:-1], 0.0]
        hess = (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(X.shape[1])
        w -= np.linalg.solve(hess, grad)
    return [float(v) for v in w]


LONG_CHARS = 1500
"""Benign items at least this long are those whose reading cost the gates minimise (a 4 KB item
holds 8-10 windows; shorter ones cost less whatever is read)."""


class Table:
    """Feature rows as arrays (tool-output rows, or any subset), for fast scoring of many settings."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        import numpy as np
        from plugins.prompt_guard.combination import CLIP

        self.np = np
        self.rows = rows
        self.x = np.array([max(-CLIP, min(CLIP, r["ngram"] if r["ngram"] is not None else -CLIP))
                           for r in rows])
        self.m1 = np.clip(np.array([r["first"] for r in rows], dtype=float), -CLIP, CLIP)
        self.m2 = np.clip(np.array([r["second"] if r["second"] is not None else -CLIP for r in rows], dtype=float),
                          -CLIP, CLIP)
        self.more = np.array([bool(r["more"]) for r in rows])
        self.cheap = np.array([r["cheap"] if "cheap" in r else _noisy_or(r["rules"], r["heuristics"]) for r in rows])
        self.chars = np.array([r["chars"] for r in rows])
        self.injection = np.array([r["label"] == "injection" for r in rows])
        self.slice = np.array([r["slice"] for r in rows])
        self.full = np.maximum(self.m1, np.where(self.more, self.m2, -CLIP))
        self.short = {int(n): np.clip(np.array([(r.get("short") or {}).get(n, r["first"]) for r in rows], dtype=float),
                                      -CLIP, CLIP) for n in {n for r in rows for n in (r.get("short") or {})}}
        """first reads of fewer tokens (`features --short`), by tokens; a row that fits one window reads whole"""

        self.edges = {int(n): np.clip(np.array([(r.get("edges") or {}).get(n, r["second"] if r["second"] is not None
                                                                       else -CLIP) for r in rows], dtype=float),
                                      -CLIP, CLIP) for n in {n for r in rows for n in (r.get("edges") or {})}}
        """second reads with shorter head and tail windows (`features --edges`), by tokens"""

    def second(self, edge: int) -> Any:
        """The second read's margins with head and tail windows of `edge` tokens (64: half windows)."""
        if edge == 64:
            return self.m2
        if edge not in self.edges:
            raise SystemExit(f"the features file has no second read with {edge}-token edges (features --edges {edge})")
        return self.edges[edge]

    def first(self, tokens: int) -> Any:
        """The first read's margins at `tokens` tokens (128: a full window)."""
        if tokens == 128:
            return self.m1
        if tokens not in self.short:
            raise SystemExit(f"the features file has no first read of {tokens} tokens (features --short {tokens})")
        return self.short[tokens]

    def blocked(self, combo: Any, cascade: bool = True) -> tuple[Any, Any]:
        """Which rows the whole guard blocks under `combo`, and how many stages the model read (0-2)."""
        np = self.np
        from plugins.prompt_guard.combination import CLIP

        a, b, c = combo.ngram_weight, combo.neural_weight, combo.bias
        z_full = np.maximum(self.full, a * self.x + b * self.full + c)
        if cascade:
            reads = (self.chars <= combo.always_read_chars) | (self.x >= combo.gate_ngram) | (self.cheap >= combo.gate_cheap)
            m1 = self.first(combo.first_tokens)
            z1 = np.maximum(m1, a * self.x + b * m1 + c)
            m_on = np.maximum(m1, np.where(self.more, self.second(combo.edge_tokens), -CLIP))
            z_on = np.maximum(m_on, a * self.x + b * m_on + c)
            on = self.more & (z1 >= combo.read_on)
            z = np.where(reads, np.where(on, z_on, z1), np.maximum(-CLIP, a * self.x + b * -CLIP + c))
            stages = np.where(reads, np.where(on, 2, 1), 0)
        else:
            z, stages = z_full, np.full(len(self.rows), 2)
        evidence = 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))
        return 1.0 - (1.0 - self.cheap) * (1.0 - evidence) >= 0.5, stages

    def tally(self, blocked: Any, mask: Any = None) -> tuple[float, float, int, int]:
        np = self.np
        mask = np.ones(len(self.rows), dtype=bool) if mask is None else mask
        inj, ben = mask & self.injection, mask & ~self.injection
        return (float(blocked[inj].mean()) if inj.any() else 0.0, float(blocked[ben].mean()) if ben.any() else 0.0,
                int(inj.sum()), int(ben.sum()))


def fit(args: argparse.Namespace) -> None:
    from plugins.prompt_guard.classifier import DEFAULT_MODEL
    from plugins.prompt_guard.combination import CLIP, FORMAT, Combination
    from plugins.prompt_guard.neural import DEFAULT_DIR

    meta, rows = load_features(args.features)
    if meta.get("heldout"):
        raise SystemExit(f"{args.features}: scored held-out rows; the combination is fitted on validation rows only")
    tool_rows = [r for r in rows if r["kind"] != "prompt"]
    tool, prompts = Table(tool_rows), Table([r for r in rows if r["kind"] == "prompt"])
    np = tool.np
    unbiased = np.array([not r["round2"] for r in tool_rows])
    print(f"{len(tool_rows)} validation tool-output rows, {int((unbiased & tool.injection).sum())} injected ones "
          "of sources the n-gram model never trained on (the recall the direction is chosen by)")
    slices = sorted(set(tool.slice.tolist()))

    def fpr_ok(combo: Combination, cascade: bool) -> bool:
        blocked, _ = tool.blocked(combo, cascade)
        return all(tool.tally(blocked, tool.slice == name)[1] <= args.max_fpr for name in slices)

    # 1-2. the direction and the bias: per direction the highest bias within max_fpr on every slice
    open_gate = dict(gate_ngram=-math.inf, gate_cheap=0.0, read_on=-math.inf, always_read_chars=0)
    chosen: tuple[tuple[float, float], Combination] | None = None
    if args.keep_line:  # the line of the combination file in place; only the cascade is refitted
        kept = json.loads(args.keep_line.read_text(encoding="utf-8"))
        chosen = ((0.0, 0.0), Combination(kept["ngram_weight"], kept["neural_weight"], kept["bias"], **open_gate))
        print(f"the line kept from {args.keep_line}: ngram_weight {kept['ngram_weight']:.4f}, neural_weight "
              f"{kept['neural_weight']:.4f}, bias {kept['bias']:.4f}")
    for degrees in range(0, 91, 2) if not args.keep_line else ():
        a, b = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
        lo, hi = -60.0, 60.0
        for _ in range(50):
            mid = (lo + hi) / 2
            if fpr_ok(Combination(a, b, mid, **open_gate), cascade=False):
                lo = mid
            else:
                hi = mid
        combo = Combination(a, b, lo, **open_gate)
        blocked, _ = tool.blocked(combo, cascade=False)
        key = (float(blocked[unbiased & tool.injection].mean()), -float(blocked[~tool.injection].mean()))
        print(f"  direction {degrees:2d} degrees, bias {lo:8.3f}: recall (unseen sources) {key[0]:.1%}, "
              f"FPR {-key[1]:.2%}")
        if chosen is None or key > chosen[0]:
            chosen = (key, combo)
    assert chosen is not None
    full = chosen[1]
    a, b, bias = full.ngram_weight, full.neural_weight, full.bias
    base, _ = tool.blocked(full, cascade=False)
    caught = int((base & tool.injection).sum())
    print(f"chosen: ngram_weight {a:.4f}, neural_weight {b:.4f}, bias {bias:.4f}: the guard reading every item: tool output recall / FPR "
          + "{:.1%} / {:.2%} ({} / {})".format(*tool.tally(base)))
    for name in slices:
        print(f"  slice {name}: " + "{:.1%} / {:.2%} ({} / {})".format(*tool.tally(base, tool.slice == name)))

    # 3. the gates and the reads' lengths: the cheapest reading that loses at most max_loss of the
    # injections the full read catches, keeping every slice within max_fpr
    allowed = int(args.max_loss * caught)
    long_benign = ~tool.injection & (tool.chars >= LONG_CHARS)
    long_rows = tool.chars >= LONG_CHARS
    best: tuple[tuple[float, float, float], Combination] | None = None
    gates = np.unique(np.quantile(tool.x[~tool.injection], np.linspace(0, 1, 101)))
    read_ons = [-60.0] + [float(v) for v in np.linspace(-12, 2, 57)]
    for tokens in args.first_tokens:
        for edge in args.edge_tokens:
            first_cost, on_cost = tokens / 128, tokens / 128 + 2 * edge / 128
            option: tuple[tuple[float, float, float], Combination, int] | None = None
            for always in sorted({0, args.always_read_chars}):
                for gate in [-math.inf, *gates]:
                    for cheap_gate in (0.25, 0.5):
                        for read_on in read_ons:
                            combo = Combination(a, b, bias, float(gate), cheap_gate, read_on, always, tokens, edge)
                            blocked, stages = tool.blocked(combo)
                            lost = int((base & tool.injection & ~blocked).sum())
                            if lost > allowed:
                                continue
                            if not all(tool.tally(blocked, tool.slice == name)[1] <= args.max_fpr for name in slices):
                                continue
                            cost = np.where(stages == 0, 0.0, np.where(stages == 1, first_cost, on_cost))
                            key = (float(cost[long_rows].max()),
                                   float(np.quantile(cost[long_benign], 1 - args.max_whole)), float(cost[long_benign].mean()))
                            if option is None or key < option[0]:
                                option = (key, combo, lost)
            if option is None:
                print(f"  first read {tokens} tokens, edges {edge}: no setting loses at most {allowed} of {caught}")
                continue
            (worst, q, mean), combo, lost = option
            print(f"  first read {tokens} tokens, edges {edge}: long benign items cost at most {q:.3f} windows "
                  f"({1 - args.max_whole:.1%} of them), any long item at most {worst:.3f}, on average {mean:.3f}; "
                  f"loses {lost} of {caught}; gate {combo.gate_ngram:.3f}, cheap {combo.gate_cheap}, read on "
                  f"{combo.read_on:.3f}, always under {combo.always_read_chars} chars")
            if best is None or option[0] < best[0]:
                best = (option[0], combo)
    assert best is not None
    combo = best[1]
    blocked, stages = tool.blocked(combo)
    st = stages[long_benign]
    print(f"gates: n-gram logit >= {combo.gate_ngram:.3f}, cheap >= {combo.gate_cheap}, first read "
          f"{combo.first_tokens} tokens, read on at z >= {combo.read_on:.3f}, always under {combo.always_read_chars} chars; "
          f"lost {int((base & tool.injection & ~blocked).sum())} of {caught} injections the full read catches")
    print("cascade: tool output recall / FPR {:.1%} / {:.2%} ({} / {})".format(*tool.tally(blocked)))
    print(f"benign tool output of {LONG_CHARS:,}+ chars ({st.size}): model not read {(st == 0).mean():.1%}, one window "
          f"{(st == 1).mean():.1%}, whole budget {(st == 2).mean():.1%}")
    for name in slices:
        print(f"  slice {name}: " + "{:.1%} / {:.2%} ({} / {})".format(*tool.tally(blocked, tool.slice == name)))
    if prompts.rows:
        pb, _ = prompts.blocked(combo)
        print("  prompts: {:.1%} / {:.2%} ({} / {})".format(*prompts.tally(pb)))
    # the n-gram model alone at the same rule (for the benchmark's per-detector table)
    cuts = []
    for name in slices:
        values = sorted(tool.x[(tool.slice == name) & ~tool.injection].tolist())
        allowed_fp = int(args.max_fpr * len(values))
        cuts.append(values[-allowed_fp - 1] + 1e-6 if values else -CLIP)
    ngram_alone = max(cuts)
    print("the n-gram model alone at logit {:.3f}: tool output recall / FPR {:.1%} / {:.2%} ({} / {})".format(
        ngram_alone, *tool.tally(tool.x >= ngram_alone)))
    neural_alone = tool.full >= 0
    print("the neural model alone (its threshold, whole budget): {:.1%} / {:.2%} ({} / {})".format(*tool.tally(neural_alone)))
    before = 1.0 - (1.0 - tool.cheap) * (1.0 - 1.0 / (1.0 + np.exp(-tool.full))) >= 0.5
    print("before issue 36 (neural + rules + heuristics): {:.1%} / {:.2%} ({} / {})".format(*tool.tally(before)))
    card = {
        "format": FORMAT,
        "models": {"model.onnx": json.loads((DEFAULT_DIR / "model.json").read_text())["files"]["model.onnx"],
                   "classifier.json": hashlib.sha256(DEFAULT_MODEL.read_bytes()).hexdigest()},
        **{k: v for k, v in combo.__dict__.items()},
        "alone": {"ngram_logit": ngram_alone},
        "fitted": {"date": datetime.date.today().isoformat(), "features": [Path(f).name for f in meta.get("files", [])],
                   "rows": len(rows), **({"line_kept_from": args.keep_line.name} if args.keep_line else {}),
                   "max_fpr": args.max_fpr, "max_loss": args.max_loss, "max_whole": args.max_whole,
                   "rule": "z = max(margin, w_ngram * ngram + w_neural * margin + bias); per direction of (w_ngram, "
                           "w_neural) the highest bias at which the whole guard blocks at most max_fpr of the benign "
                           "tool-output rows of each validation slice, the direction with the most recall on the "
                           "injected validation rows of sources the n-gram model never trained on; gates and reads' "
                           "lengths (first_tokens, edge_tokens): of the settings that lose at most max_loss of the "
                           "validation injections the full read catches and keep every slice within max_fpr, the "
                           "one whose model reading costs least, in windows: first the most any long item costs, "
                           "then the cost that at most max_whole of the long benign items exceed, then the mean"},
    }
    args.out.write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"written": str(args.out)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("features")
    f.add_argument("--data", type=Path, action="append", required=True)
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--heldout", action="store_true", help="score every row (held-out files, for reports only)")
    f.add_argument("--short", type=int, nargs="*", default=[32, 48, 64],
                   help="also score first reads of these many tokens (the choices of first_tokens)")
    f.add_argument("--edges", type=int, nargs="*", default=[32, 48],
                   help="also score second reads with head and tail windows of these many tokens (edge_tokens)")
    g = sub.add_parser("fit")
    g.add_argument("--features", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--max-fpr", type=float, default=0.015)
    g.add_argument("--max-loss", type=float, default=0.03,
                   help="the cascade may lose at most this share of the validation injections the full read catches")
    g.add_argument("--max-whole", type=float, default=0.01,
                   help="the benign cost minimised is the one at most this share of long benign items exceed")
    g.add_argument("--first-tokens", type=int, nargs="+", default=[32, 48, 64, 128],
                   help="the first read's lengths to choose from (features --short gives the shorter ones)")
    g.add_argument("--edge-tokens", type=int, nargs="+", default=[32, 48, 64],
                   help="the second read's head and tail window lengths to choose from (features --edges)")
    g.add_argument("--keep-line", type=Path, help="keep the line (weights, bias) of this combination file")
    g.add_argument("--always-read-chars", type=int, default=600)
    args = parser.parse_args()
    {"features": features, "fit": fit}[args.command](args)


if __name__ == "__main__":
    main()
