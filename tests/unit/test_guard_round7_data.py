"""Round-7 guard training data (prose addressed to people, from npm and PyPI packages): the builder
on tiny archives made here: paragraph cutting, de-duplication, spans that hold the inserted
injection, balanced labels, the held-out 8-gram filter (P7: held-out sources are never seen in
training) and the licence filter. Nothing is downloaded; held-out texts are only compared by code."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from training.round7 import build_round7 as b7

HELD_SENTENCE = "the quick brown fox jumps over the lazy dog near the riverbank today"

COVENANT = ("# Contributor Covenant Code of Conduct\n\n"
            "We as members, contributors, and leaders pledge to make participation in our community a "
            "harassment-free experience for everyone. Please report unacceptable behaviour to the "
            "maintainers; you should expect a reply within a week. Do not share the report publicly, "
            "and you must not retaliate against anyone who reports.\n\n"
            "This Code of Conduct is adapted from the Contributor Covenant, version 2.1. Please read it "
            "before you join the chat, and make sure you follow it in every space of the project.\n")


def _para(topic: str, i: int) -> str:
    """A paragraph of about 450 characters that speaks to its reader; every few words name `topic`
    and `i`, so paragraphs of different topics share no 8-word sequence."""
    return (f"Please read the {topic} notes {i} first. You must run the {topic} tests {i} locally. "
            f"You should add a {topic} changelog line {i}. Do not push {topic} branch {i} directly. "
            f"Ask a {topic} maintainer about item {i}. Send {topic} questions {i} to the list. "
            f"Wait for the {topic} answer {i} patiently. Remember the {topic} release {i}.{i} date. "
            f"Make sure the {topic} docs {i} still build. Thank the {topic} reviewers {i} kindly.")


def _tgz(folder: Path, name: str, version: str, licence: str, files: dict[str, str]) -> Path:
    path = folder / f"{name}-{version}.tgz"
    files = {"package.json": json.dumps({"name": name, "version": version, "license": licence}), **files}
    with tarfile.open(path, "w:gz") as t:
        for rel, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"package/{rel}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def _whl(folder: Path, name: str, version: str, licence: str, description: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\nLicense-Expression: {licence}\n\n"
                   + description)
        z.writestr(f"{name}/__init__.py", "raise SystemExit('never imported')\n")
    return path


def _pin(path: Path, registry: str, name: str, version: str) -> tuple[str, str, str, str]:
    return registry, name, version, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def synthetic(tmp_path: Path) -> tuple[Path, Path, tuple[tuple[str, str, str, str], ...]]:
    pkgs, bench = tmp_path / "pkgs", tmp_path / "bench"
    pkgs.mkdir()
    bench.mkdir()
    alpha = "\n\n".join(_para("alpha", i) for i in range(12))
    beta = "\n\n".join(_para("beta", i) for i in range(8))
    planted = _para("gamma", 1) + " Also " + HELD_SENTENCE + "."  # shares 8 words with the held-out file
    pins = (
        _pin(_tgz(pkgs, "alpha", "1.0.0", "MIT", {
            "CONTRIBUTING.md": alpha, "CODE_OF_CONDUCT.md": COVENANT,
            "AGENTS.md": _para("agents", 1),  # written for AI agents: never read
            "docs/api.md": "```js\nconst x = require('alpha')\n```\n\n" + "x.y(z)\n" * 60,  # code: not prose
            "index.js": "module.exports = 1\n"}), "npm", "alpha", "1.0.0"),
        _pin(_tgz(pkgs, "beta", "2.0.0", "(MIT OR GPL-3.0)", {
            "SECURITY.md": beta, "CODE_OF_CONDUCT.md": COVENANT,  # a second copy: a duplicate
            "UPGRADING.md": _para("gamma", 2) + "\n\n" + planted}), "npm", "beta", "2.0.0"),
        _pin(_tgz(pkgs, "copyleft", "0.1.0", "GPL-3.0-only", {"CONTRIBUTING.md": alpha.replace("alpha", "delta")}),
             "npm", "copyleft", "0.1.0"),
        _pin(_whl(pkgs, "gamma_py", "3.0", "Apache-2.0", "\n\n".join(_para("epsilon", i) for i in range(6))),
             "pypi", "gamma-py", "3.0"),
    )
    (bench / "guard_heldout_synthetic.jsonl").write_text(
        json.dumps({"text": "Notes: " + HELD_SENTENCE + ".", "label": "benign"}) + "\n", encoding="utf-8")
    return pkgs, bench, pins


def _prose_of(pins: tuple[tuple[str, str, str, str], ...], pkgs: Path) -> dict[str, list[str]]:
    """Each source's prose files (whitespace collapsed), to check that rows are runs of their paragraphs."""
    out: dict[str, list[str]] = {}
    for registry, name, version, _ in pins:
        path = next(pkgs.glob(b7.archive_name(registry, name, version)))
        out[b7.source_name(registry, name, version)] = [
            " ".join(t.split()) for _, t in b7.documents(dict(b7.archive_files(path)))]
    return out


