"""The local classifier (P3): word uni- and bi-gram features with logistic-regression weights.

The model is a JSON file (never pickle: loading it can never run code) holding a bias and a
map from n-gram to weight; only n-grams with a non-negligible weight are kept, so the file is
small. A text is scored *piecewise*: every window of `window` consecutive tokens gets
`bias + sum(weights)`, and the text's score is the sigmoid of the best window. Window sums come
from one prefix-sum pass, so scoring is linear in the text however long it is, and an
instruction buried in the middle of a long benign document still scores as high as on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, islice, repeat
from operator import add, sub
from pathlib import Path
from typing import Any

from plugins.prompt_guard.normalize import TOKEN_TABLE

try:  # the optional compiled scorer (setup.py); same scores, several times faster
    from plugins.prompt_guard._native import NgramTable
except ImportError:  # pragma: no cover - depends on the install having had a C compiler
    NgramTable = None

FORMAT = "toolgate-guard-linear/1"


class ModelError(ValueError):
    """A classifier file that cannot be used."""


Gram = bytes | tuple[bytes, bytes]
"""A unigram (token bytes) or a bigram (pair of tokens), as the runtime table keys them."""


def gram_key(name: str) -> Gram:
    """The table key of an n-gram written as text ("word" or "word word")."""
    first, _, second = name.partition(" ")
    return (first.encode(), second.encode()) if second else first.encode()


class LinearModel:
    """Windowed linear n-gram classifier; `logit(tokens)` (or `text_logit`) is its raw score and
    `text_evidence` the probability as evidence for the scanner's noisy-OR."""

    def __init__(
        self, weights: dict[str, float], bias: float, window: int, meta: dict[str, Any] | None = None,
        floor: float = 0.0, native: bool = True,
    ) -> None:
        if window < 2:
            raise ModelError("window must be at least 2 tokens")
        if not 0 <= floor < 1:
            raise ModelError("floor must be in [0, 1)")
        self.weights = weights
        self.floor = floor
        table = {gram_key(k): v for k, v in weights.items()}
        # Two tables: the smaller unigram one stays in cache while the bigram one is probed.
        self._uni: dict[bytes, float] = {k: v for k, v in table.items() if isinstance(k, bytes)}
        self._bi: dict[tuple[bytes, bytes], float] = {k: v for k, v in table.items() if isinstance(k, tuple)}
        self.bias = bias
        self.window = window
        self.meta = meta or {}
        self._native = _native_table(table) if native else None

    @property
    def backend(self) -> str:
        """`native` when the compiled scorer is in use, else `python`."""
        return "python" if self._native is None else "native"

    @classmethod
    def from_json(cls, data: Any, source: str = "<model>", native: bool = True) -> "LinearModel":
        """Build from the parsed JSON document (see `to_json`)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ModelError(f"{source}: not a {FORMAT} model file")
        weights = data.get("weights")
        if not isinstance(weights, dict) or not all(isinstance(v, (int, float)) for v in weights.values()):
            raise ModelError(f"{source}: 'weights' must map n-grams to numbers")
        try:
            bias, window = float(data["bias"]), int(data["window"])
            floor = float(data.get("floor", 0.0))
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{source}: 'bias' and 'window' are required numbers") from None
        return cls({str(k): float(v) for k, v in weights.items()}, bias, window, data.get("meta"), floor, native)

    @classmethod
    def load(cls, path: str | Path, native: bool = True) -> "LinearModel":
        """Read a model file (`.json`)."""
        path = Path(path)
        if path.suffix != ".json":
            raise ModelError(f"{path}: only {FORMAT} JSON model files are supported")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ModelError(f"{path}: cannot read model: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ModelError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_json(data, str(path), native)

    def to_json(self) -> dict[str, Any]:
        """The JSON document `from_json` reads."""
        return {"format": FORMAT, "bias": self.bias, "window": self.window, "floor": self.floor,
                "meta": self.meta, "weights": self.weights}

    def _contributions(self, tokens: Sequence[bytes]) -> Iterator[float]:
        uni = map(self._uni.get, tokens, repeat(0.0))
        bi = map(self._bi.get, zip(tokens, islice(tokens, 1, None)), repeat(0.0))
        return map(add, uni, chain(bi, (0.0,)))

    def logit(self, tokens: Sequence[bytes]) -> float:
        """Bias plus the highest window sum over the tokens (one pass of C-level iterators:
        table lookups, prefix sums, then window differences)."""
        if not tokens:
            return self.bias
        sums = list(accumulate(self._contributions(tokens), initial=0.0))
        w = self.window
        if len(tokens) <= w:
            return self.bias + sums[-1]
        return self.bias + max(map(sub, islice(sums, w, None), sums))

    def best_windows(self, normalized: bytes, count: int) -> list[tuple[float, int]]:
        """Up to `count` non-overlapping windows of `window` tokens of UTF-8 normalised text with
        the highest sums, best first, each as (sum, byte offset of its middle token): where the
        model finds the most to object to (the window sums of `logit`, in one prefix-sum pass)."""
        words = normalized.translate(TOKEN_TABLE)
        tokens = words.split()
        if not tokens:
            return []
        sums = list(accumulate(self._contributions(tokens), initial=0.0))
        w = min(self.window, len(tokens))
        totals = list(map(sub, islice(sums, w, None), sums))
        out: list[tuple[float, int]] = []
        while len(out) < count and (best := max(totals)) > -math.inf:
            i = totals.index(best)
            middle = i + w // 2  # its offset: what is left once the tokens before it are split off
            out.append((best, len(words) - len(words.split(None, middle)[-1]) if middle else words.index(tokens[0])))
            low, high = max(0, i - w + 1), min(len(totals), i + w)
            totals[low:high] = [-math.inf] * (high - low)
        return out

    def text_logit(self, normalized: bytes) -> float:
        """`logit` of the tokens of UTF-8 normalised text, by the compiled scorer when there is
        one (it tokenises as `tokenize` does and adds in the same order: the same number)."""
        if self._native is not None:
            return self._native.logit(normalized, self.window, self.bias)
        return self.logit(normalized.translate(TOKEN_TABLE).split())

    @property
    def native_table(self) -> Any:
        """The compiled n-gram table (for a combined pass with the rules), or None."""
        return self._native

    def logit_evidence(self, logit: float) -> float:
        """The evidence (`_rescale`d probability) for a logit computed elsewhere (the combined compiled pass)."""
        return self._rescale(_sigmoid(logit))

    def text_evidence(self, normalized: bytes) -> float:
        """The evidence (`_rescale`d probability) of UTF-8 normalised text (see `text_logit`)."""
        return self._rescale(_sigmoid(self.text_logit(normalized)))

    def _rescale(self, p: float) -> float:
        """The probability rescaled so that `floor` and below count as no evidence at all.

        The floor is chosen on validation data when the model is trained: below it the
        classifier's opinion is mostly noise on benign documents, and leaving it out keeps the
        noisy-OR with the rules from adding that noise up."""
        return max(0.0, (p - self.floor) / (1.0 - self.floor))


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z > -60 else 0.0


def _native_table(table: dict[Gram, float]) -> Any:
    """The compiled table of `table`, or None without the extension (or on a hash clash)."""
    if NgramTable is None:
        return None
    grams = [(k, None, v) if isinstance(k, bytes) else (k[0], k[1], v) for k, v in table.items()]
    try:
        return NgramTable(TOKEN_TABLE, grams)
    except ValueError:
        return None


DEFAULT_MODEL = Path(__file__).resolve().parent / "model" / "classifier.json"
"""The model trained by `training/train.py` and shipped with the plugin."""
