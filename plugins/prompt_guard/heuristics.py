"""Structural heuristics (P3): chat-template and role markers, hidden Unicode, encoded
instructions, markdown links and images that carry data out.

Each function takes text and returns `Evidence` (an id and a weight in (0, 1]). They use
substring search and simple character-class regexes only (no nested quantifiers), so each is
linear in the text (P5). Decoding of base64/hex and tag-character payloads only *extracts* the
hidden text; the scanner then scores that text with the same rules and classifier.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from plugins.prompt_guard.normalize import tag_payload


@dataclass(frozen=True)
class Evidence:
    """One detector's finding: which (`id`) and how strongly (`weight`)."""

    id: str
    weight: float


CHAT_TOKENS = (
    "<|im_start|>", "<|im_end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|endoftext|>", "<|begin_of_text|>", "[inst]", "[/inst]",
    "<<sys>>", "<</sys>>", "<start_of_turn>", "<end_of_turn>", "<|channel|>", "<|message|>",
)
"""Special tokens of chat templates (ChatML, Llama 2/3, Gemma, Harmony), normalised."""

ROLE_LINES = (
    "### system", "### instruction", "### assistant", "### response", "\nsystem:", "\nassistant:",
    "\n\nhuman:", "\n[system", "\n(system", "[system message",
)
"""Role headers that start a fake turn inside a document, normalised. Each starts with a
punctuation character or a newline, so the one-pass literal scan can skip ahead quickly."""

_ZW_IN_WORD = re.compile("[a-zA-Z][\u00ad\u200b\u200c\u200d\u2060\ufeff]+[a-zA-Z]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# The look-behinds make each run start at its first character, so a long run is read once.
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}={0,2}")
_HEX = re.compile(r"(?<![0-9a-fA-F])(?:[0-9a-fA-F]{2}){16,}")
_PLACEHOLDER = re.compile(r"[{}$<>\[\]]|%7b|%7d|%24|%3c")
_EXFIL_NAMES = frozenset(
    "data d q secret token key password pass pwd history conversation chat context prompt msg "
    "message info content text summary payload email cookie session".split()
)
MAX_BLOBS = 32
MAX_BLOB_CHARS = 8192
MAX_URLS = 256


def chat_markers(literal_hits: Collection[str]) -> list[Evidence]:
    """Chat-template special tokens and fake role headers, from the literals found in the
    normalised text (the scanner searches all literals in one pass)."""
    found: list[Evidence] = []
    if any(hit in CHAT_TOKENS for hit in literal_hits):
        found.append(Evidence("heuristic.chat_template", 0.4))
    if any(hit in ROLE_LINES for hit in literal_hits):
        found.append(Evidence("heuristic.role_marker", 0.3))
    return found


def hidden_unicode(raw: str) -> tuple[list[Evidence], str]:
    """Tag-character payloads, zero-width characters inside words, bidi overrides.

    Returns the evidence and the text spelled by tag characters (to be scanned too).
    """
    if raw.isascii():
        return [], ""
    found: list[Evidence] = []
    payload = tag_payload(raw)
    if sum(c.isalpha() for c in payload) >= 3:
        found.append(Evidence("heuristic.tag_characters", 0.8))
    if len(_ZW_IN_WORD.findall(raw)) >= 2:
        found.append(Evidence("heuristic.invisible_characters", 0.35))
    if _BIDI.search(raw):
        found.append(Evidence("heuristic.bidi_override", 0.3))
    return found, payload


_TEXT_BYTES = bytes(range(0x20, 0x7F)) + b"\t\n\r" + bytes(range(0x80, 0x100))


def _printable(data: bytes) -> str | None:
    """Decoded bytes as text when they look like natural language, else None."""
    if len(data) < 12 or b" " not in data or len(data.translate(None, _TEXT_BYTES)) > len(data) // 20:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-"


def _byte_table(alphabet: bytes, equals: int) -> bytes:
    """A `bytes.translate` table: the alphabet to `x`, `=` to `equals`, the rest to a space."""
    table = bytearray(b" " * 256)
    for char in alphabet:
        table[char] = ord("x")
    table[ord("=")] = equals
    return bytes(table)


_MASK = _byte_table(_ALPHABET, ord("="))
_MIN_RUN = b"x" * 24


def _blob_runs(raw: str) -> str:
    """The runs of base64/hex alphabet (and `=`) of 24+ characters, where a blob can hide,
    joined by spaces; "" when there is none.

    A byte table maps the alphabet to `x` and everything else to a space; the runs are then
    found with `bytes.find` (C substring search), and the common case, no run of 24, costs
    one `translate` and one search. Runs only long thanks to `=` cannot hold a blob and are
    skipped."""
    data = raw.encode("utf-8", "surrogatepass")
    mask = data.translate(_MASK)
    runs: list[bytes] = []
    pos = mask.find(_MIN_RUN)
    while pos >= 0:
        start = mask.rfind(b" ", 0, pos) + 1
        end = mask.find(b" ", pos)
        end = len(mask) if end < 0 else end
        runs.append(data[start:end])
        pos = mask.find(_MIN_RUN, end)
    return b" ".join(runs).decode("ascii")


def decoded_blobs(raw: str) -> list[str]:
    """Texts hidden in base64 or hex runs of `raw` (bounded in number and size)."""
    found: list[str] = []
    raw = _blob_runs(raw)
    for match in _BASE64.finditer(raw):
        blob = match.group()[:MAX_BLOB_CHARS]
        blob = blob[: len(blob) - len(blob) % 4]
        try:
            data = base64.b64decode(blob, altchars=b"-_" if ("-" in blob or "_" in blob) else None)
        except (binascii.Error, ValueError):
            continue
        text = _printable(data)
        if text:
            found.append(text)
        if len(found) >= MAX_BLOBS:
            return found
    for match in _HEX.finditer(raw):
        text = _printable(bytes.fromhex(match.group()[:MAX_BLOB_CHARS]))
        if text:
            found.append(text)
        if len(found) >= MAX_BLOBS:
            break
    return found


def _url_at(norm: str, start: int) -> str:
    end = start
    limit = min(len(norm), start + 2048)
    while end < limit and norm[end] not in " \n\t)\"'":
        end += 1
    return norm[start:end]


def _suspicious_query(url: str, image: bool) -> Evidence | None:
    parts = urlsplit(url)
    if not parts.query and not parts.fragment:
        return None
    if _PLACEHOLDER.search(parts.query) or _PLACEHOLDER.search(parts.fragment):
        return Evidence("heuristic.exfil_url_template", 0.75)
    if not image:
        return None
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _EXFIL_NAMES or len(value) >= 48:
            return Evidence("heuristic.exfil_image", 0.45)
    return None


def exfil_links(norm: str) -> list[Evidence]:
    """Markdown/HTML images and links whose URL query looks built to carry data out."""
    found: dict[str, Evidence] = {}
    checked = 0
    for marker, offset in (("](", 2), ("src=", 4)):
        pos = norm.find(marker)
        while pos >= 0 and checked < MAX_URLS:
            url = _url_at(norm, pos + offset).lstrip("<\"'")
            if url.startswith(("http://", "https://", "//")):
                checked += 1
                image = marker == "src=" or norm.rfind("![", max(0, pos - 300), pos) >= 0
                hit = _suspicious_query(url, image)
                if hit and hit.id not in found:
                    found[hit.id] = hit
            pos = norm.find(marker, pos + offset)
    return list(found.values())
