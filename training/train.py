"""Train the shipped classifier (run by hand; needs numpy and scipy, which the gateway does not).

    python -m training.train --data /tmp/pg/data/train.jsonl \
        --out plugins/prompt_guard/model/classifier_round3.json

(Round 3 defaults; about 10 minutes on one core.) The round-2 model `model/classifier.json`
was built with `--l2 10 --floor 0.8 --mil-top 0` on the round-2 rows.

Each training text becomes windows of `WINDOW` tokens (the unit the runtime model scores).
A window of an injected document is positive when it holds most of the injected span and
negative when it holds none of it; clean documents and benign prompts give negatives. Features
are counts of word unigrams and bigrams of the normalised text; weights come from L2-regularised
logistic regression (L-BFGS), a multiple-instance step for long injections whose injected
span is unknown (round 3), then two rounds of hard-negative mining on benign windows; only
weights with |w| >= `PRUNE` are kept, so the file stays small.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, sparse

from plugins.prompt_guard.classifier import LinearModel
from plugins.prompt_guard.normalize import normalize, tokenize

PRUNE = 0.05
HARD_ROUNDS = 2


@dataclass(frozen=True)
class Settings:
    """Training knobs. The defaults built `model/classifier_round3.json` (round 3); the default
    `model/classifier.json` is round 2 (l2 10, floor 0.8, no multiple-instance step, round-2
    data), see docs/model_card.md."""

    window: int = 24
    l2: float = 20.0
    doc_weight: float = 3.0
    """Windows of tool-output-like documents count this much more than chat prompts."""
    unigram_l2_factor: float = 1.0
    """Penalty on single-word weights relative to word pairs."""
    min_count: int = 2
    """An n-gram must occur in this many training windows to become a feature."""
    floor: float = 0.75
    """Probability below which the classifier gives no evidence (chosen on the validation split)."""
    mil_top: int = 2
    """Multiple-instance step: a long injection row whose injection is not located (a prompt
    longer than a window, e.g. a DAN-style jailbreak) first trains with every window positive;
    after that fit, only its `mil_top` highest-scoring windows stay positive and its other
    windows are left out. The runtime scores the best window, so one window must fire, not all
    (0 = off: every window positive, as in rounds 1-2)."""

    @property
    def stride(self) -> int:
        return max(1, self.window // 3)


def windows(row: dict[str, Any], cfg: Settings) -> list[tuple[list[str], int]]:
    """(tokens, label) training windows of one row.

    A window of an injected document is positive when most of it is injection or it holds most
    of the injection, negative when it holds none of it, and left out otherwise."""
    tokens = [t.decode("utf-8", "replace") for t in tokenize(normalize(row["text"]))]
    positive = row["label"] == "injection"
    if len(tokens) <= cfg.window:
        return [(tokens, int(positive))]
    span = None
    if positive and "span" in row:
        a = len(tokenize(normalize(row["text"][: row["span"][0]])))
        b = a + len(tokenize(normalize(row["text"][row["span"][0] : row["span"][1]])))
        span = (a, b)
    out = []
    for start in range(0, len(tokens) - cfg.window // 2, cfg.stride):
        win = tokens[start : start + cfg.window]
        if span is None:
            out.append((win, int(positive)))
            continue
        overlap = max(0, min(span[1], start + len(win)) - max(span[0], start))
        if overlap == 0:
            out.append((win, 0))
        elif overlap >= 0.6 * min(span[1] - span[0], len(win)):
            out.append((win, 1))
    return out


def grams(tokens: list[str]) -> list[str]:
    return tokens + [" ".join(p) for p in zip(tokens, tokens[1:])]


def matrix(samples: list[tuple[list[str], int]], vocab: dict[str, int]) -> sparse.csr_matrix:
    rows, cols, vals = [], [], []
    for i, (toks, _) in enumerate(samples):
        for g, n in Counter(grams(toks)).items():
            j = vocab.get(g)
            if j is not None:
                rows.append(i)
                cols.append(j)
                vals.append(float(n))
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(samples), len(vocab)))


def fit(x: sparse.csr_matrix, y: np.ndarray, sample_weight: np.ndarray, l2: np.ndarray) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by L-BFGS (`l2` per feature); returns (weights, bias)."""
    n, d = x.shape

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = params[:d], params[d]
        z = x @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        eps = 1e-12
        ll = -(sample_weight * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))).sum()
        g = sample_weight * (p - y)
        grad = np.concatenate([x.T @ g + l2 * w, [g.sum()]])
        return ll + 0.5 * float(l2 @ (w * w)), grad

    res = optimize.minimize(loss, np.zeros(d + 1), jac=True, method="L-BFGS-B", options={"maxiter": 400})
    return res.x[:d], float(res.x[d])


