"""The spellings of a secret that scrubbing recognises, and the search that finds them (G6, B4).

Scrubbing is the last line of defence for what leaves the process (results, logs, errors): it can
only find a secret spelled in a way listed here. A server that transforms the secret any other way
(encrypts it, splits it across calls, a model paraphrasing it) is not stopped by it; the defence
against those is never to give that server the credential (docs/security.md).

Letters and needles. A text is searched through its *letters*: its ASCII letters and digits,
lower-cased, in order; everything else (spaces, dashes, punctuation, other scripts) is a separator.
Each form of a secret (`secret_forms`) is reduced the same way to a *needle*. A needle among a
text's letters is a match: the text from the match's first letter to its last, separators
included, is replaced, with the form's own leading and trailing punctuation where the text has it.
So one needle finds its form as written, upper- or lower-cased, and with any run of separators
between its characters (`S-K-1-2-3`, `s k 1 2 3`, `DE:AD:BE:EF`).

The forms: the value, reversed, rot13, hex, URL- and JSON-escaped; base64 (standard and URL-safe)
and base32 at every byte alignment the secret can have inside a longer encoded text; base64 of
each of those base64 forms, at every alignment of the outer layer. A text holding escapes is read a
second time with them decoded: HTML character references (`&#x61;`, `&#97;`, zero-padded or not,
with or without `;`; named ones are separators), `\\uXXXX`, `\\u{X…}`, `\\UXXXXXXXX`, `\\xXX` and
`%XX`, so a secret with some or all of its characters escaped is found too, in any of its forms.

Against false positives: a form is matched this loosely only when its needle has at least
`MIN_ENCODED_FORM` (8) letters; a form with fewer is matched exactly as written (and forms shorter
than that are not searched at all, except the value itself), as before. A match needs every letter
of the needle, in order, with nothing but separators between them: a letter or digit of another
word breaks it. For a realistic secret (16 or more random letters and digits) a chance match would
need a text's words to spell the whole secret; a word-like secret of 8 letters or more may redact
ordinary words that spell it.

Linear by construction. A text's letters are one `encode` and one `translate` (C loops). Which
needles occur is found without a scan per needle: a needle of at least `_LONG` letters contains,
wherever it occurs, a whole 8-letter block starting at a multiple of 8 of the text's letters, so
those are read as 64-bit words and looked up in one set holding every 8-letter piece of every
needle: one hash lookup per 8 letters, whatever the number of secrets. Shorter needles, and the
long ones whose block was seen, are searched with `bytes.find` (linear). Only a needle that occurs
is then replaced (`SecretIndex.scrub`: exact forms, then the letters as written, then with escapes
decoded), by a pattern of its letters with possessive separators between them (`*+`, never given
back) and each letter an atomic group (`(?>…)`: an escape is never read two ways, with or without
its `;`); only the optional beginning of an escape before the first letter is tried more than one
way, a few characters. An attempt at one place thus reads at most the needle's length in letters
and the separators and escapes between them, and a place is read by at most that many attempts
(those starting at the letters before it): a pass costs the text's length times the needle's.
Escapes are decoded by one regex split whose alternatives are bounded (zero padding consumed
possessively and stripped before `int`), each distinct escape decoded once. The exact forms (rare:
secrets with few letters) keep the alternation of literals of before.
"""

from __future__ import annotations

import base64
import codecs
import html.entities
import json
import re
import string
import sys
from collections.abc import Callable, Iterable
from math import gcd
from urllib.parse import quote, quote_plus

MIN_ENCODED_FORM = 8
"""Forms with fewer characters are not searched for (too likely to occur by chance), and forms
with fewer letters are matched only exactly as written (case and separators included)."""

REDACTED = "[redacted]"

_GRAM = 8
"""Letters per block: one 64-bit word."""
_LONG = 2 * _GRAM - 1
"""A needle this long contains a whole block aligned on a multiple of `_GRAM` wherever it occurs."""

_FOLD = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())
_NOT_LETTERS = bytes(b for b in range(128) if not chr(b).isalnum())
_NO_CHARACTER = "\ufffd"

_HEX = "[0-9a-fA-F]"
_ESCAPES = (
    (rf"&#[xX]0*+{_HEX}{{1,6}};?", r"&#[xX]0*+{h}(?![0-9a-fA-F]);?"),
    (r"&#0*+[0-9]{1,7};?", r"&#0*+{d}(?![0-9]);?"),
    (r"&[A-Za-z][A-Za-z0-9]{1,31};", None),  # named references never stand for a letter or digit (_decoded)
    (rf"\\u{_HEX}{{4}}", r"\\u00{h}"),
    (rf"\\u\{{0*+{_HEX}{{1,6}}\}}", r"\\u\{{0*+{h}\}}"),
    (rf"\\U{_HEX}{{8}}", r"\\U000000{h}"),
    (rf"\\x{_HEX}{{2}}", r"\\x{h}"),
    (rf"%{_HEX}{{2}}", r"%{h}"),
)
"""Each escape a second reading decodes: its pattern, and the pattern of one that stands for a
given letter or digit (`{h}`: its code in hex, two digits; `{d}`: in decimal). An escape starts at
`&`, a backslash or `%`, which never occur inside one, so where each escape starts and ends is the same
however a text is searched."""

