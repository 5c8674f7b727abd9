"""Round-5 training rows for the neural detector (run by hand, never at test time; stdlib only).

    python3 -m training.round5.build_round5 --out data

Writes `OUT/train_round5.jsonl`: tool outputs in English, French and Ukrainian (emails, tickets,
calendar events, product pages, wiki pages, meeting notes, invoices, chat logs, notices, code,
JSON results, search results, reviews, CSV exports), half of them carrying one hand-written
injection of `fragments_train.py` (goal hijacking without trigger phrases; any of the three
languages inside any document language) at a random place and in a neutral wrapper. Most benign
documents carry a hand-written HARD BENIGN sentence (imperatives addressed to people, text about
assistants and prompts) in the same places and wrappers, so neither a wrapper nor an imperative is
a signal by itself. Every row: text, label, source (`r5-handwritten`), kind (`tool_output`), lang
(the document's language); injected rows also carry `span`, the [start, end) characters of the
injected piece (with its wrapper; for JSON and CSV: the quoted field value); benign rows that
carry a hard benign sentence have `focus`, the same kind of range for that sentence (a trainer
that reads windows can centre a benign window on it, so the look-alike is inside the window).

Document composition reuses the round-4 builder (`compose`, `fill`, `json_record`, ...); French
and Ukrainian documents come from the round-4 training banks, English ones from `fragments_train.EN`.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from training.round4 import fragments_train as r4
from training.round4.build_round4 import (_Fill, _put_in_json, compose, fill, insert_lines,
                                                              json_record, span_of, write)
from training.round5 import fragments_train as f5

SOURCE = "r5-handwritten"
LANGS = ("en", "fr", "uk")
KINDS = ("email", "ticket", "calendar", "web", "doc", "meeting", "invoice", "chat", "notice", "code", "json",
         "search", "review", "csv")
MIN_CHARS, MAX_CHARS = 100, 2500
INJ_LANG = {"en": (("en", 0.7), ("fr", 0.15), ("uk", 0.15)),
            "fr": (("fr", 0.6), ("en", 0.3), ("uk", 0.1)),
            "uk": (("uk", 0.6), ("en", 0.3), ("fr", 0.1))}
"""Language of the injection in a document of each language."""


def banks() -> dict[str, tuple[dict[str, list[str]], dict[str, Any]]]:
    """Placeholder pools and document bank of each language."""
    return {"en": (f5.EN_POOLS, f5.EN), "fr": (r4.FR_POOLS, r4.FR), "uk": (r4.UK_POOLS, r4.UK)}


class _FillEN(_Fill):
    """Placeholder values for English documents: amounts written the English way."""

    def __missing__(self, key: str) -> str:
        if key == "amount":
            return f"{self.rng.randint(80, 48000):,}.{self.rng.randint(0, 99):02d}"
        return super().__missing__(key)


class Deck:
    """Hands out the items of each language's list in a shuffled cycle, so every wording is used."""

    def __init__(self, pools: dict[str, list[str]], rng: random.Random) -> None:
        self.pools, self.rng = pools, rng
        self.left: dict[str, list[str]] = {k: [] for k in pools}

    def draw(self, lang: str) -> str:
        if not self.left[lang]:
            self.left[lang] = self.rng.sample(self.pools[lang], len(self.pools[lang]))
        return self.left[lang].pop()


def wrapped(content: str, lang: str, kind: str, rng: random.Random) -> str:
    """`content` in a neutral wrapper (the same choice for injections and benign sentences)."""
    choices = f5.WRAP["any"] + f5.WRAP[lang] + (f5.WRAP["code"] * 3 if kind == "code" else [])
    return rng.choice(choices).format(inj=content)


def _text_lines(kind: str, lang: str, ctx: _Fill) -> list[str]:
    """One benign document as lines, for the kinds that are inserted into line by line."""
    rng = ctx.rng
    bank = banks()[lang][1]
    if kind == "review":
        reviews = rng.sample(f5.REVIEWS[lang], rng.randint(1, 4))
        return [fill(rng.choice(f5.REVIEW_HEAD[lang]), ctx)] + [
            f"{'★' * s}{'☆' * (5 - s)} {fill('{first}', ctx)}, {fill('{date}', ctx)}\n{fill(t, ctx)}"
            for s, t in ((rng.randint(1, 5), t) for t in reviews)]
    return compose(kind, bank, ctx)[1]


def _long_lines(kind: str, lang: str, ctx: _Fill) -> list[str]:
    """Lines of one to three documents of `kind` (a thread, a page of results), at most MAX_CHARS."""
    rng = ctx.rng
    lines = _text_lines(kind, lang, ctx)
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        more = [""] + _text_lines(kind, lang, ctx)
        if len("\n".join(lines + more)) > MAX_CHARS - 400:
            break
        lines += more
    return lines


