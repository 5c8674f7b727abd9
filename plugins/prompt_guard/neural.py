"""The neural detector (P6): a fine-tuned encoder, int8 ONNX, shipped in the package (the default:
multilingual-e5-small, its lowest 6 layers; `high_recall`: all-MiniLM-L6-v2).

The model (`model/neural/`: `model.onnx`, `tokenizer.json`, `model.json`) is trained by
`training/neural.py` and read once per process at start-up with `onnxruntime` and `tokenizers`;
no torch and no network at run time. `model.json` records the sha256 of both files: a missing,
corrupt or mismatched file stops start-up with a message naming it; the guard never falls back
to allowing.

It reads text in windows of at most `WINDOW_TOKENS` tokens, and at most `max_windows` x
`WINDOW_TOKENS` tokens per text (the budget; the model's time is linear in the tokens it reads).
A text that fits in `max_windows` windows is read whole; a longer one is read where the cheap
detectors point (`suspects`): its head and its tail (`EDGE_TOKENS` each, half a window, so the
two together cost one window) and then its most suspicious parts, in full windows, for the rest
of the budget; so a 1 MB tool result costs a bounded time. The text's evidence is the highest
window probability, shifted so that the threshold chosen on validation data maps to 0.5
(`evidence`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.prompt_guard.classifier import ModelError
from plugins.prompt_guard.normalize import _CONFUSABLE_TABLE, visible_nfkc
from plugins.prompt_guard.onnx_backend import session_options

WINDOW_TOKENS = 128
"""Tokens per window, [CLS] and [SEP] included (what the model was trained on)."""
OVERLAP_TOKENS = 16
EDGE_TOKENS = WINDOW_TOKENS // 2
"""Tokens of the head window and of the tail window of a text longer than the budget ([CLS] and
[SEP] included). On the validation split, half windows there lost no recall against full ones
(docs/model_card.md, "Window budget") and leave a full window for the most suspicious part."""
DEFAULT_MAX_WINDOWS = 2
"""The default budget: 2 x 128 tokens, 18-35 ms of model time on one core depending on the CPU
(issue 10's 4 KB target is 25 ms; bench/README.md); chosen on the validation split
(docs/model_card.md, "Window budget")."""
DEFAULT_DIR = Path(__file__).parent / "model" / "neural"
SHIPPED_MODELS = {"default": DEFAULT_DIR, "high_recall": Path(__file__).parent / "model" / "neural_high_recall"}
"""The neural models in the package, by the name `neural.model` picks: `default` (multilingual-e5-small,
6 layers, rounds 2-9, the eighth candidate; since 2026-12-02) and `high_recall` (MiniLM, round 6: more
recall and more false alarms on held-out data; docs/model_card.md). An ensemble of them
(`EnsembleDetector`) is a folder whose model.json `training/ensemble.py` writes, named by
`neural.model_dir`."""
FORMAT = "toolgate-guard-neural/1"
DEFAULT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}
"""The BERT tokens a model's windows start, end and are padded with, unless its `model.json`
names others (`special_tokens`; e.g. `<s>`, `</s>`, `<pad>` for an XLM-R vocabulary)."""
_WORD = re.compile(r"\w+")
_LATIN = re.compile("[a-zA-Z]")


class NeuralModelError(ModelError):
    """The shipped (or configured) neural model cannot be used; start-up stops with this."""


def _unmix(match: re.Match[str]) -> str:
    word = match.group()
    if word.isascii() or not _LATIN.search(word):
        return word
    return word.translate(_CONFUSABLE_TABLE)


def model_text(raw: str) -> str:
    """The text the model reads: NFKC, without invisible and tag characters, and with look-alike
    letters folded to Latin inside words that mix them with Latin letters ("іgnоrе" with
    Cyrillic і, о, е), while words wholly in another script (Ukrainian, Greek) stay as written."""
    text = visible_nfkc(raw)
    return text if text.isascii() else _WORD.sub(_unmix, text)


def special_token_ids(tokenizer: Any, names: dict[str, str], source: str) -> dict[str, int]:
    """The ids of the cls/sep/pad tokens `names` gives, in `tokenizer`; a token it lacks means
    the tokenizer is not the model's (`source` names the model in the error)."""
    ids = {role: tokenizer.token_to_id(token) for role, token in names.items()}
    missing = [names[role] for role, i in ids.items() if i is None]
    if missing:
        raise NeuralModelError(f"{source}: the tokenizer has no {'/'.join(missing)} token; it is not the model's tokenizer")
    return ids


@dataclass(frozen=True)
class Window:
    """One model input: token ids with the model's CLS/SEP tokens ([CLS]/[SEP] for a BERT
    vocabulary), and where it starts in the scanned text."""

    ids: tuple[int, ...]
    start: int


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file (what a model card records of each of its files)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class NeuralDetector:
    """`probability(text, suspects)` → the highest injection probability over the windows read."""

    def __init__(self, session: Any, tokenizer: Any, threshold: float, max_windows: int, source: str,
                 special_tokens: dict[str, str] | None = None, onnx_sha256: str | None = None) -> None:
        import numpy

        self._np = numpy
        self.session = session
        self.tokenizer = tokenizer
        self.threshold = threshold
        self.max_windows = max_windows
        self.source = source
        self.onnx_sha256 = onnx_sha256
        """the sha256 of the model.onnx `load` checked (what an ensemble card names its members by)"""
        self.special_tokens = {**DEFAULT_SPECIAL_TOKENS, **(special_tokens or {})}
        ids = special_token_ids(tokenizer, self.special_tokens, source)
        self._cls, self._sep, self._pad = ids["cls"], ids["sep"], ids["pad"]
        names = sorted(i.name for i in session.get_inputs())
        if names != ["attention_mask", "input_ids"]:
            raise NeuralModelError(f"{source}: model inputs {names}; expected attention_mask and input_ids")
        self._bias = math.log(threshold / (1.0 - threshold))

    @classmethod
    def load(cls, directory: Path = DEFAULT_DIR, max_windows: int = DEFAULT_MAX_WINDOWS,
             threshold: float | None = None) -> "NeuralDetector":
        """Read `model.json`, check both files against their recorded sha256, load them."""
        card_path = directory / "model.json"
        try:
            card = json.loads(card_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NeuralModelError(f"{card_path}: neural model description not found (the package is incomplete)") from None
        except (OSError, ValueError) as exc:
            raise NeuralModelError(f"{card_path}: not a readable model description: {exc}") from None
        if not isinstance(card, dict) or card.get("format") != FORMAT or card.get("window_tokens") != WINDOW_TOKENS:
            raise NeuralModelError(f"{card_path}: expected format {FORMAT!r} with window_tokens {WINDOW_TOKENS}")
        files = card.get("files") or {}
        for name in ("model.onnx", "tokenizer.json"):
            path = directory / name
            if not path.is_file():
                raise NeuralModelError(f"{path}: neural model file not found")
            if files.get(name) != file_sha256(path):
                raise NeuralModelError(f"{path}: sha256 differs from the one in {card_path.name}: the file is corrupt "
                                       "or does not belong to this model")
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise NeuralModelError(f"the neural detector needs onnxruntime and tokenizers, dependencies of toolgate "
                                   f"that cannot be imported ({exc}); reinstall toolgate") from None
        try:
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own exception type
            raise NeuralModelError(f"{directory / 'tokenizer.json'}: not a Hugging Face tokenizer.json: {exc}") from None
        tokenizer.no_truncation()
        tokenizer.no_padding()
        options = session_options(onnxruntime, threads=1)
        options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(str(directory / "model.onnx"), options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise NeuralModelError(f"{directory / 'model.onnx'}: cannot load the ONNX model: {exc}") from None
        chosen = threshold if threshold is not None else card.get("threshold")
        if not isinstance(chosen, (int, float)) or not 0.0 < chosen < 1.0:
            raise NeuralModelError(f"{card_path}: no threshold in (0, 1) recorded for the model")
        special = card.get("special_tokens")
        if special is not None and not (isinstance(special, dict) and set(special) <= set(DEFAULT_SPECIAL_TOKENS)
                                        and all(isinstance(v, str) for v in special.values())):
            raise NeuralModelError(f"{card_path}: special_tokens must map cls/sep/pad to token strings")
        return cls(session, tokenizer, float(chosen), max_windows, str(directory), special, files["model.onnx"])

    def windows(self, text: str, limit: int, centre: bool = False, tokens: int = WINDOW_TOKENS) -> list[Window]:
        """Up to `limit` overlapping windows of at most `tokens` tokens from the start of `text`
        (`centre`: from where they cover the middle of a text longer than they can hold)."""
        content = tokens - 2
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
        out: list[Window] = []
        step = content - OVERLAP_TOKENS
        start = max(0, (len(ids) - content - (limit - 1) * step) // 2) if centre else 0
        while len(out) < limit:
            piece = ids[start : start + content]
            out.append(Window((self._cls, *piece, self._sep), offsets[start][0] if piece else 0))
            if start + content >= len(ids):
                break
            start += step
        return out

    def probabilities(self, windows: Sequence[Window]) -> list[float]:
        """The model's injection probability for each window, in batches of windows of similar
        length (each padded to its longest; a half window is not padded to a full one)."""
        out = [0.0] * len(windows)
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i].ids))
        while order:
            width = len(windows[order[0]].ids)
            size = next((n for n, i in enumerate(order) if 4 * len(windows[i].ids) < 3 * width), len(order))
            batch, order = order[:size], order[size:]
            for i, p in zip(batch, self._run([windows[i] for i in batch], width)):
                out[i] = p
        return out

    def _run(self, windows: Sequence[Window], width: int) -> list[float]:
        np = self._np
        ids = np.full((len(windows), width), self._pad, dtype=np.int64)
        mask = np.zeros((len(windows), width), dtype=np.int64)
        for row, w in enumerate(windows):
            ids[row, : len(w.ids)] = w.ids
            mask[row, : len(w.ids)] = 1
        logits = self.session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
        return [1.0 / (1.0 + math.exp(-max(min(float(z), 60.0), -60.0))) for z in logits[:, 0]]

    def probability(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple) -> float:
        """The highest window probability: over the whole text when it fits in `max_windows`
        windows, else over the windows `spread` chooses."""
        budget = self.max_windows
        head_chars = budget * WINDOW_TOKENS * 6  # more characters than `budget` windows can hold
        pieces = self.windows(model_text(raw[:head_chars]), budget + 1)
        if len(pieces) > budget or len(raw) > head_chars:
            pieces = self.spread(raw, pieces[0], suspects)
        pieces = [w for w in pieces if len(w.ids) > 2]
        return max(self.probabilities(pieces), default=0.0)

    def first_read(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple,
                   tokens: int = WINDOW_TOKENS) -> tuple[float, bool]:
        """The cascade's first look (`scanner.Guard`): one window at most. A text that fits in one
        full window is read whole; a longer one in one window of `tokens` tokens (the combination's
        `first_tokens`; a full window by default and in the shipped fit) over the middle of the most
        suspicious raw-text range `suspects()` gives (its head when there is none). Returns the
        probability and whether the text holds more than was read (`second_read` reads on)."""
        if not 2 < tokens <= WINDOW_TOKENS:
            raise ValueError(f"a first read of {tokens} tokens: expected 3 to {WINDOW_TOKENS}")
        head_chars = WINDOW_TOKENS * 6
        if len(raw) <= head_chars:  # longer texts never fit: their head is tokenised only if needed below
            pieces = self.windows(model_text(raw), 2)
            if len(pieces) == 1:
                return max(self.probabilities([w for w in pieces if len(w.ids) > 2]), default=0.0), False
        for start, end in suspects():
            got = [w for w in self.windows(model_text(raw[max(0, start) : end]), 1, centre=True, tokens=tokens)
                   if len(w.ids) > 2]
            if got:
                return self.probabilities(got)[0], True
        [head] = self.windows(model_text(raw[:head_chars]), 1, tokens=tokens)
        return max(self.probabilities([head]), default=0.0), True

    def second_read(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple,
                    edge: int = EDGE_TOKENS) -> float:
        """The rest of the budget after `first_read`: a text that fits in `max_windows` windows
        whole (so such a text, between one and `max_windows` windows long, may cost one window
        more than the budget in all); a longer one at its head and its tail (`edge` tokens each,
        `EDGE_TOKENS` by default) and then over the next suspicious ranges after the first,
        `max_windows` windows in all."""
        if not 2 < edge <= EDGE_TOKENS:
            raise ValueError(f"head and tail windows of {edge} tokens: expected 3 to {EDGE_TOKENS}")
        budget = self.max_windows
        head_chars = budget * WINDOW_TOKENS * 6
        pieces = self.windows(model_text(raw[:head_chars]), budget + 1)
        if len(pieces) > budget or len(raw) > head_chars:
            pieces = self.spread(raw, pieces[0], lambda: list(suspects())[1:], room=budget - 2, edge=edge)
        pieces = [w for w in pieces if len(w.ids) > 2]
        return max(self.probabilities(pieces), default=0.0)

    def spread(self, raw: str, first: Window, suspects: Callable[[], Sequence[tuple[int, int]]],
               room: int | None = None, edge: int = EDGE_TOKENS) -> list[Window]:
        """The windows of a text longer than the budget, `max_windows` x `WINDOW_TOKENS` tokens
        at most: its head and its tail (`edge` tokens each, `EDGE_TOKENS` by default; `first` is the
        text's first full window), then one full window over the middle of each raw-text range
        `suspects()` gives (most suspicious first; called only when the budget leaves room, since
        ranking them costs a pass of the cheap detectors), `room` of them (default: the rest of the
        budget)."""
        edge -= 2
        tail_text = model_text(raw[-WINDOW_TOKENS * 4 :])
        enc = self.tokenizer.encode(tail_text, add_special_tokens=False)
        tail_start = enc.offsets[-edge][0] if len(enc.ids) >= edge else 0
        chosen = [Window((self._cls, *first.ids[1 : 1 + edge], self._sep), first.start),
                  Window((self._cls, *enc.ids[-edge:], self._sep), tail_start)]
        room = self.max_windows - 1 if room is None else room  # full windows left after the two half ones
        if room > 0:
            for start, end in suspects():
                got = [w for w in self.windows(model_text(raw[max(0, start) : end]), 1, centre=True) if len(w.ids) > 2]
                chosen += got
                room -= len(got)
                if room <= 0:
                    break
        return chosen

    def evidence(self, probability: float) -> float:
        """`probability` shifted in logit space so that the model's threshold maps to 0.5."""
        return sigmoid(self.margin(probability))

    def margin(self, probability: float) -> float:
        """How far `probability` is above the model's threshold, in logit space (negative below it)."""
        return logit(probability) - self._bias


def logit(probability: float) -> float:
    """log(p / (1 - p)), with p kept inside (1e-9, 1 - 1e-9)."""
    p = min(max(probability, 1e-9), 1 - 1e-9)
    return math.log(p / (1.0 - p))


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(z, 60.0), -60.0)))