_ANY_ESCAPE = "|".join(pattern for pattern, _ in _ESCAPES)
_ESCAPE = re.compile(f"({_ANY_ESCAPE})")  # captured, so `split` keeps the escapes
_ANY_LETTER_ESCAPE = "|".join(
    letter.format(h="(?:3[0-9]|4[1-9a-fA-F]|5[0-9aA]|6[1-9a-fA-F]|7[0-9aA])",
                  d="(?:4[89]|5[0-7]|6[5-9]|[78][0-9]|9[07-9]|1[01][0-9]|12[0-2])")
    for _, letter in _ESCAPES if letter is not None
)
_SEPARATORS = "[^A-Za-z0-9]*+"
_ESCAPE_BEGUN = r"(?:\\(?:u[0-9a-fA-F]{0,3}|u\{[0-9a-fA-F]{0,5}|U[0-9a-fA-F]{0,7}|x[0-9a-fA-F]?)?)?"
"""The beginning of a backslash escape (never a whole one) whose rest would be a match's first letters."""
_DECODED_SEPARATORS = f"(?:(?!{_ANY_LETTER_ESCAPE})(?:{_ANY_ESCAPE}|[^A-Za-z0-9]))*+"
"""Between two letters: anything but a letter, digit or an escape of one; an escape whole."""


def letters(text: str) -> bytes:
    """The ASCII letters and digits of `text`, lower-cased, in order: what needles are found in."""
    return text.encode("ascii", "ignore").translate(_FOLD, _NOT_LETTERS)


