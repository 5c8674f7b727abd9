"""Round-9 training rows for the neural detector: documentation and code ABOUT prompts, LLMs,
agents and tool calling, from the npm and PyPI packages of LLM libraries (run by hand, never at
test time; stdlib only).

    python3 -m training.round9.build_round9 --commands > get9.sh
    mkdir -p pkgs9 && (cd pkgs9 && sh ../get9.sh)     # npm pack NAME@VERSION..., pip download --no-deps
    python3 -m training.round9.build_round9 --packages pkgs9 --out data

Writes `OUT/train_round9.jsonl`. Archives are opened with round 7's machinery (`opened`: the sha256
pinned in `PACKAGES`, the licence (`permissive`), the name (`refused`)) and read as data
(`tarfile`, `zipfile`); nothing of them is installed, imported or executed.

What is taken (`documents`): a wheel's long description, `.md`/`.mdx`/`.rst` files, and code
(`.py`, `.js`/`.mjs`/`.cjs`, `.ts`/`.mts`/`.cts`/`.tsx`) with the prose inside it (Python
docstrings, JSDoc/TSDoc comments): round 4's `file_documents`. Code keeps its prompt templates,
system prompts and tool schemas: they are the hard negatives. Never read: round 7's skipped files
(hidden folders such as `.cursor/` or `.guides/`, `AGENTS`/`CLAUDE`/`SKILL`/`GEMINI` files written
for AI agents, licences, tests and fixtures, `node_modules/`), a copy of a held-out or validation
package's modules inside another package (`_SKIP_MODULE`), and minified code (most of it in lines
of more than `MAX_LINE` characters).

Slices (round 4's `slices` and `pick`): each document, in a shuffled order, gives up to
`slices_for` slices of 300-2000 characters starting at a line boundary, kept only when they mention
prompts, LLMs, agents, tools, chat, instructions, tokens... at least three times (round 4's
`TOPIC`); a slice whose normalised text, or most of whose 8-word sequences, were already kept (in
any package), or that shares an 8-word sequence with the held-out material, is dropped (round 7's
`not_new`). Once `CANDIDATES` x `CAP` slices are gathered the package stops; `pick` keeps the `CAP`
richest in distinct topic words, half prose and half code where there is enough.

Rows (round 7's `source_rows`, per kind `doc` and `code`): half of the slices (rounded down) get
one training injection (round 7's deck of rounds 4-5 hand-written wordings) in one of round 4's
training wrappers for technical text (`TECH_WRAPPERS`), at a random line or sentence boundary
(round 4's `inserted`), with its `span` (wrapper included); the rest stay benign. Only counts are
printed.

Refused by name (`refused`): held-out sources (round 7's `heldout_package`: MCP, FastMCP, Pydantic
AI, AgentDojo, BIPIA...), the `prompt-docs` validation slice's libraries and their kin (LangChain,
LangGraph, Guardrails: `VALIDATION_NAME`), and prompt-injection data sets and detectors, which
other rounds use as attacks (`DETECTOR_NAME`).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from training.build_data import HELDOUT_PACKAGES as HELDOUT_MODULES
from training.round4 import build_round4 as r4
from training.round7 import build_round7 as r7

SEED = 99
CAP = 150
CANDIDATES = 4
SLICE_EVERY, MAX_SLICES = 8000, 4
MAX_LINE = 1000
PROSE = (".md", ".mdx", ".rst")
CODE = (".py", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".tsx")

PACKAGES: tuple[tuple[str, str, str, str], ...] = (
    ("npm", "ai", "6.0.326", "71df15c4429203af31b0ea596c0778664eb913647515639a54672dfb4e7ae5b3"),
    ("npm", "@ai-sdk/anthropic", "3.0.140", "7077a1168cab2e05735e8df821b8dbecacca716c5d8527c4d0eab2f4ac886669"),
    ("npm", "@ai-sdk/openai", "3.0.141", "c54dc49d5212dfabb8eb6933ba908a33528a0aba6b4570f6ce46c68a62e10906"),
    ("npm", "@ai-sdk/provider-utils", "4.0.66", "c0a8a057a1cdd12ba865f4a789200b6d009cd2fa016d6609a73fdb06f2f8bc80"),
    ("npm", "@anthropic-ai/sdk", "1.15.0", "307c9bfe2fcd908ab1f696b000f2575b5691fd2cf07a388e549cc4d88856cb9f"),
    ("npm", "genkit", "1.42.0", "2e421d70debfd3270149dcd3a7cad26aa6488e0b8ba18642722ed160777ef243"),
    ("npm", "@google/genai", "2.32.0", "93ba5d4d2ec28df2b00dc925637cb4d86a118eccfd9d3dca470f2908c58ea052"),
    ("npm", "groq-sdk", "1.6.0", "75c8f07222be66e80c21912eeb4e47586f0d778f0480f1bc85bd65ff80b5c82c"),
    ("npm", "llamaindex", "0.12.1", "78e5f844175d5ba5963b9ed22b23d1aede99b47199188e9f2e3b43a1be36a7f7"),
    ("npm", "@mistralai/mistralai", "2.7.0", "9b66b96aa08a6a20152ed807947c8162ea2f68c5b316b7cf73ab72dfd6a96e3b"),
    ("npm", "ollama", "0.6.4", "bd87a4f3f7bcb96b21c1b7b44dc6e30ec3deabd5199b63c7c5bcde121359100b"),
    ("npm", "openai", "6.49.0", "e48de0f4c5dbecebdeb864233f5ea49be07cd3e0ff3bd3e1e6745dc5e168cced"),
    ("npm", "@openai/agents-core", "0.20.0", "c5c7473bb00b166e02717ae3521956543d6885914bae74263c734c53e1071049"),
    ("pypi", "agno", "3.1.10", "ea1d0d2f8f7e8d0c413c2a1df57b4c784dac2f70ceac1f69b935fd8d2ef68c7e"),
    ("pypi", "autogen-agentchat", "0.7.5", "d19ca8ec26cb15e071a56c4269140aea2bf3c718bdc7e06f6677af9a905815ba"),
    ("pypi", "autogen-core", "0.7.5", "4f4a0d3b88a36da75b2ef0d40be2d5e3a207cae7f7d951511e498ad1d68f8ef4"),
    ("pypi", "camel-ai", "0.2.90", "9998c434779a1a847d9ccddce1c069f22fb9667b19ba06a2452c479882169082"),
    ("pypi", "cohere", "7.3.1", "89fff06d20c0e70c96678948599c0fb9e7d5e4241c2592a16fdd111a84e11d5a"),
    ("pypi", "dspy", "3.4.1", "afda9e7f8b3d46be0829af19ac1153a6feaa6db5923f2b1011eef547fb15ce2d"),
    ("pypi", "google-genai", "3.6.1", "4b35064da644f61d7e5f6c0e9406bf63b945e7e96b4af18cadb3371cbc3acf74"),
    ("pypi", "griptape", "1.13.0", "1e0ddfee56a1917f1bac65c674dc44a2bd4b549033f08f08b5cd58fc6d79729a"),
    ("pypi", "groq", "1.7.0", "cb1518f823423d4e52445859eb7d2918a927794cec12f8d5e50d9161e3690fc8"),
    ("pypi", "haystack-ai", "3.4.1", "f9093156d534adcf92ef68d03601c11b67f0945e81b00e999504b68bce4fdd80"),
    ("pypi", "instructor", "1.17.0", "f6b1832d178e899ee0a6a3f247e221f19580fa525c815211c02447691d761217"),
    ("pypi", "letta", "0.16.8", "2d200cd13212c9232650c7efa16c0a4682ce5e89af8a0e53f3fbd09fc34091d3"),
    ("pypi", "llm", "0.36", "801263d046854d15e3f45ee8da5024c23c313d129f67c7c93961649c531bb050"),
    ("pypi", "marvin", "3.2.7", "f9993cdecfab46adef2d0384a1b3d80b18e5b659349959734fed79044675afb8"),
    ("pypi", "mirascope", "2.8.2", "4d242b8587cf004e57313f82db91e8b813b715dd3c953f832350b9f1e3a1d57d"),
    ("pypi", "ollama", "0.6.3", "6a20bc42c1a5f889295d7ec490d35e5132fc31f339561530f43a8abd4dbfe508"),
    ("pypi", "openai-agents", "0.24.0", "18d4ac34e84ed937333ec8ce46395ed3521ffcbb0a521780a4c2eaa451467f49"),
    ("pypi", "outlines", "1.3.3", "0e185dd5a0cfeb62e0268018972d3c22bb9b7d43db3dc1f39f3b754175a82c54"),
    ("pypi", "promptflow-core", "1.18.5", "18da012bc54d8179e6034cac03e079e822d0b49cb0b4c3f68e1bacb85dee2ace"),
    ("pypi", "semantic-kernel", "1.45.0", "57b744fa7dc00cc3c151145bc0420684346b72230ba6620a8fbdd7c6345b6f81"),
)
"""(registry, name, version, sha256 of the archive as `npm pack` / `pip download` left it). The
candidates left out are listed in DATA.md, "Round 9"."""

VALIDATION_NAME = re.compile(r"langchain|langgraph|guardrails", re.I)
"""Packages of the `prompt-docs` validation slice (`training/neural.py` `PROMPT_DOC_SOURCES`:
langchain-core, guardrails-ai) and their kin: never trained on."""

DETECTOR_NAME = re.compile(r"inject|jailbreak|guard|red-?team|garak|pyrit|spikee|promptfoo|rebuff|lakera|"
                           r"aegisrt|aicu-scanner|fas-judgement|forcefield|gauntlet", re.I)
"""Prompt-injection data sets, detectors and red-team tools (rounds 2-6 take their attacks, or hold
them out): not documentation about prompting."""

_SKIP_MODULE = re.compile(rf"^(?:{'|'.join(HELDOUT_MODULES)}|langchain\w*|langgraph\w*|guardrails)/")
"""A held-out or validation package's modules vendored inside another package."""


