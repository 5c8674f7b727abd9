"""Text normalisation before matching (P3): NFKC, invisible characters out, confusables folded,
case folded.

Every detector that matches words sees the *normalised* text, so evasions such as a zero-width
space inside "ig\u200bnore", Cyrillic "о" for Latin "o", or full-width letters all reduce to the
same plain lowercase word. The hidden-Unicode heuristic looks at the raw text separately.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

ZERO_WIDTH = frozenset(
    [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180E]
    + list(range(0x200B, 0x2010))  # zero-width space/joiners, LRM/RLM
    + list(range(0x202A, 0x202F))  # bidi embeddings and overrides
    + list(range(0x2060, 0x2070))  # word joiner, invisible operators, bidi isolates
    + [0x3164, 0xFEFF, 0xFFA0]
    + list(range(0xFE00, 0xFE10))  # variation selectors
)
"""Code points that render as nothing; removed before matching."""

TAG_FIRST, TAG_LAST = 0xE0000, 0xE007F
"""Unicode tag characters: invisible, and able to spell ASCII ("ASCII smuggling")."""

# Letters that look like Latin ones (a subset of Unicode's confusables.txt covering the
# Cyrillic, Greek, Armenian and IPA look-alikes used in practice). NFKC already folds
# full-width and mathematical alphanumerics.
_CONFUSABLES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "һ": "h",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ɡ": "g", "ь": "b", "п": "n", "г": "r", "д": "d",
    "А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c",
    "Т": "t", "У": "y", "Х": "x", "Ѕ": "s", "І": "i", "Ј": "j", "Ԁ": "d", "Ԛ": "q", "Ԝ": "w",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "γ": "y", "ω": "w", "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z",
    "Η": "h", "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n", "Ο": "o", "Ρ": "p", "Τ": "t", "Υ": "y",
    "Χ": "x",
    # Armenian, IPA, Latin extensions and lookalike punctuation
    "օ": "o", "ս": "u", "ց": "g", "ɑ": "a", "ɩ": "i", "ʏ": "y", "ı": "i", "ȷ": "j", "ꓲ": "i",
    "ǀ": "l", "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ɢ": "g", "ʜ": "h", "ɪ": "i",
    "ᴊ": "j", "ᴋ": "k", "ʟ": "l", "ᴍ": "m", "ɴ": "n", "ᴏ": "o", "ᴘ": "p", "ʀ": "r", "ꜱ": "s",
    "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ᴢ": "z",
}


_CONFUSABLE = re.compile("[" + "".join(re.escape(k) for k in _CONFUSABLES) + "]")
_CONFUSABLE_TABLE = {ord(k): v for k, v in _CONFUSABLES.items()}
_INVISIBLE = re.compile(
    "[" + "".join(re.escape(chr(cp)) for cp in sorted(ZERO_WIDTH)) + "\U000E0000-\U000E007F]"
)
_PUNCT = re.compile("[\u00a0-\u00bf\u2010-\u205e\u3000-\u303f]")
_TAG_RUN = re.compile("[\U000E0020-\U000E007E]+")


def _unconfuse(match: re.Match[str]) -> str:
    return _CONFUSABLES[match.group()]


def _token_table() -> bytes:
    table = bytearray(256)
    for b in range(256):
        if b >= 0x80:
            table[b] = b  # a byte of a UTF-8 sequence: part of a word, left as it is
        else:
            table[b] = ord(chr(b).lower()) if chr(b).isalnum() or b == ord("_") else 0x20
    return bytes(table)


TOKEN_TABLE = _token_table()
"""Byte -> byte: word bytes lowercased, everything else a space (what `tokenize` splits on)."""


_NON_ASCII = re.compile("[^\x00-\x7f]")
_SIMPLE_RANGES = ((0x00A0, 0x024F), (0x2010, 0x2BFF))
"""Latin-1/Latin Extended letters and the punctuation, arrow and symbol blocks: the non-ASCII
characters ordinary documents carry (’ “ ” — → é ñ ©)."""
_BIG = 64 * 1024
_OUTSIDE_SIMPLE = re.compile("[^\x00-\x7f" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _SIMPLE_RANGES) + "]")


@lru_cache(maxsize=1024)
def _char_fold(char: str) -> str | None:
    """What `fold` turns `char` into, when that does not depend on the characters around it.

    True for starters of the `_SIMPLE_RANGES` whose NFKC form holds only starters: NFKC then
    cannot compose them with a neighbour, so folding them one by one equals folding the whole
    text. None for anything else (combining marks, invisible characters, other scripts)."""
    code = ord(char)
    if code in ZERO_WIDTH or not any(lo <= code <= hi for lo, hi in _SIMPLE_RANGES):
        return None
    form = unicodedata.normalize("NFKC", char)
    if any(unicodedata.combining(c) or unicodedata.category(c).startswith("M") for c in char + form):
        return None
    out = _PUNCT.sub(" ", form.translate(_CONFUSABLE_TABLE).casefold())
    return out if out.lower() == out else None


def _fast_fold(text: str) -> str | None:
    """`fold` for text whose non-ASCII characters all fold on their own (see `_char_fold`):
    each distinct one is replaced (`str.replace`, in C), and the rest only needs lowercasing.
    None otherwise."""
    if len(text) > _BIG:
        # Large texts: stop at the first character of another script, and collect the
        # distinct characters with `set` (cheaper than listing every non-ASCII one).
        if _OUTSIDE_SIMPLE.search(text):
            return None
        chars = {c for c in set(text) if c > "\x7f"}
    else:
        chars = set(_NON_ASCII.findall(text))
    table: list[tuple[str, str]] = []
    for char in chars:
        folded = _char_fold(char)
        if folded is None:
            return None
        if folded != char:
            table.append((char, folded))
    if any(char in folded for char, _ in table for _, folded in table):
        return None  # one replacement would feed another: not order-free
    for char, folded in table:
        text = text.replace(char, folded)
    return text.lower()


def _blocks(text: str, size: int = 4096) -> Iterator[str]:
    """`text` cut after a newline every `size` characters or so (a block is whole lines)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def fold(text: str) -> tuple[str, int]:
    """Normalise `text`; also return how many invisible characters were removed.

    ASCII text (the common case) only needs lowercasing, and so does text whose only non-ASCII
    characters are ordinary punctuation, symbols and accented Latin letters (replaced one by
    one). Other text goes through NFKC, loses its invisible and tag characters, has confusables
    folded and Unicode punctuation turned into spaces, and is case-folded.

    A long text is folded block by block (whole lines each): a newline never composes with its
    neighbours under NFKC and every other step works character by character, so the result is
    the same, and only the blocks that hold other scripts or compatibility characters pay for
    the general path.
    """
    if text.isascii():
        return text.lower(), 0
    if len(text) <= 8192:
        return _fold_block(text)
    folded = [_fold_block(block) for block in _blocks(text)]
    return "".join(f for f, _ in folded), sum(h for _, h in folded)


