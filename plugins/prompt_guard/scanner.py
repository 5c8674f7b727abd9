"""The scorer (P2, P3, P5): runs the detectors over a text and combines them into a verdict.

Evidence combines as a noisy-OR, `score = 1 - prod(1 - weight)`, so independent weak signals
add up while one strong rule decides alone; the verdict is `block` when `score >= threshold`.

Size and time are bounded: a text longer than `max_scan_bytes` characters is scanned as its
head and its tail (half the cap each), never skipped; the normalised text is cut into
overlapping chunks that are scored one by one, and the best chunk stands for the text, so one
injected paragraph is not diluted by a long benign document around it.

The neural detector (`neural`, id `classifier.neural`, P6) reads each scanned piece by token
windows: the whole piece when it fits its window budget, else the head, the tail and the parts
the cheap detectors find most suspicious (in the best chunks, one window centred on each of the
n-gram model's best windows). With the shipped models, the n-gram model's and the neural model's
opinions are combined by the logistic model fitted on validation data (`combination`), and the
neural model reads as a cascade: only items the cheap stage finds worth reading, first one
window over the most suspicious span (`first_tokens` tokens), then the rest of its budget (its
head and its tail, `edge_tokens` each, first) when that window leaves the verdict open. With other models
(no fitted combination) the n-gram classifier only chooses where the neural model reads; the
verdict is the neural model's with the rules and heuristics.
An optional operator-supplied ONNX model (`onnx_backend`, id `classifier.onnx`) reads each
scanned piece as written and adds its probability to the piece's evidence; without one,
nothing of it runs or is imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from plugins.prompt_guard import heuristics
from plugins.prompt_guard.classifier import LinearModel
from plugins.prompt_guard.heuristics import Evidence
from plugins.prompt_guard.normalize import fold
from plugins.prompt_guard.rulepack import LiteralSearch, RulePack, RulePackError, Rule

try:  # the optional compiled scorer (setup.py): rules and classifier in one pass over a chunk
    from plugins.prompt_guard._native import scan as native_scan
except ImportError:  # pragma: no cover - depends on the install having had a C compiler
    native_scan = None

if TYPE_CHECKING:  # the backend modules are imported only when a model is configured
    from plugins.prompt_guard.combination import Combination
    from plugins.prompt_guard.neural import Detector
    from plugins.prompt_guard.onnx_backend import OnnxClassifier

HEURISTIC_IDS = frozenset({
    "heuristic.chat_template", "heuristic.role_marker", "heuristic.tag_characters",
    "heuristic.invisible_characters", "heuristic.bidi_override", "heuristic.encoded_instruction",
    "heuristic.exfil_url_template", "heuristic.exfil_image",
})
CLASSIFIER_ID = "classifier"
ONNX_ID = "classifier.onnx"
NEURAL_ID = "classifier.neural"
SUSPECT_CHUNKS = 3
SUSPECT_WINDOWS = 8
SUSPECT_CHARS = 640
"""The neural model's extra windows come from the best `SUSPECT_CHUNKS` chunks: ranges of this
many characters centred on each chunk's best `SUSPECT_WINDOWS` n-gram windows."""
SUB_BLOCK = 512
"""Without an n-gram model, the best chunks are narrowed to their best blocks of this many
characters by the rules and heuristics instead."""
CHUNK_CHARS = 4096
CHUNK_OVERLAP = 512
REPORT_FLOOR = 0.25
"""Evidence below this weight still counts in the score but is not named in `rules`."""


@dataclass(frozen=True)
class Verdict:
    """The result of scanning one text (P2)."""

    verdict: Literal["allow", "block"]
    score: float
    rules: tuple[str, ...]
    truncated: bool = False

    @property
    def blocked(self) -> bool:
        return self.verdict == "block"


@dataclass(frozen=True)
class GuardSettings:
    """Scanner knobs, taken from the node's YAML config."""

    threshold: float = 0.5
    max_scan_bytes: int = 1 << 20
    rules: bool = True
    heuristics: bool = True
    classifier: bool = True
    neural: bool = True


def combine(evidence: Iterable[Evidence]) -> float:
    """Noisy-OR of evidence weights."""
    keep = 1.0
    for item in evidence:
        keep *= 1.0 - item.weight
    return 1.0 - keep


def chunks(text: str, size: int = CHUNK_CHARS, overlap: int = CHUNK_OVERLAP) -> Iterator[str]:
    """Overlapping pieces of `text`; any span shorter than `overlap` lies whole in one piece."""
    if len(text) <= size:
        yield text
        return
    step = size - overlap
    for start in range(0, len(text) - overlap, step):
        yield text[start : start + size]