def refused(name: str) -> str:
    """Why a package name is refused ("" when it is not): a held-out source, a validation-slice
    library, or a prompt-injection data set or detector."""
    return (r7.heldout_package(name) or ("validation-package" if VALIDATION_NAME.search(name) else "")
            or ("detector-package" if DETECTOR_NAME.search(name) else ""))


def minified(path: str, data: bytes) -> bool:
    """Whether a code file is minified or bundled into long lines: `.min.` in its name, or most of
    its characters in lines over MAX_LINE (a type declaration with one long union is read)."""
    long = sum(len(line) for line in data.split(b"\n") if len(line) > MAX_LINE)
    return ".min." in path or 2 * long > len(data)


def documents(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(kind, text) documents of one package (round 4's `file_documents` over `PROSE` and `CODE`),
    without the files round 7 never reads (written for AI agents, hidden, tests, licences), vendored
    held-out or validation modules, and minified code."""
    readable = {path: data for path, data in files.items()
                if not r7.SKIP_FILE.search(path) and not _SKIP_MODULE.search(path)
                and not (path.endswith(CODE) and minified(path, data))}
    return r4.file_documents(readable, PROSE, CODE)


def slices_for(text: str) -> int:
    """How many slices a document may give: one per SLICE_EVERY characters, at least one, at most MAX_SLICES."""
    return min(MAX_SLICES, 1 + len(text) // SLICE_EVERY)


def place(piece: str, injection: str, rng: random.Random) -> tuple[str, list[int]]:
    """`injection` in one of round 4's training wrappers for technical text, put at a random line or
    sentence boundary of `piece`; the text and the wrapped injection's [start, end)."""
    return r4.inserted(piece, rng.choice(r4.TECH_WRAPPERS).format(inj=injection), rng)


def build(folder: Path, bench: Path, packages: tuple[tuple[str, str, str, str], ...] = (),
          seed: int = SEED) -> tuple[list[dict[str, Any]], dict[str, Counter[str]]]:
    """Rows of every package of `packages` (default `PACKAGES`) found in `folder`; also what was
    dropped, per source."""
    return r7.build_packages(folder, bench, packages or PACKAGES, seed, package_rows, refused)


def package_rows(source: str, files: dict[str, bytes], drop: Counter[str], rng: random.Random,
                 seen: r7.Seen) -> list[dict[str, Any]]:
    """One package's rows: new slices on LLM topics from its documents in a random order, up to
    CANDIDATES x CAP of them, the CAP richest in topic words (`pick`), half of each kind injected."""
    docs = documents(files)
    rng.shuffle(docs)
    kept: list[tuple[str, str]] = []
    for kind, text in docs:
        cut = r4.slices(text, rng, slices_for(text))
        drop["off-topic-document"] += not cut
        for piece in cut:
            why = seen.not_new(piece)
            if why:
                drop[why] += 1
            else:
                kept.append((kind, piece))
        if len(kept) >= CANDIDATES * CAP:
            break
    chosen = r4.pick(kept, CAP, rng)
    drop["cap"] += len(kept) - len(chosen)
    rows: list[dict[str, Any]] = []
    for kind in ("doc", "code"):
        part = [piece for k, piece in chosen if k == kind]
        rows += r7.source_rows(source, part, rng, seen.decks, seen.held, drop, kind=kind, place=place)
    return rows


def commands() -> str:
    """The shell lines that download `PACKAGES` into the current folder (round 7's `commands`)."""
    return r7.commands(PACKAGES)


def main() -> None:
    r7.run(__doc__, "train_round9.jsonl", build, commands)


if __name__ == "__main__":
    main()
