"""Provenance of a request's context (T1): which text came from the client and which from tools.

The client's system, developer and user messages are *trusted*: they are what the person and the
application said. Everything a tool brought back is *untrusted*: results of the gateway's tool
calls, tool results the client sent (`role: tool`, Responses `function_call_output`, Messages
`tool_result`), prefetch results and resources. So are the model's earlier answers the client sends
back (`role: assistant`, their text and their calls' arguments): the gateway's tool results are not
in the client's history, so an earlier answer is where tool text lives on (a summary quoting an
attacker's address, the gateway's own notice of a held call); trusting it would let a fooled model
launder a value through one turn. An operator may declare a source trusted (an address book, the
user's own profile): its results then count as the client's words.

A request's `Provenance` lives on its `PluginContext`, so it survives the whole tool loop, streamed
or not, whichever client API the request came in. It keeps every text folded once (NFKC, casefold,
whitespace collapsed) so the firewall's look-ups cost a substring search, not a re-normalisation.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.content import message_text

Origin = Literal["client", "client_tool_result", "assistant", "tool_result", "prefetch", "resource"]

TRUSTED_ROLES = frozenset({"system", "developer", "user"})
_JOINERS = frozenset("-./:,")
"""Characters that join digits into one number (a date, a decimal, a time, thousands)."""
_INVISIBLE = dict.fromkeys([
    0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0,
    *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x2070), *range(0xFE00, 0xFE10),
    *range(0xE0000, 0xE0080), *range(0xE0100, 0xE01F0),
])
"""Zero-width, bidirectional, tag and variation-selector characters: invisible, so a value spelled
with them is the same value."""


def fold(text: str) -> str:
    """`text` as the firewall compares it: NFKC, invisible characters removed, casefolded, every
    run of whitespace one space."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE).casefold()
    return " ".join(text.split())


def occurs(needle: str, haystack: str) -> bool:
    """Whether folded `needle` occurs in folded `haystack` as whole words: not glued to a letter or
    digit on either side where its own edge is one (`13` is not in `2013`, `bob` not in `bobby`),
    and a number not as a part of a longer one (`13` is not in `2024-05-13` or `4.13`)."""
    if not needle:
        return False
    start = 0
    head_word, tail_word = needle[0].isalnum(), needle[-1].isalnum()
    head_digit, tail_digit = needle[0].isdigit(), needle[-1].isdigit()
    while True:
        index = haystack.find(needle, start)
        if index < 0:
            return False
        end = index + len(needle)
        before_ok = not head_word or index == 0 or not haystack[index - 1].isalnum()
        after_ok = not tail_word or end == len(haystack) or not haystack[end].isalnum()
        if before_ok and head_digit and index >= 2 and haystack[index - 1] in _JOINERS and haystack[index - 2].isdigit():
            before_ok = False  # `13` is not in `2024-05-13`, `4.13` or `10:13`
        if after_ok and tail_digit and end + 1 < len(haystack) and haystack[end] in _JOINERS and haystack[end + 1].isdigit():
            after_ok = False
        if before_ok and after_ok:
            return True
        start = index + 1


@dataclass(frozen=True)
class Segment:
    """One piece of context: where it came from, and its text folded."""

    origin: Origin
    server: str
    """The plugin node it came from (an mcp_bridge id), or `client`."""
    source: str
    """The tool name, resource URI/name, or message role."""
    trusted: bool
    text: str
    raw: str = field(repr=False, compare=False, default="")
    """The text as the model reads it (egress checks URLs as written)."""


@dataclass(frozen=True)
class Flag:
    """A detector verdict on an untrusted item at or above the flag threshold (T6): ids only."""

    server: str
    source: str
    score: float


class Provenance:
    """Every labelled piece of one request's context, in the order it arrived."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.flags: list[Flag] = []
        self.vetted: set[str] = set()
        """Folded values of calls that acted and were let run: equal values count as trusted (a tool echoing them back does not hold the next call). Compared
        whole, never as a part of a longer text, so a value cannot be laundered inside a sentence."""

    @classmethod
    def from_messages(cls, messages: Iterable[Any]) -> "Provenance":
        """The client's conversation: system, developer and user trusted; tool results and the
        model's earlier answers untrusted."""
        provenance = cls()
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = str(message.get("role"))
            text = message_text(message.get("content"))
            if role == "assistant":  # its earlier calls' arguments are the conversation too
                for call in message.get("tool_calls") or []:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        text = f"{text}\n{fn['arguments']}"
            if not text:
                continue
            if role in TRUSTED_ROLES:
                provenance.add("client", "client", role, text, trusted=True)
            elif role == "assistant":
                provenance.add("assistant", "client", role, text, trusted=False)
            else:
                provenance.add("client_tool_result", "client", role, text, trusted=False)
        return provenance

    def add(self, origin: Origin, server: str, source: str, text: str, *, trusted: bool) -> None:
        """Label one more piece of context."""
        if text:
            self.segments.append(Segment(origin, server, source, trusted, fold(text), text))

    def flag(self, server: str, source: str, score: float) -> None:
        """Record that the detector found `server`/`source`'s item suspicious (T6)."""
        self.flags.append(Flag(server, source, score))

    @property
    def has_untrusted(self) -> bool:
        return any(not s.trusted for s in self.segments)

    def trusted_has(self, folded: str) -> bool:
        """Whether a folded value occurs in trusted context, or is a vetted value."""
        return folded in self.vetted or any(s.trusted and occurs(folded, s.text) for s in self.segments)

    def untrusted_source(self, folded: str) -> Segment | None:
        """The first untrusted piece a folded value occurs in, or None."""
        for segment in self.segments:
            if not segment.trusted and occurs(folded, segment.text):
                return segment
        return None

    def texts(self, trusted: bool) -> list[str]:
        """The raw texts of one side, for checks that need the text as written (egress)."""
        return [s.raw for s in self.segments if s.trusted is trusted]
