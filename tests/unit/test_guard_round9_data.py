"""Round-9 guard training data (documentation and code about prompts, agents and tool calling, from
LLM libraries' npm and PyPI packages): the builder on tiny archives made here: what is read (docs,
code and its docstrings/JSDoc; never files for AI agents, tests, minified bundles or vendored
held-out modules), slices without LLM topic words dropped, spans that hold the wrapped injection,
balanced labels, the pins, the licence filter, the refused names (held-out sources, the validation
slice's libraries, injection detectors and data sets: P7) and determinism. Nothing is downloaded;
held-out texts are only compared by code."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from training.round4 import build_round4 as b4
from training.round7 import build_round7 as b7
from training.round9 import build_round9 as b9
from tests.unit.test_guard_round7_data import _pin, _tgz, assert_pins_are_distinct_and_none_is_a_heldout_source
from tests.unit.test_guard_round8_data import _whl

HELD_SENTENCE = "the quick brown fox jumps over the lazy dog near the riverbank today"
Pins = tuple[tuple[str, str, str, str], ...]


def _doc(topic: str, i: int) -> str:
    """About 700 characters of documentation about prompting; every few words name `topic` and `i`,
    so documents of different topics or numbers share no 8-word sequence."""
    return "\n".join(
        f"The {topic} agent {i} sends prompt {n} to the LLM. Tool {topic} {i}.{n} returns JSON to the chat {n}."
        for n in range(8))


CODE = {
    "ts": ("/**\n * Builds the {t} system prompt {i}.{n} for the agent.\n"
           " * The {t} tool {i}.{n} result goes back to the LLM as a chat message.\n */\n"
           "export function build_{t}_{i}_{n}(input: string): string {{\n"
           "  return `You are a helpful assistant for {t} {i}.{n}. Call tool {n} when asked.`;\n}}\n"),
    "py": ("def plan_{t}_{i}_{n}(task):\n"
           "    \"\"\"Ask the {t} planner agent {i}.{n} for a plan; the LLM answers with tool calls.\n\n"
           "    The {t} prompt {i}.{n} lists every tool and its JSON schema.\"\"\"\n"
           "    return f\"You are the {t} planner {i}.{n}. Use the tools to finish: {{task}}\"\n"),
}
"""A TypeScript function with a JSDoc comment and a Python one with a docstring, each returning a
system prompt template."""


def _code(lang: str, topic: str, i: int) -> str:
    """A module of five such functions."""
    return "\n".join(CODE[lang].format(t=topic, i=i, n=n) for n in range(5))


COOKING = "\n".join(f"Stir the soup {n} slowly and add salt {n}; bake the bread {n} for an hour." for n in range(30))
"""A document without a single LLM topic word."""


@pytest.fixture()
def synthetic(tmp_path: Path) -> tuple[Path, Path, Pins]:
    pkgs, bench = tmp_path / "pkgs", tmp_path / "bench"
    pkgs.mkdir()
    bench.mkdir()
    npm_files = {f"docs/guide{i}.mdx": _doc("alpha", i) for i in range(8)}
    npm_files.update({f"src/prompts{i}.ts": _code("ts", "alpha", i) for i in range(8)})
    npm_files.update({
        "README.md": _doc("alpha", 99), "docs/cooking.md": COOKING,
        "docs/planted.md": _doc("alpha", 50) + f"\nAlso {HELD_SENTENCE}.",  # shares 8 words with held-out text
        "AGENTS.md": _doc("agentsfile", 1), ".cursor/rules.md": _doc("cursorfile", 1),
        "test/prompts.test.ts": _code("ts", "testfile", 1),
        "dist/index.js": "var a=" + "1;" * 800 + "// prompt agent tool",
    })
    wheel_files = {f"beta_llm/agents{i}.py": _code("py", "beta", i) for i in range(8)}
    wheel_files.update({"beta_llm/CLAUDE.md": _doc("claudefile", 1), "mcp/server.py": _code("py", "vendored", 1)})
    pins = (
        _pin(_tgz(pkgs, "alpha-llm", "1.0.0", "MIT", npm_files), "npm", "alpha-llm", "1.0.0"),
        _pin(_whl(pkgs, "beta_llm", "2.0", "Apache-2.0", wheel_files), "pypi", "beta-llm", "2.0"),
        _pin(_tgz(pkgs, "copyleft-llm", "0.1.0", "GPL-3.0-only", {"README.md": _doc("gamma", 1)}),
             "npm", "copyleft-llm", "0.1.0"),
    )
    (bench / "guard_heldout_synthetic.jsonl").write_text(
        json.dumps({"text": "Notes: " + HELD_SENTENCE + ".", "label": "benign"}) + "\n", encoding="utf-8")
    return pkgs, bench, pins


def test_documents_read_docs_and_code_but_not_agent_files_tests_bundles_or_vendored_heldout_modules() -> None:
    files = {"README.md": _doc("a", 1), "docs/x.mdx": _doc("b", 1), "src/p.ts": _code("ts", "c", 1),
             "pkg/agents.py": _code("py", "d", 1),  # a module named agents.py is code, not a file for agents
             "AGENTS.md": _doc("agentsfile", 1), "pkg/CLAUDE.md": _doc("claudefile", 1),
             "SKILL.md": _doc("skillfile", 1), ".cursor/rules.md": _doc("cursorfile", 1),
             ".guides/usage.md": _doc("guidefile", 1), "tests/test_p.py": _code("py", "testfile", 1),
             "dist/app.min.js": _code("ts", "minfile", 1),
             "dist/bundle.js": "x=" + "1;" * 2000 + _code("ts", "bundlefile", 1),
             "dist/types.d.ts": _code("ts", "longunion", 1) + "type A = " + " | ".join(f"'m{n}'" for n in range(130)),
             "mcp/server.py": _code("py", "mcpfile", 1), "langchain_core/prompts.py": _code("py", "lcfile", 1)}
    assert max(len(line) for line in files["dist/types.d.ts"].split("\n")) > b9.MAX_LINE  # one long line: read
    docs = b9.documents({k: v.encode() for k, v in files.items()})
    text = "\n".join(t for _, t in docs)
    for kept in ("a agent 1", "b agent 1", "c system prompt 1.0", "d planner agent 1.0", "longunion system prompt 1.0"):
        assert kept in text
    for skipped in ("agentsfile", "claudefile", "skillfile", "cursorfile", "guidefile", "testfile", "minfile",
                    "bundlefile", "mcpfile", "lcfile"):
        assert skipped not in text
    kinds = Counter(k for k, _ in docs)
    assert kinds["code"] == 3 and kinds["doc"] == 5  # three code files, and their docstrings / JSDoc as prose
    assert any(k == "doc" and "* " not in t and "c tool 1.0 result" in t for k, t in docs)  # JSDoc without its stars


def test_slices_without_llm_topic_words_are_dropped() -> None:
    assert b4.slices(COOKING, random.Random(1), 3) == []
    kept = b4.slices(_doc("alpha", 1) * 3, random.Random(1), 3)
    assert kept and all(len(b4.TOPIC.findall(p)) >= 3 for p in kept)


def test_place_wraps_the_injection_and_its_span_points_at_it() -> None:
    rng = random.Random(2)
    doc = _code("ts", "alpha", 1)
    for _ in range(30):
        text, (a, b) = b9.place(doc, "INJECTED TEXT", rng)
        assert any(text[a:b] == w.format(inj="INJECTED TEXT") for w in b4.TECH_WRAPPERS)
        assert text[:a - 1] + text[b + 1:] == doc  # the document around it is untouched


def test_synthetic_packages_give_balanced_rows_with_wrapped_spans_and_drop_heldout_offtopic_and_copyleft(
        synthetic: tuple[Path, Path, Pins], tmp_path: Path) -> None:
    # R: P7
    pkgs, bench, pins = synthetic
    rows, drops = b9.build(pkgs, bench, pins)
    assert {r["source"] for r in rows} == {"npm:alpha-llm-1.0.0", "pypi:beta-llm-2.0"}
    assert drops["npm:copyleft-llm-0.1.0"] == Counter({"licence": 1})
    per = Counter((r["source"], r["kind"], r["label"]) for r in rows)
    for source in ("npm:alpha-llm-1.0.0", "pypi:beta-llm-2.0"):
        for kind in ("doc", "code"):
            assert per[(source, kind, "injection")] == per[(source, kind, "benign")] > 0
    pool = {t for ts in b7.injection_pool(random.Random(f"{b9.SEED}:pool")).values() for t in ts}
    wrapped = {w.format(inj=t) for w in b4.TECH_WRAPPERS for t in pool}
    for r in rows:
        assert set(r) <= {"text", "label", "source", "kind", "lang", "span"} and r["lang"] == "en"
        if r["label"] == "injection":
            a, b = r["span"]
            assert r["text"][a:b] in wrapped
        else:
            assert "span" not in r and not any(t in r["text"] for t in pool)
    # the held-out filter drops the planted overlap; the off-topic document gives nothing
    assert drops["npm:alpha-llm-1.0.0"]["heldout-8gram"] >= 1
    assert drops["npm:alpha-llm-1.0.0"]["off-topic-document"] >= 1
    for absent in (HELD_SENTENCE, "soup", "agentsfile", "cursorfile", "testfile", "claudefile", "vendored",
                   "var a=1"):
        assert not any(absent in r["text"] for r in rows), absent
    # deterministic, byte for byte
    b4.write(tmp_path / "a.jsonl", rows)
    b4.write(tmp_path / "b.jsonl", b9.build(pkgs, bench, pins)[0])
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_at_most_cap_slices_per_package_half_prose_half_code(synthetic: tuple[Path, Path, Pins],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pkgs, bench, pins = synthetic
    monkeypatch.setattr(b9, "CAP", 6)
    rows, drops = b9.build(pkgs, bench, pins)
    per = Counter((r["source"], r["kind"]) for r in rows)
    assert per[("npm:alpha-llm-1.0.0", "doc")] == per[("npm:alpha-llm-1.0.0", "code")] == 2  # 3 each, odd one unpaired
    assert drops["npm:alpha-llm-1.0.0"]["cap"] > 0


def test_an_archive_whose_sha256_differs_from_the_pin_is_refused(synthetic: tuple[Path, Path, Pins]) -> None:
    pkgs, bench, pins = synthetic
    with pytest.raises(ValueError, match="sha256"):
        b9.build(pkgs, bench, (pins[0][:3] + ("0" * 64,),))


@pytest.mark.parametrize(("name", "why"), [
    ("@modelcontextprotocol/sdk", "heldout-package"), ("fastmcp", "heldout-package"),
    ("pydantic-ai", "heldout-package"), ("agentdojo", "heldout-package"),
    ("langchain", "validation-package"), ("@langchain/core", "validation-package"),
    ("langgraph", "validation-package"), ("guardrails-ai", "validation-package"),
    ("llm-guard", "detector-package"), ("prompt-injection-dataset", "detector-package"),
    ("garak", "detector-package")])
def test_heldout_validation_and_detector_packages_are_refused_whatever_their_licence(
        tmp_path: Path, name: str, why: str) -> None:
    # R: P7
    bench = tmp_path / "bench"
    bench.mkdir()
    path = _tgz(tmp_path, name.lstrip("@").replace("/", "-"), "1.0.0", "MIT",
                {f"docs/{i}.md": _doc("zeta", i) for i in range(4)})
    pin = ("npm", name, "1.0.0", hashlib.sha256(path.read_bytes()).hexdigest())
    rows, drops = b9.build(tmp_path, bench, (pin,))
    assert rows == [] and drops[f"npm:{name}-1.0.0"] == Counter({why: 1})


def test_pinned_packages_are_distinct_permissive_by_name_and_none_is_heldout_validation_or_a_detector() -> None:
    # R: P7
    assert_pins_are_distinct_and_none_is_a_heldout_source(b9.PACKAGES, 20)
    assert not any(b9.refused(name) for _r, name, _v, _h in b9.PACKAGES)


def test_the_prompt_docs_slice_names_round9_libraries_by_the_source_names_their_rows_carry() -> None:
    # R: P7 — a misspelt name would put that library's rows back into training, unnoticed
    from training.neural import PROMPT_DOC_SOURCES

    round9 = {b7.source_name(registry, name, version) for registry, name, version, _h in b9.PACKAGES}
    kept_out = PROMPT_DOC_SOURCES & round9
    assert len(kept_out) == 5
    assert PROMPT_DOC_SOURCES - kept_out == {"pypi:guardrails_ai-0.11.0", "pypi:langchain_core-1.8.1"}
    assert "npm:@openai/agents-core-0.20.0" in kept_out and "pypi:openai-agents-0.24.0" in kept_out  # kin together
