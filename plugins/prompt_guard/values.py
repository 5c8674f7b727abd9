"""The values a tool call's arguments carry, as the firewall compares them with the context (T3).

An argument can carry data two ways: as a whole (a recipient, an IBAN, an id, a file name, an
amount, a hotel's name: a short value), or embedded in free text (a message body that holds a URL,
an address, an account number). So every leaf of the arguments gives:

- its whole value, folded (short strings up to `WHOLE_MAX` characters, and numbers in their usual
  spellings), when it is long enough to mean something (`WHOLE_MIN`; two digits for a number);
- the structured tokens inside any string: URLs and domain names, e-mail addresses, IBAN-like
  account numbers, phone and other long digit runs, file paths and names.

Booleans and nulls carry nothing. Keys are not values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.provenance import fold

WHOLE_MAX = 200
"""Longer strings are free text: only their structured tokens count."""
WHOLE_MIN = 3
"""Shorter strings (`no`, `ok`, `a`) are in every text and carry nothing worth holding for."""
MAX_VALUES = 256
"""A call with more values than this is judged on its first ones."""
SCAN_CHARS = 16384
"""Structured tokens are looked for in the first and last half of this many characters of a string
(bounded work per argument, as prompt_guard's scanner bounds an item, P5)."""

_URL_CHARS = r"[^\s<>\"'`()\[\]{}]"
_STRUCTURED = tuple(re.compile(p) for p in (
    rf"(?:https?://|www\.){_URL_CHARS}+",                                    # URLs
    r"(?<![a-z0-9._%+-])[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+",         # e-mail addresses
    r"\b[a-z]{2}\d{2}(?:[\s-]?[a-z0-9]{4}){2,7}(?:[\s-]?[a-z0-9]{1,4})?\b",  # IBAN-like account numbers
    r"(?<![a-z0-9.-])[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b",              # host and domain names
    r"(?<![\d+])\+?\d[\d\s().-]{6,}\d",                                     # phone numbers, long digit runs
    r"(?<![\w./~-])(?:~|\.{1,2})?(?:/[\w.-]+){2,}",                           # paths
    r"(?<![\w-])[\w-]+\.(?:txt|pdf|docx?|xlsx?|csv|pptx?|json|md|png|jpe?g|zip|html?)\b",   # file names
    r"[?&][^=&#\s?]+=([^&#\s]{4,})",                                         # URL query values
))
"""Each is searched on its own, so tokens inside others count too (the IBAN in a URL's query)."""


@dataclass(frozen=True)
class Value:
    """One value of a call: the top-level argument it sits under, and its folded spellings
    (a number has several: `100`, `100.0`)."""

    argument: str
    spellings: tuple[str, ...]


def _number_spellings(number: int | float) -> tuple[str, ...]:
    if isinstance(number, float) and number.is_integer():
        whole = int(number)
        return (str(whole), f"{number}", f"{number:.2f}", f"{whole:,}")
    if isinstance(number, float):
        return (repr(number), f"{number:.2f}", f"{number:,.2f}")
    return (str(number), f"{number:,}", f"{number}.00", f"{number:,}.00")


_IBAN = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{8,30}")


def _spellings(token: str) -> tuple[str, ...]:
    """A token and the other ways a text writes it: without its spaces and punctuation (a phone
    number, an IBAN written in groups), and an account number in groups of four."""
    compact = re.sub(r"[\s().-]", "", token)
    out = [token]
    if compact != token and compact.isalnum():
        out.append(compact)
    if _IBAN.fullmatch(compact):
        groups = [compact[i:i + 4] for i in range(0, len(compact), 4)]
        out += [" ".join(groups), "-".join(groups)]
    return tuple(dict.fromkeys(out))


def _string_values(text: str) -> Iterator[tuple[str, ...]]:
    folded = fold(text)
    digits = folded.replace(".", "").replace(",", "")
    if len(folded) <= WHOLE_MAX and (len(folded) >= WHOLE_MIN or (digits.isdigit() and len(digits) >= 2)):
        yield _spellings(folded)
    scanned = folded if len(folded) <= SCAN_CHARS else f"{folded[:SCAN_CHARS // 2]} {folded[-SCAN_CHARS // 2:]}"
    for pattern in _STRUCTURED:
        for match in pattern.finditer(scanned):
            token = match.group(match.lastindex or 0).rstrip(".,;:!?")
            if token == folded or len(token) < 4:
                continue
            yield _spellings(token)


def call_values(arguments: dict[str, Any], skip: frozenset[str] = frozenset()) -> list[Value]:
    """Every value of `arguments`, but those under the top-level names in `skip` (the operator's
    trusted arguments)."""
    out: list[Value] = []

    def walk(argument: str, value: Any) -> None:
        if len(out) >= MAX_VALUES:
            return
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, (int, float)):
            spellings = _number_spellings(value)
            if len(spellings[0].lstrip("-")) >= 2:
                out.append(Value(argument, spellings))
        elif isinstance(value, str):
            out.extend(Value(argument, s) for s in _string_values(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(argument, item)
        elif isinstance(value, list):
            for item in value:
                walk(argument, item)

    for name, value in arguments.items():
        if name not in skip:
            walk(str(name), value)
    return out
