"""Round-7 training rows for the neural detector: real prose that tells PEOPLE what to do, from
npm and PyPI packages (run by hand, never at test time; stdlib only).

    mkdir -p pkgs7 && cd pkgs7
    npm pack fastify@5.12.8 pino@10.4.0 ...        # every ("npm", name, version) of PACKAGES
    pip download --no-deps --only-binary=:all: black==25.11.0 ...   # every ("pypi", ...) of PACKAGES
    cd .. && python3 -m plugins.prompt_guard.training.round7.build_round7 --packages pkgs7 --out data

(DATA.md, "Round 7", gives both download commands in full.) Writes `OUT/train_round7.jsonl`.
The npm tarballs are read with `tarfile`, the wheels with `zipfile`; nothing of them is installed,
imported or executed, and each archive's sha256 must be the one pinned in `PACKAGES`.

What is taken: the prose files a project writes for its users and contributors (README and a
wheel's long description, CONTRIBUTING, SECURITY, SUPPORT, a Contributor Covenant code of conduct,
GOVERNANCE, upgrade and migration guides, changelogs and release notes, guides and FAQ pages under
`docs/`), cut at paragraph boundaries into pieces of `MIN_PIECE`..`MAX_PIECE` characters. A piece
is kept when it addresses its reader (`addressed` counts "you", "please", "must", "do not" and
lines that start with an imperative) and is mostly prose, not code. Files written for AI agents
(`AGENTS.md`, `CLAUDE.md`, `SKILL.md`, `.agents/`, `.cursor/`) are never read: their imperatives
are addressed to a model.

Dropped: packages whose licence is not permissive (`permissive`) or whose name is a held-out
source (`HELDOUT_PACKAGES`); pieces whose normalised text or most of whose 8-word sequences were
already kept (the same Contributor Covenant or README in many packages); every piece and every
composed row sharing an 8-word sequence with the held-out files and modules (round 6's
`heldout_texts` and `grams`). Each package gives at most `CAP` pieces. In each package half of the
pieces (rounded down) get one training injection (rounds 4-5 hand-written wordings,
`injection_pool`) at a sentence or paragraph boundary, with its `span`; the rest stay benign.
Only counts are printed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import re
import tarfile
import zipfile
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from plugins.prompt_guard.training.round4 import fragments_train as f4
from plugins.prompt_guard.training.round4.build_round4 import span_of, write
from plugins.prompt_guard.training.round5 import build_round5 as r5
from plugins.prompt_guard.training.round5 import fragments_train as f5
from plugins.prompt_guard.training.round6.build_round6 import REPO, grams, heldout_texts, norm

SEED = 77
CAP = 220
MIN_PIECE, MAX_PIECE = 300, 3000
GOAL_MAX = 1600
"""Each piece aims at a random size in MIN_PIECE..GOAL_MAX (a paragraph may take it up to MAX_PIECE)."""
MIN_ADDRESSED = 2
NEAR_DUPLICATE = 0.5
INJ_LANGS = (("en", 0.85), ("fr", 0.075), ("uk", 0.075))

PACKAGES: tuple[tuple[str, str, str, str], ...] = (
    ("npm", "fastify", "5.12.8", "a9b4f7ff1b0d9d4adbf7e7e1eb8a4bbf3b23d5d2ea09fdab3b37ec0de3cc1a53"),
)
"""(registry, name, version, sha256 of the downloaded archive). Filled in below by `_pins`."""

HELDOUT_PACKAGES = frozenset({"agentdojo", "bastioncorpus", "agent-injection-bench", "bipia", "cpython",
                              "rust-book", "nodejs"})
"""Package names that are (or bundle) held-out sources; refused whatever their licence."""

PERMISSIVE = frozenset({"mit", "mit-0", "isc", "0bsd", "bsd", "bsd-2-clause", "bsd-3-clause", "apache-2.0",
                        "apache", "apache 2.0", "psf-2.0", "cc0-1.0", "cc-by-4.0", "unlicense", "mit license",
                        "bsd license", "apache software license", "isc license (iscl)",
                        "python software foundation license", "the unlicense (unlicense)"})
"""Licence names and SPDX ids taken (lower-cased); anything else refuses the package."""

_SKIP_FILE = re.compile(r"(^|/)(node_modules|\.agents|\.cursor|\.claude|test|tests|__tests__|fixtures?)/|"
                        r"(^|/)(AGENTS|CLAUDE|SKILL|GEMINI|LICEN[CS]E|COPYING|NOTICE|THIRD[-_]PARTY[^/]*|AUTHORS|"
                        r"CODEOWNERS)(\.\w+)?$|test_email/data/|nodejs/api/", re.I)
"""Files never read: written for AI agents, licence and author lists, tests and their fixtures,
and held-out material by path."""

_PROSE_FILE = re.compile(r"\.(md|markdown|rst|txt)$|(^|/)(readme|changelog|changes|history|news|contributing|"
                         r"security|support|governance|upgrading|migration)$", re.I)


# --- reading -----------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archive_name(registry: str, name: str, version: str) -> str:
    """The glob of a package's archive as `npm pack` / `pip download` leave it."""
    if registry == "npm":
        return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-*.whl"