class Guard:
    """Detectors plus settings; `scan(text)` returns a `Verdict`. Pure CPU, no I/O."""

    def __init__(
        self,
        rules: Iterable[Rule],
        model: LinearModel | None,
        settings: GuardSettings = GuardSettings(),
        disabled: Iterable[str] = (),
        native: bool = True,
        onnx: OnnxClassifier | None = None,
        neural: Detector | None = None,
        combination: Combination | None = None,
    ) -> None:
        rules = list(rules)
        self.disabled = frozenset(disabled)
        known = {r.id for r in rules} | HEURISTIC_IDS | {CLASSIFIER_ID, ONNX_ID, NEURAL_ID}
        unknown = sorted(self.disabled - known)
        if unknown:
            raise RulePackError(f"disabled_rules names unknown ids: {', '.join(unknown)}")
        self.pack = RulePack(rules, [d for d in self.disabled if d in {r.id for r in rules}], native)
        self.model = model
        self.settings = settings
        self.onnx = onnx if settings.classifier and ONNX_ID not in self.disabled else None
        self.neural = neural if settings.neural and NEURAL_ID not in self.disabled else None
        self._classify = settings.classifier and model is not None and CLASSIFIER_ID not in self.disabled
        """whether the n-gram model scores (its evidence, and where the neural model reads)"""
        self.combination = combination if self.neural is not None and self._classify else None
        """the fitted combination of the n-gram and neural models and the cascade's gates (`combination`)"""
        markers = self.pack.literals | set(heuristics.CHAT_TOKENS) | set(heuristics.ROLE_LINES)
        self._literals = LiteralSearch(markers, native)
        table = model.native_table if model is not None else None
        matcher = self.pack.native_matcher
        self._one_pass = (table, matcher) if native_scan is not None and table is not None and matcher is not None else None

    @property
    def backend(self) -> str:
        """`native` when the compiled scorer does the word passes, else `python`."""
        parts = {self.pack.backend, self._literals.backend} | ({self.model.backend} if self.model is not None else set())
        return "native" if parts == {"native"} else "python"

    def scan(self, text: str) -> Verdict:
        """Score `text` and decide."""
        cap = self.settings.max_scan_bytes
        truncated = len(text) > cap
        pieces = [text[: cap // 2], text[-(cap // 2) :]] if truncated else [text]
        best: list[Evidence] = []
        best_score = -1.0
        for piece in pieces:
            evidence = self._scan_piece(piece)
            score = combine(evidence)
            if score > best_score:
                best, best_score = evidence, score
        score = round(max(best_score, 0.0), 4)
        ids = tuple(dict.fromkeys(e.id for e in best if e.weight >= REPORT_FLOOR))
        verdict: Literal["allow", "block"] = "block" if score >= self.settings.threshold else "allow"
        return Verdict(verdict, score, ids, truncated)

    def _scan_piece(self, raw: str, depth: int = 0) -> list[Evidence]:
        """Raw-text heuristics, then the best-scoring chunk of the normalised text, then (at the
        top level) the neural model's evidence."""
        found, best, scored, norm = self.cheap_piece(raw, depth)
        if self.neural is not None:
            if depth == 0:
                found.append(self._neural_evidence(raw, norm, scored, found + best))
            # Without a fitted combination the n-gram model only chooses where the neural model
            # reads: on the validation split its floored evidence added false alarms (9.9 % against
            # 1.2 % without it); with one, its opinion is inside the combined evidence.
            best = [e for e in best if e.id != CLASSIFIER_ID]
        return [e for e in found + best if e.id not in self.disabled]

    def _neural_evidence(self, raw: str, norm: str, scored: list[tuple[float, float, int]],
                         cheap: list[Evidence]) -> Evidence:
        """The neural model's evidence, combined with the n-gram model's opinion when a combination
        is fitted for them, read as a cascade (see `combination`)."""
        assert self.neural is not None
        ranked: list[list[tuple[int, int]]] = []

        def suspects() -> list[tuple[int, int]]:  # ranked only when the text exceeds what is read whole
            if not ranked:
                ranked.append(self._suspect_spans(raw, norm, scored))
            return ranked[0]

        combo = self.combination
        if combo is None:
            return Evidence(NEURAL_ID, self.neural.evidence(self.neural.probability(raw, suspects)))
        ngram = max((logit for _, logit, _ in scored), default=-math.inf)
        rest = combine(e for e in cheap if e.id != CLASSIFIER_ID and e.id not in self.disabled)
        margin = self.read_neural(raw, suspects, ngram, rest)
        # Named by the neural model when it alone would block, else by the n-gram model, whose word
        # then decided (the combination's line across both scores).
        return Evidence(NEURAL_ID if margin is not None and margin >= 0 else CLASSIFIER_ID, combo.evidence(ngram, margin))

    def read_neural(self, raw: str, suspects: Callable[[], list[tuple[int, int]]], ngram: float,
                    cheap: float) -> float | None:
        """The cascade: the neural model's margin on `raw`, or None when the cheap stage (`ngram`,
        the n-gram logit; `cheap`, the rules' and heuristics' score) finds it not worth reading."""
        combo, neural = self.combination, self.neural
        assert combo is not None and neural is not None
        if not combo.reads(ngram, cheap, len(raw)):
            return None
        probability, more = neural.first_read(raw, suspects, combo.first_tokens)
        margin = neural.margin(probability)
        if more and neural.max_windows > 1 and combo.reads_on(ngram, margin):
            margin = max(margin, neural.margin(neural.second_read(raw, suspects, combo.edge_tokens)))
        return margin

    def cheap_piece(self, raw: str, depth: int = 0) -> tuple[list[Evidence], list[Evidence], list[tuple[float, float, int]], str]:
        """The cheap detectors on one piece: the raw-text evidence (heuristics, decoded payloads,
        an operator's ONNX model), the best chunk's evidence (rules, heuristics, n-gram model), each
        chunk's (cheap score, n-gram logit, start) and the normalised text."""
        found: list[Evidence] = []
        norm, invisible = fold(raw)
        if self.settings.heuristics and depth == 0:
            hidden, payload = heuristics.hidden_unicode(raw) if invisible else ([], "")
            found += hidden
            for decoded in [payload, *heuristics.decoded_blobs(raw)]:
                inner = self._scan_piece(decoded, depth + 1) if decoded else []
                inner_score = combine(inner)
                if inner_score >= REPORT_FLOOR:
                    found.append(Evidence("heuristic.encoded_instruction", 1.0 - (1.0 - inner_score) / 2))
                    found += [e for e in inner if e.weight >= REPORT_FLOOR]
        if self.onnx is not None:
            found.append(Evidence(ONNX_ID, self.onnx.evidence(raw)))
        best: list[Evidence] = []
        best_score = 0.0
        scored: list[tuple[float, float, int]] = []
        step = CHUNK_CHARS - CHUNK_OVERLAP
        for index, chunk in enumerate(chunks(norm)):
            evidence, logit = self._score_chunk(chunk)
            score = combine(evidence)
            scored.append((score, logit, index * step))
            if score > best_score:
                best, best_score = evidence, score
        return found, best, scored, norm

    def _suspect_spans(self, raw: str, norm: str, scored: list[tuple[float, float, int]]) -> list[tuple[int, int]]:
        """Raw-text ranges the neural model should read first (normalised offsets scaled to the
        raw text), most suspicious first: in the best chunks (by cheap score, then n-gram logit),
        `SUSPECT_CHARS` centred on the n-gram model's best windows, by their sums (its raw
        opinion, which ranks where its floored evidence ties at zero), overlapping ones once."""
        ratio = len(raw) / max(1, len(norm))
        best = [start for *_, start in sorted(scored, key=lambda s: (-s[0], -s[1], s[2]))[:SUSPECT_CHUNKS]]
        if self.model is None or not self._classify:
            return self._suspect_blocks(norm, best, ratio)
        centres: list[tuple[float, int]] = []
        for start in best:
            chunk = norm[start : start + CHUNK_CHARS]
            data = chunk.encode("utf-8", "surrogatepass")
            for total, at in self.model.best_windows(data, SUSPECT_WINDOWS):
                centres.append((total, start + (at if len(data) == len(chunk) else len(data[:at].decode("utf-8", "ignore")))))
        half = SUSPECT_CHARS // 2
        taken: list[int] = []
        for _, mid in sorted(centres, key=lambda c: (-c[0], c[1])):
            if all(abs(mid - other) >= half for other in taken):
                taken.append(mid)
        return [(int(max(0, mid - half) * ratio), int((mid + half) * ratio)) for mid in taken]

    def _suspect_blocks(self, norm: str, best: list[int], ratio: float) -> list[tuple[int, int]]:
        """`_suspect_spans` without an n-gram model: the blocks of the best chunks with the
        highest rule and heuristic scores."""
        blocks: list[tuple[float, int]] = []
        for start in best:
            for at in range(start, min(start + CHUNK_CHARS, len(norm)), SUB_BLOCK):
                piece = norm[at : at + SUB_BLOCK]
                if piece.strip():
                    blocks.append((combine(self._score_chunk(piece)[0]), at))
        blocks.sort(key=lambda b: (-b[0], b[1]))
        margin = SUB_BLOCK // 4
        return [(int(max(0, at - margin) * ratio), int((at + SUB_BLOCK + margin) * ratio)) for _, at in blocks]

    def _score_chunk(self, norm: str) -> tuple[list[Evidence], float]:
        """The chunk's evidence, and the n-gram model's raw logit (-inf without one)."""
        found: list[Evidence] = []
        logit = -math.inf
        data = norm.encode("utf-8", "surrogatepass")
        hits = self._literals.find(norm, data)
        if self._one_pass is not None and self.settings.rules and self._classify:
            # The compiled rule matcher and classifier share one token pass over the chunk.
            table, matcher = self._one_pass
            indexes, logit = native_scan(data, table, matcher, self.model.window, self.model.bias)
            found += [Evidence(r.id, r.weight) for r in self.pack.rules_at(indexes, hits)]
        else:
            if self.settings.rules:
                found += [Evidence(r.id, r.weight) for r in self.pack.match_text(data, hits)]
            if self._classify:
                logit = self.model.text_logit(data)
        if self.settings.heuristics:
            found += heuristics.chat_markers(hits)
            found += heuristics.exfil_links(norm)
        if self._classify:
            found.append(Evidence(CLASSIFIER_ID, self.model.logit_evidence(logit)))
        return [e for e in found if e.id not in self.disabled], logit