def _fold_block(text: str) -> tuple[str, int]:
    if text.isascii():
        return text.lower(), 0
    fast = _fast_fold(text)
    if fast is not None:
        return fast, 0
    folded, hidden = _INVISIBLE.subn("", unicodedata.normalize("NFKC", text))
    if _CONFUSABLE.search(folded):
        # Only the look-alikes are touched: `str.translate` with a dict walks every character
        # in Python-level lookups and costs ~0.1 s per MB.
        folded = _CONFUSABLE.sub(_unconfuse, folded)
    return _PUNCT.sub(" ", folded.casefold()), hidden


_INVISIBLE_TABLE = dict.fromkeys([*ZERO_WIDTH, *range(TAG_FIRST, TAG_LAST + 1)])


def visible_nfkc(text: str) -> str:
    """`text` in NFKC without invisible and tag characters, its case, letters and punctuation kept:
    what the model detectors read (they are trained on text as people write it)."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", text.translate(_INVISIBLE_TABLE))


def normalize(text: str) -> str:
    """Return `text` in the form every word detector matches against (see `fold`)."""
    return fold(text)[0]


def tokenize(normalized: str) -> list[bytes]:
    """Word tokens of normalised text as UTF-8 bytes (letters, digits, `_`, any script).

    Bytes, not str: splitting on a byte table is several times faster than a regex, and the
    rule and model tables are keyed the same way.
    """
    return normalized.encode("utf-8", "surrogatepass").translate(TOKEN_TABLE).split()


def tag_payload(text: str) -> str:
    """Decode the ASCII spelled by Unicode tag characters (U+E0020..U+E007E), if any."""
    if text.isascii():
        return ""
    runs = _TAG_RUN.findall(text)
    return " ".join("".join(chr(ord(c) - TAG_FIRST) for c in run) for run in runs)


def count_invisible(text: str) -> int:
    """Count zero-width / bidi / tag characters in the raw text."""
    if text.isascii():
        return 0
    return len(_INVISIBLE.findall(text))