@dataclass(frozen=True)
class Ensemble:
    """How an `EnsembleDetector` weighs its members (chosen on validation rows,
    `training/ensemble.py`): the item's combined margin is `sum(weights[i] * margin_i)`, where a
    member's margin is the logit of its highest window probability minus the logit of its own
    threshold; `cascade` (or None): the later members read an item only when the first member's
    margin is above it, and otherwise the first member's margin stands for all of them."""

    weights: tuple[float, ...]
    cascade: float | None = None

    def margin(self, margins: Sequence[float]) -> float:
        """The combined margin of members' margins (only the first one's when the cascade stopped)."""
        if len(margins) == 1:
            return margins[0]
        return sum(w * m for w, m in zip(self.weights, margins))

    def reads_on(self, first: float) -> bool:
        """Whether the later members read an item whose first member's margin is `first`."""
        return self.cascade is None or first > self.cascade


class EnsembleDetector:
    """Several shipped models read the same item (each with its own tokenizer, at the same
    budget, the same suspicious ranges); `probability` is the sigmoid of their combined margin
    (`Ensemble`) and `threshold` the ensemble's own, so `evidence` reads like one model's."""

    def __init__(self, members: Sequence[NeuralDetector], ensemble: Ensemble, threshold: float, source: str) -> None:
        self.members = tuple(members)
        self.ensemble = ensemble
        self.threshold = threshold
        self.source = source
        self.max_windows = members[0].max_windows
        self._bias = logit(threshold)

    @classmethod
    def load(cls, directory: Path, card: dict[str, Any], max_windows: int = DEFAULT_MAX_WINDOWS,
             threshold: float | None = None) -> "EnsembleDetector":
        """Load the members an ensemble card names (folders relative to it), each checked as
        `NeuralDetector.load` checks a model (its files against its own card's sha256s), and each
        card's model.onnx sha256 against the one the ensemble was calibrated with."""
        card_path = directory / "model.json"
        members = card.get("members")
        weights = card.get("weights")
        if (not isinstance(members, list) or len(members) < 2 or not isinstance(weights, list)
                or len(weights) != len(members) or not all(isinstance(w, (int, float)) for w in weights)
                or not all(isinstance(m, dict) and isinstance(m.get("dir"), str) and isinstance(m.get("model.onnx"), str)
                           for m in members)):
            raise NeuralModelError(f"{card_path}: an ensemble needs two or more members "
                                   '({"dir", "model.onnx": sha256}) and one weight for each')
        cascade = card.get("cascade")
        if cascade is not None and not isinstance(cascade, (int, float)):
            raise NeuralModelError(f"{card_path}: cascade must be a number or null")
        loaded = []
        for member in members:
            folder = (directory / member["dir"]).resolve()
            detector = NeuralDetector.load(folder, max_windows)
            if detector.onnx_sha256 != member["model.onnx"]:
                raise NeuralModelError(f"{folder / 'model.onnx'}: not the model {card_path} was calibrated with "
                                       "(sha256 differs, or the file is missing)")
            loaded.append(detector)
        chosen = threshold if threshold is not None else card.get("threshold")
        if not isinstance(chosen, (int, float)) or not 0.0 < chosen < 1.0:
            raise NeuralModelError(f"{card_path}: no threshold in (0, 1) recorded for the ensemble")
        ensemble = Ensemble(tuple(float(w) for w in weights), None if cascade is None else float(cascade))
        return cls(loaded, ensemble, float(chosen), str(directory))

    def margins(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple) -> list[float]:
        """Each member's margin on `raw` (the first one's only, when the cascade stops there);
        `suspects` is ranked once and shared."""
        ranked: list[Sequence[tuple[int, int]]] = []

        def once() -> Sequence[tuple[int, int]]:
            if not ranked:
                ranked.append(suspects())
            return ranked[0]

        first = self.members[0]
        margins = [first.margin(first.probability(raw, once))]
        if self.ensemble.reads_on(margins[0]):
            margins += [m.margin(m.probability(raw, once)) for m in self.members[1:]]
        return margins

    def probability(self, raw: str, suspects: Callable[[], Sequence[tuple[int, int]]] = tuple) -> float:
        """The sigmoid of the members' combined margin on `raw`."""
        return sigmoid(self.ensemble.margin(self.margins(raw, suspects)))

    def evidence(self, probability: float) -> float:
        """`probability` shifted in logit space so that the ensemble's threshold maps to 0.5."""
        return sigmoid(logit(probability) - self._bias)


Detector = NeuralDetector | EnsembleDetector
"""What a prompt_guard node's `neural` setting loads (`load_detector`)."""
ENSEMBLE_FORMAT = "toolgate-guard-ensemble/1"


def load_detector(directory: Path, max_windows: int = DEFAULT_MAX_WINDOWS,
                  threshold: float | None = None) -> Detector:
    """The detector a model folder holds: one model (`FORMAT`), or an ensemble of shipped
    models (`ENSEMBLE_FORMAT`, a `model.json` naming its members)."""
    card_path = directory / "model.json"
    try:
        card = json.loads(card_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        card = None  # NeuralDetector.load says what is wrong with it
    if isinstance(card, dict) and card.get("format") == ENSEMBLE_FORMAT:
        return EnsembleDetector.load(directory, card, max_windows, threshold)
    return NeuralDetector.load(directory, max_windows, threshold)


@functools.lru_cache(maxsize=8)
def shared_detector(directory: Path, max_windows: int, threshold: float | None) -> Detector:
    """One loaded model per process and setting: every prompt_guard node (and every route)
    that names the same model shares its ONNX session, which is safe to call from threads."""
    return load_detector(directory, max_windows, threshold)