def train(rows: list[dict[str, Any]], cfg: Settings) -> LinearModel:
    samples, doc, group = [], [], []
    for i, row in enumerate(rows):
        found = windows(row, cfg)
        samples += found
        doc += [row["kind"] != "prompt"] * len(found)
        unlocated = row["label"] == "injection" and "span" not in row and len(found) > 1
        group += [i if unlocated else -1] * len(found)
    counts = Counter(g for toks, _ in samples for g in set(grams(toks)))
    vocab = {g: i for i, g in enumerate(sorted(g for g, n in counts.items() if n >= cfg.min_count))}
    print(f"windows: {len(samples)} ({sum(y for _, y in samples)} positive), vocabulary: {len(vocab)}")
    x = matrix(samples, vocab)
    y = np.array([lab for _, lab in samples], dtype=float)
    pos = y.sum()
    weight = np.where(y == 1, (len(y) - pos) / pos, 1.0) * np.where(np.array(doc), cfg.doc_weight, 1.0)
    names = sorted(vocab, key=vocab.__getitem__)
    # Single words are weaker evidence than word pairs: they get a heavier penalty.
    l2 = np.array([cfg.l2 * (1 if " " in g else cfg.unigram_l2_factor) for g in names])
    w, b = fit(x, y, weight, l2)
    if cfg.mil_top:
        z = x @ w + b
        groups = np.array(group)
        order = np.lexsort((-z, groups))  # by group, best window first
        rank = np.zeros(len(z), dtype=int)
        g_sorted = groups[order]
        starts = np.r_[0, np.flatnonzero(np.diff(g_sorted)) + 1]
        run = np.arange(len(z)) - np.repeat(starts, np.diff(np.r_[starts, len(z)]))
        rank[order] = run
        drop = (groups >= 0) & (rank >= cfg.mil_top)
        print(f"multiple-instance step: {int(drop.sum())} windows of {len(set(group)) - 1} long injection rows left out")
        before = weight[y == 1].sum()
        weight = np.where(drop, 0.0, weight)
        weight = np.where(y == 1, weight * before / weight[y == 1].sum(), weight)  # keep the class balance
        w, b = fit(x, y, weight, l2)
    for _ in range(HARD_ROUNDS):
        # Hard negatives: benign windows the current model scores highest get more weight.
        z = x @ w + b
        hard = (y == 0) & (z > np.quantile(z[y == 0], 0.98))
        weight = np.where(hard, 3.0 * weight, weight)
        w, b = fit(x, y, weight, l2)
    kept = {g: round(float(v), 4) for g, v in zip(names, w) if abs(v) >= PRUNE}
    print(f"kept {len(kept)} weights, bias {b:.3f}")
    meta = {"trained_on": "see training/DATA.md", "windows": len(samples),
            "features": "word 1-2 grams", "l2": cfg.l2, "doc_weight": cfg.doc_weight,
            "unigram_l2_factor": cfg.unigram_l2_factor, "mil_top": cfg.mil_top}
    return LinearModel(kept, round(b, 4), cfg.window, meta, floor=cfg.floor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--valid-out", type=Path, help="write the 10%% validation rows here")
    parser.add_argument("--window", type=int, default=Settings.window)
    parser.add_argument("--l2", type=float, default=Settings.l2)
    parser.add_argument("--doc-weight", type=float, default=Settings.doc_weight)
    parser.add_argument("--floor", type=float, default=Settings.floor)
    parser.add_argument("--min-count", type=int, default=Settings.min_count)
    parser.add_argument("--unigram-l2-factor", type=float, default=Settings.unigram_l2_factor)
    parser.add_argument("--mil-top", type=int, default=Settings.mil_top)
    args = parser.parse_args()
    cfg = Settings(args.window, args.l2, args.doc_weight, args.unigram_l2_factor, args.min_count, args.floor, args.mil_top)
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").split("\n") if line.strip()]
    random.Random(5).shuffle(rows)
    cut = len(rows) // 10
    valid, train_rows = rows[:cut], rows[cut:]
    if args.valid_out:
        args.valid_out.write_text("".join(json.dumps(r) + "\n" for r in valid), encoding="utf-8")
    model = train(train_rows, cfg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(model.to_json(), sort_keys=True, separators=(",", ":")), encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