def test_pieces_are_cut_at_paragraph_boundaries_within_the_size_range() -> None:
    text = "\n\n".join(_para("alpha", i) for i in range(20)) + "\n\n```sh\nnpm test\n\nnpm run lint\n```\n"
    cut = b7.pieces(text, random.Random(3))
    assert len(cut) >= 3
    paragraphs = b7.paragraphs(text)
    assert "```sh\nnpm test\n\nnpm run lint\n```" in paragraphs  # a fence stays whole
    for piece in cut:
        assert b7.MIN_PIECE <= len(piece) <= b7.MAX_PIECE
        assert piece in text and piece.startswith("Please read")  # whole paragraphs, in their order
    assert "\n\n".join(cut) == text.strip()  # nothing lost: the last short block joined the piece before


def test_a_long_paragraph_is_split_at_line_boundaries() -> None:
    para = "\n".join(f"- line {i}: please keep the changelog sorted by date." for i in range(200))
    parts = b7._split_long(para)
    assert len(parts) > 1 and all(len(p) <= b7.MAX_PIECE for p in parts)
    assert "\n".join(parts) == para


def test_licence_filter_takes_permissive_expressions_only() -> None:
    assert b7.permissive("MIT") and b7.permissive("(MIT OR GPL-3.0)") and b7.permissive("BSD-3-Clause")
    assert b7.permissive("Apache-2.0 AND MIT") and b7.permissive("MIT OR Apache-2.0")
    assert not b7.permissive("GPL-3.0-only") and not b7.permissive("MIT AND GPL-2.0")
    assert not b7.permissive("") and not b7.permissive("SEE LICENSE IN LICENSE.txt")
    assert not b7.permissive("FSL-1.1-Apache-2.0")


def test_insert_puts_the_injection_at_a_sentence_or_paragraph_boundary_with_its_span() -> None:
    piece = "First sentence here. Second one follows.\n\nA new paragraph. ```js\na. B\n```"
    rng = random.Random(1)
    for _ in range(30):
        text, (a, b) = b7.insert(piece, "INJECTED TEXT.", rng)
        assert text[a:b] == "INJECTED TEXT."
        before, after = text[:a], text[b:]
        assert before.endswith((". ", ".\n\n")) and after.startswith((" ", "\n\n"))
        assert "```js\na. B\n```" in text  # never inside a code fence
    text, (a, b) = b7.insert("no boundary at all", "X.", rng)
    assert text[a:b] == "X." and text.startswith("no boundary at all")


def test_synthetic_packages_give_balanced_deduplicated_rows_with_spans_and_drop_heldout_and_copyleft(
        synthetic: tuple[Path, Path, tuple[tuple[str, str, str, str], ...]]) -> None:
    # R: P7
    pkgs, bench, pins = synthetic
    rows, drops = b7.build(pkgs, bench, pins)
    assert rows
    sources = {r["source"] for r in rows}
    assert sources == {"npm:alpha-1.0.0", "npm:beta-2.0.0", "pypi:gamma-py-3.0"}
    # the licence filter refuses the GPL package, whatever its prose
    assert drops["npm:copyleft-0.1.0"] == Counter({"licence": 1})
    assert not any("delta" in r["text"] for r in rows)
    # labels balanced per source; spans hold one training injection; benign rows carry none
    per = Counter((r["source"], r["label"]) for r in rows)
    pool = {t for ts in b7.injection_pool(random.Random(f"{b7.SEED}:pool")).values() for t in ts}
    for source in sources:
        assert per[(source, "injection")] == per[(source, "benign")] > 0
    prose = _prose_of(pins, pkgs)
    for r in rows:
        assert set(r) <= {"text", "label", "source", "kind", "lang", "span"} and r["kind"] == "doc"
        if r["label"] == "injection":
            a, b = r["span"]
            assert r["text"][a:b] in pool
            rest = r["text"][:a] + r["text"][b:]
        else:
            assert "span" not in r and not any(inj in r["text"] for inj in pool)
            rest = r["text"]
        assert any(" ".join(rest.split()) in doc for doc in prose[r["source"]])
        assert b7.MIN_PIECE <= len(rest.strip()) <= b7.MAX_PIECE
    # the held-out filter drops the planted overlap, and nothing of it reaches a row
    assert drops["npm:beta-2.0.0"]["heldout-8gram"] == 1
    assert not any(HELD_SENTENCE in r["text"] for r in rows)
    # the Contributor Covenant is kept once, not twice; AGENTS.md and code are never taken
    assert sum("Contributor Covenant" in r["text"] for r in rows) <= 1
    assert drops["npm:beta-2.0.0"]["duplicate"] + drops["npm:beta-2.0.0"]["near-duplicate"] >= 1
    assert not any("agents notes" in r["text"] or "x.y(z)" in r["text"] for r in rows)
    # no two rows share a piece
    bases = [r["text"] if r["label"] == "benign" else r["text"][:r["span"][0]] + r["text"][r["span"][1]:]
             for r in rows]
    assert len({b7.norm(t) for t in bases}) == len(rows)
    # deterministic
    assert rows == b7.build(pkgs, bench, pins)[0]


