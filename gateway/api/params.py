"""Sampling parameters and image URLs a client sends, checked against the API's documented ranges
before any plugin or upstream sees them (A1, A2, A3; issue 32, N5).

    check_params(body, CHAT_PARAMS)              # 400 naming the first field out of range or mistyped
    check_image_url(url, "messages[0].content[1].image_url.url")

A value the upstream would misread (`temperature: "hot"`, `max_tokens: 10**30`, a negative token
budget) or a URL it might fetch from where it runs (`file:///etc/passwd`) is refused here, with a
message that names the field, instead of being passed on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from gateway.errors import BadRequest

MAX_TOKENS = 1_048_576
"""Largest token budget accepted (2^20): above any model's output window, far below what an
upstream's integer parsing overflows on."""


class Rule(Protocol):
    """What one parameter accepts; `expected` completes "'name' must be …"."""

    expected: str

    def accepts(self, value: Any) -> bool:
        ...


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Number:
    """A finite JSON number within [low, high]."""

    low: float
    high: float

    @property
    def expected(self) -> str:
        return f"a number from {self.low:g} to {self.high:g}"

    def accepts(self, value: Any) -> bool:
        return _number(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class Integer:
    """A JSON integer within [low, high]."""

    low: int
    high: int

    @property
    def expected(self) -> str:
        return f"an integer from {self.low} to {self.high}"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Boolean:
    expected: str = "a boolean"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class Stops:
    """A string, or an array of at most `most` strings."""

    most: int

    @property
    def expected(self) -> str:
        return f"a string or an array of at most {self.most} strings"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) or (isinstance(value, list) and len(value) <= self.most
                                          and all(isinstance(s, str) for s in value))


@dataclass(frozen=True)
class LogitBias:
    """Token ids (as strings of digits) to integers from -100 to 100."""

    expected: str = "an object of token ids to integers from -100 to 100"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict) and all(k.isdigit() and _BIAS.accepts(v) for k, v in value.items())


_BIAS = Integer(-100, 100)


TOKENS = Integer(1, MAX_TOKENS)
SEED = Integer(-(2**63), 2**63 - 1)

CHAT_PARAMS: dict[str, Rule] = {
    "temperature": Number(0, 2), "top_p": Number(0, 1),
    "presence_penalty": Number(-2, 2), "frequency_penalty": Number(-2, 2),
    "max_tokens": TOKENS, "max_completion_tokens": TOKENS,
    "logprobs": Boolean(), "top_logprobs": Integer(0, 20), "logit_bias": LogitBias(), "seed": SEED,
    "stop": Stops(4), "parallel_tool_calls": Boolean(),
}
"""Chat Completions (OpenAI API reference ranges)."""

RESPONSES_PARAMS: dict[str, Rule] = {
    "temperature": Number(0, 2), "top_p": Number(0, 1), "max_output_tokens": TOKENS, "parallel_tool_calls": Boolean(),
}
"""The Responses API (OpenAI API reference ranges)."""

MESSAGES_PARAMS: dict[str, Rule] = {"temperature": Number(0, 1), "top_p": Number(0, 1), "max_tokens": TOKENS}
"""The Messages API (Anthropic's reference: temperature 0–1; `max_tokens` required, at least 1)."""


def check_params(body: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    """400 naming the first parameter of `body` that `rules` does not accept (null means unset)."""
    for name, rule in rules.items():
        value = body.get(name)
        if value is not None and not rule.accepts(value):
            raise BadRequest(f"'{name}' must be {rule.expected}", param=name)


IMAGE_SCHEMES = ("https", "http", "data")
"""What an image URL may be: fetched over the web by the upstream, or carried inline."""


def check_image_url(url: str, param: str, schemes: tuple[str, ...] = IMAGE_SCHEMES) -> None:
    """400 for an image URL that is not `schemes` (a `file:` URL names a file where the upstream
    runs), or an http(s) URL without a host."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    try:
        web_host = urlsplit(url).hostname if scheme in ("http", "https") else "-"
    except ValueError:
        web_host = None
    if scheme not in schemes:
        allowed = " or ".join(f"{s}:" for s in schemes)
        got = f"a {scheme[:20]!r} URL" if scheme else "no URL scheme"
        raise BadRequest(f"'{param}' must be a {allowed} URL (got {got})", param=param)
    if not web_host:
        raise BadRequest(f"'{param}' must be a URL with a host", param=param)