def _aligned(raw: bytes, bits: int, encode: Callable[[bytes], bytes]) -> list[str]:
    """The characters of `encode(prefix + raw)` that depend on `raw` alone, for each prefix length
    that aligns it differently (`bits` per character: base64 3 alignments, base32 5): what `raw`
    looks like inside any longer text in that encoding."""
    cores = []
    for shift in range(bits // gcd(8, bits)):
        encoded = encode(b"\0" * shift + raw).decode("ascii").rstrip("=")
        cores.append(encoded[-(-8 * shift // bits): 8 * (shift + len(raw)) // bits])
    return cores


def _url_safe(form: str) -> str:
    return form.replace("+", "-").replace("/", "_")


def secret_forms(value: str) -> set[str]:
    """`value` and the forms it takes through simple encodings: reversed, rot13, URL-encoded,
    JSON-escaped, hex (both cases), base64 (standard and URL-safe) and base32 at each byte
    alignment it can have inside a longer encoded text, and base64 of those base64 forms (each
    outer alignment). Forms shorter than `MIN_ENCODED_FORM` are left out, the value itself kept."""
    raw = value.encode("utf-8")
    forms = {value[::-1], codecs.encode(value, "rot13"), quote(value, safe=""), quote_plus(value),
             json.dumps(value)[1:-1], raw.hex(), raw.hex().upper()}
    forms |= {form.lower() for form in list(forms) if "%" in form}
    forms |= set(_aligned(raw, 5, base64.b32encode))
    for core in _aligned(raw, 6, base64.b64encode):
        for inner in {core, _url_safe(core)}:
            forms.add(inner)
            for outer in _aligned(inner.encode("ascii"), 6, base64.b64encode):
                forms |= {outer, _url_safe(outer)}
    return {value} | {form for form in forms if len(form) >= MIN_ENCODED_FORM}


def _decoded(escape: str) -> str:
    """What an escape of `_ESCAPE` stands for. U+FFFD (a separator) when it names no character, and
    for a named reference that would stand for letters (only `&fjlig;`, "fj"): one escape is one
    letter at most, as the patterns that replace them assume."""
    if escape.startswith("&#"):
        digits = escape[2:].rstrip(";")
        code = int(digits[1:].lstrip("0") or "0", 16) if digits[0] in "xX" else int(digits.lstrip("0") or "0")
    elif escape.startswith("&"):
        named = html.entities.html5.get(escape[1:], _NO_CHARACTER)
        return _NO_CHARACTER if letters(named) else named
    elif escape.startswith("%"):
        code = int(escape[1:], 16)
    else:
        code = int(escape[2:].strip("{}").lstrip("0") or "0", 16)
    return chr(code) if code <= sys.maxunicode else _NO_CHARACTER


def decoded_letters(text: str) -> bytes | None:
    """The letters of `text` with its escapes decoded (each distinct escape decoded once); None
    when it holds none."""
    if "&" not in text and "\\" not in text and "%" not in text:
        return None
    parts = _ESCAPE.split(text)  # plain runs at even places, escapes at odd ones
    if len(parts) == 1:
        return None
    escapes = parts[1::2]
    decoded = {escape: _decoded(escape) for escape in set(escapes)}
    parts[1::2] = map(decoded.__getitem__, escapes)
    return letters("".join(parts))


def _edges(form: str) -> tuple[str, str]:
    """The characters of `form` before its first letter or digit and after its last one."""
    at = [index for index, char in enumerate(form) if char.isascii() and char.isalnum()]
    return form[: at[0]], form[at[-1] + 1:]


def _spelled(char: str) -> str:
    """A pattern for one letter or digit of a needle, either case."""
    return f"[{char}{char.upper()}]" if char.isalpha() else char


def _escaped(char: str) -> str:
    """A pattern for one letter or digit of a needle, either case, written as itself or escaped."""
    options = [_spelled(char)]
    for code in sorted({ord(char), ord(char.upper())}):
        h = "".join(_spelled(digit) for digit in f"{code:02x}")
        options += [letter.format(h=h, d=code) for _, letter in _ESCAPES if letter is not None]
    return "(?>" + "|".join(options) + ")"  # atomic: an escape is read one way only (`;` or not)


class SecretIndex:
    """Every spelling of a set of secret values, compiled for search. A set that changes builds a
    new index; the patterns for needles that occur are compiled when first needed."""

    def __init__(self, values: Iterable[str]) -> None:
        needles: dict[bytes, set[tuple[str, str]]] = {}
        exact: set[str] = set()
        for value in values:
            for form in secret_forms(value):
                needle = letters(form)
                if len(needle) >= MIN_ENCODED_FORM:
                    needles.setdefault(needle, set()).add(_edges(form))
                else:
                    exact.add(form)
        self._edges = needles
        self._shortest = min(map(len, needles), default=sys.maxsize)
        self._short = frozenset(needle for needle in needles if len(needle) < _LONG)
        self._blocks: dict[int, set[bytes]] = {}
        for needle in needles:
            if len(needle) >= _LONG:
                for at in range(len(needle) - _GRAM + 1):
                    self._blocks.setdefault(int.from_bytes(needle[at: at + _GRAM], sys.byteorder), set()).add(needle)
        self._block_set = frozenset(self._blocks)
        ordered = sorted(exact, key=len, reverse=True)
        self._exact = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._patterns: dict[tuple[bytes, bool], re.Pattern[str]] = {}

    def scrub(self, text: str) -> str:
        """`text` with every place that spells a secret replaced by `[redacted]`, the rest intact.
        In three passes, each over the previous one's result: the exact forms; the needles among
        the text's letters; the needles among its letters with escapes decoded (which now finds
        only the places that involve an escape)."""
        if self._exact is not None:
            text = self._exact.sub(REDACTED, text)
        hay = letters(text)
        if len(hay) < self._shortest:  # decoding escapes only ever lowers the count of letters
            return text
        for needle in self._candidates(hay):
            text = self._pattern(needle, escaped=False).sub(REDACTED, text)
        decoded = decoded_letters(text)
        if decoded is not None:
            for needle in self._candidates(decoded):
                text = self._pattern(needle, escaped=True).sub(REDACTED, text)
        return text

    def _candidates(self, hay: bytes) -> list[bytes]:
        """The needles that occur in `hay`. A long one is looked for only when one of its blocks
        is among `hay`'s aligned 8-letter words."""
        possible = {needle for needle in self._short if len(needle) <= len(hay)}
        whole = len(hay) - len(hay) % _GRAM
        if whole and self._block_set:
            for block in self._block_set.intersection(memoryview(hay)[:whole].cast("Q")):
                possible |= self._blocks[block]
        return sorted((needle for needle in possible if needle in hay), key=len, reverse=True)

    def _pattern(self, needle: bytes, *, escaped: bool) -> re.Pattern[str]:
        """The places spelling `needle`: its letters in order, either case, any separators between
        them (with `escaped`, each letter may be an escape, and escapes of other characters are
        separators), grown over the form's own leading and trailing punctuation where the text has
        it, and over the beginning of an escape just before (`\\u00` of `\\u0074…`), so that no escape
is cut in two (a JSON text stays JSON)."""
        pattern = self._patterns.get((needle, escaped))
        if pattern is None:
            chars = needle.decode("ascii")
            body = (_DECODED_SEPARATORS if escaped else _SEPARATORS).join(map(_escaped if escaped else _spelled, chars))
            heads = sorted({re.escape(head) for head, _ in self._edges[needle] if head}, key=len, reverse=True)
            tails = sorted({re.escape(tail) for _, tail in self._edges[needle] if tail}, key=len, reverse=True)
            head = f"(?:{'|'.join(heads)})?" if heads else ""
            tail = f"(?:{'|'.join(tails)})?" if tails else ""
            pattern = self._patterns[(needle, escaped)] = re.compile(f"{_ESCAPE_BEGUN}{head}{body}{tail}")
        return pattern
