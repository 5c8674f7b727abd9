"""How the n-gram model's and the neural model's opinions become one piece of evidence, and when
the neural model reads at all (issue 36).

The two models are combined by a rule fitted on validation rows only (`training/combination.py`;
held-out files are never read there):

    z = max(margin, ngram_weight * clip(ngram logit) + neural_weight * clip(margin) + bias)

where the n-gram logit is its best window's raw logit and the margin is the logit of the neural
model's highest window probability minus the logit of its own threshold. `sigmoid(z)` joins the
rules and heuristics in the scanner's noisy-OR as one piece of evidence. The first term is the
neural model alone, as before, so the combination blocks everything the neural model blocks; the
second is a line across both models' scores, which blocks what the n-gram model is sure of even
where the neural model is not (before this, the n-gram model's evidence was left out whenever the
neural model was on), placed so that the whole guard stays within the false-alarm limit on each
validation slice.

The neural model is the expensive part, so it runs as a cascade (`Guard._neural_evidence`): it
reads an item only when the cheap stage finds it worth reading (`reads`: the n-gram logit, or the
rules' and heuristics' score, at or above a gate chosen on validation), first one window over the
most suspicious span (`NeuralDetector.first_read`, `first_tokens` long), and the rest of its budget
(its head and its tail first, `edge_tokens` each) only when that window leaves the verdict open
(`reads_on`). The fit chooses both lengths (a full first window and 32-token head and tail windows
since the second fit: a long item costs at most one and a half windows). An item the model does not read counts its margin as
`-CLIP`, the lowest it can be, so reading can only raise a score.

The fitted values are in `model/combination.json`, with the sha256 of the two model files they
were fitted for; with any other model (`neural.model: high_recall`, a `model_dir`, a
`classifier_model`) there is no fitted combination and the guard reads and combines as before
(`for_models` returns None): the neural model's evidence with the rules and heuristics, the n-gram
model only choosing where it reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.prompt_guard.classifier import ModelError
from plugins.prompt_guard.neural import EDGE_TOKENS, WINDOW_TOKENS

FORMAT = "toolgate-guard-combination/1"
DEFAULT_FILE = Path(__file__).resolve().parent / "model" / "combination.json"
CLIP = 12.0
"""Both inputs are clipped to [-CLIP, CLIP]: beyond it a model's opinion adds nothing, and a
model that did not read (or found no n-gram) counts as -CLIP."""


def clip(value: float) -> float:
    return max(-CLIP, min(CLIP, value))


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(z, 60.0), -60.0)))


@dataclass(frozen=True)
class Combination:
    """The fitted combination and the cascade's gates (see the module docstring)."""

    ngram_weight: float
    neural_weight: float
    bias: float
    gate_ngram: float
    """the neural model reads an item whose n-gram logit is at least this..."""
    gate_cheap: float
    """... or whose rules and heuristics score (noisy-OR) is at least this"""
    read_on: float
    """after the first window, the rest of the budget is read when `z` is at least this"""
    always_read_chars: int = 0
    """items of at most this many characters are read whatever the gates say (they cost one window)"""
    first_tokens: int = WINDOW_TOKENS
    """the tokens of the first read of an item longer than one window (`NeuralDetector.first_read`:
    one window over its most suspicious span); `WINDOW_TOKENS` is a full window"""
    edge_tokens: int = EDGE_TOKENS
    """the tokens of each of the head and tail windows of the second read of an item longer than the
    budget (`NeuralDetector.second_read`)"""

    def z(self, ngram: float, margin: float | None) -> float:
        """The combined logit of an n-gram logit and a neural margin (None: the model did not read)."""
        m = -CLIP if margin is None else clip(margin)
        return max(m, self.ngram_weight * clip(ngram) + self.neural_weight * m + self.bias)

    def evidence(self, ngram: float, margin: float | None) -> float:
        return sigmoid(self.z(ngram, margin))

    def reads(self, ngram: float, cheap: float, chars: int) -> bool:
        """Whether the neural model reads an item at all (the cascade's gate)."""
        return chars <= self.always_read_chars or ngram >= self.gate_ngram or cheap >= self.gate_cheap

    def reads_on(self, ngram: float, margin: float) -> bool:
        """Whether the neural model reads the rest of its budget after its first window."""
        return self.z(ngram, margin) >= self.read_on

    @classmethod
    def from_json(cls, data: Any, source: str) -> "Combination":
        try:
            combo = cls(**{k: (int if k in _COUNTS else float)(data[k]) for k in
                           ("ngram_weight", "neural_weight", "bias", "gate_ngram", "gate_cheap", "read_on", *_COUNTS)})
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{source}: a combination needs numbers ngram_weight, neural_weight, bias, gate_ngram, "
                             "gate_cheap, read_on, always_read_chars, first_tokens, edge_tokens") from None
        if not 2 < combo.first_tokens <= WINDOW_TOKENS or not 2 < combo.edge_tokens <= EDGE_TOKENS:
            raise ModelError(f"{source}: first_tokens {combo.first_tokens}, edge_tokens {combo.edge_tokens}: expected "
                             f"3 to {WINDOW_TOKENS} and 3 to {EDGE_TOKENS}")
        return combo


_COUNTS = ("always_read_chars", "first_tokens", "edge_tokens")
"""the combination's whole-number fields"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=8)
def _card(path: Path) -> dict[str, Any]:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: not a readable combination file: {exc}") from None
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise ModelError(f"{path}: expected format {FORMAT!r}")
    return card


@functools.lru_cache(maxsize=8)
def _file_sha(path: Path) -> str:
    return _sha256(path)


def for_models(neural_onnx_sha256: str | None, classifier_path: Path, path: Path = DEFAULT_FILE) -> Combination | None:
    """The combination fitted for this pair of models (the neural model's model.onnx by its sha256,
    the n-gram model's JSON file), or None when `path` holds none for them."""
    if neural_onnx_sha256 is None or not path.is_file():
        return None
    card = _card(path)
    fitted = card.get("models") or {}
    if fitted.get("model.onnx") != neural_onnx_sha256 or fitted.get("classifier.json") != _file_sha(classifier_path.resolve()):
        return None
    return Combination.from_json(card, str(path))