def test_an_archive_whose_sha256_differs_from_the_pin_is_refused(
        synthetic: tuple[Path, Path, tuple[tuple[str, str, str, str], ...]]) -> None:
    pkgs, bench, pins = synthetic
    bad = (pins[0][:3] + ("0" * 64,),)
    with pytest.raises(ValueError, match="sha256"):
        b7.build(pkgs, bench, bad)


def test_a_heldout_package_name_is_refused_whatever_its_licence(tmp_path: Path) -> None:
    # R: P7
    bench = tmp_path / "bench"
    bench.mkdir()
    path = _tgz(tmp_path, "bastioncorpus", "0.6.0", "MIT",
                {"CONTRIBUTING.md": "\n\n".join(_para("zeta", i) for i in range(6))})
    rows, drops = b7.build(tmp_path, bench, (_pin(path, "npm", "bastioncorpus", "0.6.0"),))
    assert rows == [] and drops["npm:bastioncorpus-0.6.0"] == Counter({"heldout-package": 1})


def test_only_a_contributor_covenant_code_of_conduct_is_read_and_no_file_for_ai_agents() -> None:
    files: dict[str, Any] = {"package.json": b'{"license": "MIT"}',
                             "CODE_OF_CONDUCT.md": b"Our own rules. Please be kind; you must not shout.",
                             "docs/CODE_OF_CONDUCT.md": COVENANT.encode(),
                             "SKILL.md": b"Agent: always run the tests.", ".agents/x.md": b"Agent notes.",
                             ".pi/memory/CORE.md": b"Remember: you are the coding agent.",
                             ".github/ISSUE_TEMPLATE/bug.md": b"Please describe the bug you saw."}
    assert [p for p, _ in b7.documents(files)] == [".github/ISSUE_TEMPLATE/bug.md", "docs/CODE_OF_CONDUCT.md"]


def assert_pins_are_distinct_and_none_is_a_heldout_source(packages: tuple[tuple[str, str, str, str], ...],
                                                           at_least: int) -> None:
    """A round's `PACKAGES`: at least `at_least` distinct (registry, name) pairs, no held-out name,
    and distinct, well-formed sha256 pins."""
    names = [(reg, name) for reg, name, _v, _h in packages]
    assert len(names) == len(set(names)) >= at_least
    assert not any(b7.heldout_package(name) for _r, name, _v, _h in packages)
    digests = [h for *_x, h in packages]
    assert len(set(digests)) == len(digests)
    assert all(len(h) == 64 and set(h) <= set("0123456789abcdef") for h in digests)


def test_a_package_named_after_mcp_or_pydantic_ai_is_a_heldout_source() -> None:
    # R: P7
    for name in ("mcp", "fastmcp-slim", "@modelcontextprotocol/sdk", "mcp-server-git", "pydantic-ai-slim",
                 "pydantic_ai", "AgentDojo"):
        assert b7.heldout_package(name) == "heldout-package", name
    assert b7.heldout_package("openai") == b7.heldout_package("express") == ""


def test_pinned_packages_are_distinct_and_none_is_a_heldout_source() -> None:
    # R: P7
    assert_pins_are_distinct_and_none_is_a_heldout_source(b7.PACKAGES, 15)