def archive_files(path: Path) -> Iterator[tuple[str, bytes]]:
    """(path inside the package, bytes) of every regular file of a wheel or an npm tarball."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
        return
    with tarfile.open(path, "r:gz") as t:
        for member in t.getmembers():
            if member.isfile():
                f = t.extractfile(member)
                if f is not None:
                    name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                    yield name, f.read()


def _metadata(files: dict[str, bytes]) -> tuple[dict[str, list[str]], str]:
    """A wheel's METADATA headers (name -> values) and its long description."""
    name = next((n for n in files if n.endswith(".dist-info/METADATA")), None)
    if name is None:
        return {}, ""
    head, _, body = files[name].decode("utf-8", "replace").partition("\n\n")
    headers: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")):
            headers.setdefault(key.strip().lower(), []).append(value.strip())
    return headers, body


def licence_of(files: dict[str, bytes]) -> str:
    """The declared licence: npm's `license`, a wheel's License-Expression, License (when short) or
    its `License ::` classifiers joined with OR."""
    if "package.json" in files:
        value = json.loads(files["package.json"].decode("utf-8")).get("license") or ""
        return value if isinstance(value, str) else str(value.get("type", ""))
    headers, _ = _metadata(files)
    if headers.get("license-expression"):
        return headers["license-expression"][0]
    lic = (headers.get("license") or [""])[0]
    if lic and lic.upper() != "UNKNOWN" and len(lic) < 60:
        return lic
    classifiers = [c.split("::")[-1].strip() for c in headers.get("classifier", []) if c.startswith("License ::")]
    return " OR ".join(classifiers)


def permissive(expression: str) -> bool:
    """Whether an SPDX-like expression allows use under a permissive licence (`PERMISSIVE`): an OR
    needs one permissive side, an AND needs both."""
    expression = expression.strip().strip("()").strip()
    if not expression:
        return False
    if re.search(r"\s+OR\s+", expression):
        return any(permissive(part) for part in re.split(r"\s+OR\s+", expression))
    if re.search(r"\s+AND\s+", expression):
        return all(permissive(part) for part in re.split(r"\s+AND\s+", expression))
    return expression.lower() in PERMISSIVE