def csv_table(lang: str, ctx: _Fill, cell: str | None) -> tuple[str, str | None]:
    """A CSV export; `cell` (if any) is the free-text column of one row. Returns (text, quoted cell)."""
    rng = ctx.rng
    header, row, notes = f5.CSV[lang]
    sep = ";" if ";" in header else ","

    def line(last: str) -> str:
        return sep.join([f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", fill(row, ctx), last])

    rows = [line(_csv_quote(fill(rng.choice(notes), ctx))) for _ in range(rng.randint(3, 14))]
    quoted = None
    if cell is not None:
        quoted = _csv_quote(cell)
        rows.insert(rng.randint(0, len(rows)), line(quoted))
    return "\n".join([header] + rows), quoted


def _csv_quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def search_results(lang: str, ctx: _Fill) -> dict[str, Any]:
    """A web-search tool result with 2-5 hits."""
    rng = ctx.rng
    bank = banks()[lang][1]
    hits = []
    for i in range(rng.randint(2, 5)):
        hits.append({"title": fill(rng.choice(bank["web"]), ctx)[:90],
                     "url": f"https://{fill('{domain}', ctx)}/{rng.choice(['blog', 'help', 'news', 'p', 'docs'])}/{rng.randint(100, 9999)}",
                     "snippet": fill(rng.choice(bank["email"] + bank["doc"]), ctx), "position": i + 1})
    return {"query": fill(rng.choice(f5.QUERIES[lang]), ctx), "results": hits}


def document(kind: str, lang: str, ctx: _Fill, pieces: list[tuple[str, bool]]) -> tuple[str, dict[bool, str]]:
    """A document of `kind` with `pieces` (content, is_injection) inserted; returns the text and
    the inserted form (wrapped or quoted) of each piece, keyed by is_injection."""
    rng = ctx.rng
    marked: dict[bool, str] = {}
    if kind in ("json", "search"):
        obj = json_record(banks()[lang][1], ctx) if kind == "json" else search_results(lang, ctx)
        for content, inj in pieces:
            if kind == "search" and rng.random() < 0.6:
                hits = obj["results"]
                hits[rng.randrange(len(hits))]["snippet"] = content
            else:
                _put_in_json(obj, rng.choice(f5.JSON_KEYS), content, rng)
            marked[inj] = json.dumps(content, ensure_ascii=False)
        return json.dumps(obj, ensure_ascii=False, indent=rng.choice([None, 2])), marked
    if kind == "csv":
        inj = [c for c, i in pieces if i]
        text, quoted = csv_table(lang, ctx, inj[0] if inj else (pieces[0][0] if pieces else None))
        return text, {bool(inj): quoted} if quoted else {}
    lines = _long_lines(kind, lang, ctx)
    text = "\n".join(lines)
    for content, inj in pieces:
        piece = wrapped(content, lang, kind, rng)
        if kind == "review" and rng.random() < 0.5:
            lines.insert(rng.randint(1, len(lines)), f"{'★' * rng.randint(1, 5)} {fill('{first}', ctx)}\n{piece}")
        else:
            lines = insert_lines(lines, piece, rng).split("\n")
        text = "\n".join(lines)
        marked[inj] = piece
    return text, marked


def build(seed: int = 55, per_lang: int = 800) -> list[dict[str, Any]]:
    """`per_lang` documents in each language, every other one injected."""
    rng = random.Random(seed)
    inj_deck = Deck({"en": f5.INJ_EN, "fr": f5.INJ_FR, "uk": f5.INJ_UK}, rng)
    ben_deck = Deck({"en": f5.BENIGN_EN, "fr": f5.BENIGN_FR, "uk": f5.BENIGN_UK}, rng)
    rows: list[dict[str, Any]] = []
    for lang in LANGS:
        pools, _bank = banks()[lang]
        ctx = (_FillEN if lang == "en" else _Fill)(pools, _bank, f5.CONTACTS, rng)
        langs, weights = zip(*INJ_LANG[lang])
        for i in range(per_lang):
            kind = KINDS[(i // 2) % len(KINDS)]
            injected = i % 2 == 1
            pieces: list[tuple[str, bool]] = []
            # a hard benign sentence: in 60 % of benign documents, and in 25 % of injected ones
            if rng.random() < (0.25 if injected else 0.6):
                other = rng.choice([x for x in LANGS if x != lang])
                pieces.append((fill(ben_deck.draw(lang if rng.random() < 0.8 else other), ctx), False))
            if injected:
                inj_lang = rng.choices(langs, weights)[0]
                pieces.append((fill(inj_deck.draw(inj_lang), ctx), True))
            text, marked = document(kind, lang, ctx, pieces)
            while len(text) < MIN_CHARS:  # a very short result: another one of the same kind first
                text = document(kind, lang, ctx, [])[0] + "\n\n" + text
            if len(text) > MAX_CHARS:
                text = _trim(text, marked.get(True))
            row: dict[str, Any] = {"text": text, "label": "injection" if injected else "benign", "source": SOURCE,
                                   "kind": "tool_output", "lang": lang}
            if injected:
                row["span"] = span_of(text, marked[True])
            elif False in marked and marked[False] in text:
                row["focus"] = span_of(text, marked[False])
            rows.append(row)
    random.Random(seed + 1).shuffle(rows)
    return rows


def _trim(text: str, marked: str | None) -> str:
    """`text` cut to MAX_CHARS at line boundaries, keeping the injected piece."""
    start, end = span_of(text, marked) if marked else (0, 0)
    lo, hi = 0, len(text)
    while hi - lo > MAX_CHARS:
        cut_hi = text.rfind("\n", lo, hi - 1)
        cut_lo = text.find("\n", lo + 1, hi)
        if cut_hi >= end and (hi - cut_hi >= cut_lo - lo or cut_lo < 0 or cut_lo > start):
            hi = cut_hi
        elif 0 <= cut_lo <= start:
            lo = cut_lo + 1
        else:
            break
    return text[lo:hi]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for train_round5.jsonl")
    args = parser.parse_args()
    write(args.out / "train_round5.jsonl", build())


if __name__ == "__main__":
    main()