def documents(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(path, text) of the prose files of one package, in path order: the wheel's long
    description, README, contributor and security files, guides, changelogs. A code of conduct is
    taken only when it is the Contributor Covenant (CC-BY-4.0)."""
    out: list[tuple[str, str]] = []
    _, description = _metadata(files)
    if description.strip():
        out.append(("METADATA", description))
    for path in sorted(files):
        if _SKIP_FILE.search(path) or not _PROSE_FILE.search(PurePosixPath(path).name) or ".dist-info/" in path:
            continue
        text = files[path].decode("utf-8", "replace")
        if re.search(r"code[-_]of[-_]conduct", path, re.I) and "contributor covenant" not in text.lower():
            continue
        out.append((path, text))
    return out


# --- cutting -----------------------------------------------------------------------------------

def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks; a fenced code block (```) stays whole."""
    out: list[str] = []
    buf: list[str] = []
    fence = False
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if not line.strip() and not fence:
            if buf:
                out.append("\n".join(buf).strip("\n"))
            buf = []
        else:
            buf.append(line)
    if buf:
        out.append("\n".join(buf).strip("\n"))
    return [p for p in out if p.strip()]


def _split_long(paragraph: str) -> list[str]:
    """A paragraph longer than MAX_PIECE cut at line boundaries (at worst, hard)."""
    out: list[str] = []
    cur = ""
    for line in paragraph.split("\n"):
        while len(line) > MAX_PIECE:
            if cur:
                out.append(cur)
                cur = ""
            out.append(line[:MAX_PIECE])
            line = line[MAX_PIECE:]
        if cur and len(cur) + 1 + len(line) > MAX_PIECE:
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    return out + ([cur] if cur else [])


def pieces(text: str, rng: random.Random) -> list[str]:
    """`text` cut at paragraph boundaries into pieces of MIN_PIECE..MAX_PIECE characters (each
    aims at a random size in MIN_PIECE..GOAL_MAX); a last piece that is too short joins the one before
    when it fits, else is dropped."""
    blocks = [b for p in paragraphs(text) for b in (_split_long(p) if len(p) > MAX_PIECE else [p])]
    out: list[str] = []
    cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
    for block in blocks:
        if cur and len(cur) + 2 + len(block) > MAX_PIECE:
            out.append(cur)
            cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
        cur = f"{cur}\n\n{block}" if cur else block
        if len(cur) >= goal:
            out.append(cur)
            cur, goal = "", rng.randint(MIN_PIECE, GOAL_MAX)
    if cur:
        if out and len(out[-1]) + 2 + len(cur) <= MAX_PIECE:
            out[-1] += "\n\n" + cur
        else:
            out.append(cur)
    return [p for p in out if MIN_PIECE <= len(p) <= MAX_PIECE]


_ADDRESS = re.compile(r"\b(you|your|you're|please|must|should|do not|don't|make sure|ensure|never|avoid|"
                      r"remember|note that|we recommend|feel free)\b", re.I)
_IMPERATIVE = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\*\*)?(please|do|don't|make|use|run|send|open|report|read|"
                         r"check|install|update|upgrade|replace|remove|add|avoid|ignore|set|follow|contact|email|"
                         r"include|submit|fork|create|write|keep|be|ensure|see|try|change|pass|call|import|"
                         r"migrate|switch|consider|refer|visit|join|ask|file|search|wait|delete|move|rename|"
                         r"configure|enable|disable)\b", re.I | re.M)


def addressed(piece: str) -> int:
    """How often a piece speaks to its reader: "you", "please", "must", "do not"... and lines that
    start with an imperative verb (outside code fences)."""
    prose = re.sub(r"```.*?(```|$)", " ", piece, flags=re.S)
    return len(_ADDRESS.findall(prose)) + len(_IMPERATIVE.findall(prose))


def prose_share(piece: str) -> float:
    """The share of a piece's characters outside code fences and indented code, in lines with
    mostly letters and spaces."""
    text = re.sub(r"```.*?(```|$)", "", piece, flags=re.S)
    good = sum(len(line) for line in text.split("\n") if not line.startswith(("    ", "\t"))
               and sum(c.isalpha() or c == " " for c in line) >= 0.7 * len(line))
    return good / max(1, len(piece))


def wanted(piece: str) -> bool:
    return addressed(piece) >= MIN_ADDRESSED and prose_share(piece) >= 0.5


# --- injections ----------------------------------------------------------------------------------

def injection_pool(rng: random.Random) -> dict[str, list[str]]:
    """Training injection wordings by language, placeholders filled: round 5's hand-written goal
    hijacks (`INJ_EN/FR/UK`) and round 4's English ones (never a held-out string)."""
    ctx = r5._FillEN(f5.EN_POOLS, f5.EN, f5.CONTACTS, rng)
    raw = {"en": list(f5.INJ_EN) + list(f4.INJ_EN), "fr": list(f5.INJ_FR), "uk": list(f5.INJ_UK)}
    return {lang: [r5.fill(t, ctx) for t in texts] for lang, texts in raw.items()}


_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])[ \t]+(?=[A-Z\"'(])|\n\n")


def boundaries(piece: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each whitespace run between two sentences or two paragraphs, outside
    code fences."""
    fences = [m.span() for m in _FENCE.finditer(piece)]
    return [(m.start(), m.end(), "paragraph" if "\n" in m.group() else "sentence")
            for m in _SENTENCE_END.finditer(piece)
            if not any(a <= m.start() < b for a, b in fences)]


def insert(piece: str, injection: str, rng: random.Random) -> tuple[str, list[int]]:
    """`injection` put at a random sentence or paragraph boundary of `piece` (at the end when it
    has none); returns the text and the injection's [start, end)."""
    cuts = boundaries(piece)
    if not cuts:
        text = f"{piece}\n\n{injection}"
        return text, [len(piece) + 2, len(text)]
    start, end, kind = rng.choice(cuts)
    sep = "\n\n" if kind == "paragraph" else " "
    text = piece[:start] + sep + injection + sep + piece[end:]
    at = start + len(sep)
    return text, [at, at + len(injection)]


# --- building ------------------------------------------------------------------------------------

def source_name(registry: str, name: str, version: str) -> str:
    return f"{registry}:{name}-{version}"


def build(folder: Path, bench: Path, packages: tuple[tuple[str, str, str, str], ...] = (),
          seed: int = SEED, check_sha: bool = True) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """Rows of every package of `packages` (default `PACKAGES`) found in `folder`; also what was
    dropped, per source."""
    packages = packages or PACKAGES
    held = set().union(*(grams(t) for t in heldout_texts(bench)))
    rng = random.Random(seed)
    pool = injection_pool(random.Random(f"{seed}:pool"))
    decks = r5.Deck(pool, rng)
    seen_text: set[str] = set()
    seen_grams: set[str] = set()
    drops: dict[str, Counter[str]] = {}
    rows: list[dict[str, Any]] = []
    for registry, name, version, digest in packages:
        source = source_name(registry, name, version)
        drop: Counter[str] = Counter()
        drops[source] = drop
        found = sorted(folder.glob(archive_name(registry, name, version)))
        if not found:
            drop["missing"] += 1
            continue
        if check_sha and sha256(found[0]) != digest:
            raise ValueError(f"{found[0].name}: sha256 is not the pinned one")
        files = dict(archive_files(found[0]))
        if name.lower() in HELDOUT_PACKAGES:
            drop["heldout-package"] += 1
            continue
        if not permissive(licence_of(files)):
            drop["licence"] += 1
            continue
        prng = random.Random(f"{seed}:{source}")
        kept: list[str] = []
        for _path, text in documents(files):
            for piece in pieces(text, prng):
                key = norm(piece)
                g = grams(piece)
                why = ("not-addressed" if not wanted(piece) else "duplicate" if key in seen_text
                       else "near-duplicate" if g and len(g & seen_grams) > NEAR_DUPLICATE * len(g)
                       else "heldout-8gram" if g & held else "")
                if why:
                    drop[why] += 1
                    continue
                seen_text.add(key)
                seen_grams |= g
                kept.append(piece)
        if len(kept) > CAP:
            drop["cap"] += len(kept) - CAP
            kept = prng.sample(kept, CAP)
        prng.shuffle(kept)
        rows += source_rows(source, kept, prng, decks, held, drop)
    rng.shuffle(rows)
    return rows, drops


def source_rows(source: str, kept: list[str], rng: random.Random, decks: r5.Deck, held: set[str],
                drop: Counter[str]) -> list[dict[str, Any]]:
    """The pieces of one package: the first half (rounded down) each with one injection, the rest
    benign; a composed row sharing an 8-word sequence with `held` is dropped, and then as many rows
    of the other label, so the labels stay balanced."""
    langs, weights = zip(*INJ_LANGS)
    half = len(kept) // 2
    injected: list[dict[str, Any]] = []
    for piece in kept[:half]:
        text, span = insert(piece, decks.draw(rng.choices(langs, weights)[0]), rng)
        if grams(text) & held:
            drop["composed-heldout-8gram"] += 1
            continue
        injected.append({"text": text, "label": "injection", "source": source, "kind": "doc", "lang": "en",
                         "span": span})
    benign = [{"text": p, "label": "benign", "source": source, "kind": "doc", "lang": "en"} for p in kept[half:]]
    n = min(len(injected), len(benign))
    drop["unpaired"] += len(injected) + len(benign) - 2 * n
    return injected[:n] + benign[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", type=Path, required=True, help="folder of the downloaded .tgz and .whl files")
    parser.add_argument("--out", type=Path, required=True, help="folder for train_round7.jsonl")
    parser.add_argument("--bench", type=Path, default=REPO / "bench" / "data", help="folder of the held-out files")
    args = parser.parse_args()
    rows, drops = build(args.packages, args.bench)
    for source, drop in drops.items():
        print(f"dropped {source}: {dict(drop)}")
    write(args.out / "train_round7.jsonl", rows)


if __name__ == "__main__":
    main()
