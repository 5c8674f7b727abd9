"""A newcomer's first hour (D2, D5): the README and prompt_guard's page stay short and link what they
promise, their links and anchors resolve, the README's test command is the one CI runs, and the
training code stays out of the runtime package."""

from __future__ import annotations

import ast
import fnmatch
import re
import shlex
import tomllib
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]*?)(?:#([^)\s]+))?\)")
# the pages of this layout (other pages are checked by their owners' tests)
PAGES = [README, *(ROOT / "docs" / name for name in ("prompt_guard.md", "model_card.md", "gateway.md", "testing.md",
                                                      "performance.md", "deploy.md")),
         *(ROOT / "training" / name for name in ("README.md", "HISTORY.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading.strip().lower()).replace("`", "")
    return "".join("-" if ch == " " else ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LN")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        found.update(re.findall(r'<a id="([^"]+)"', line))
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            slug = _slug(heading.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def _code_blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_and_prompt_guards_page_stay_short() -> None:
    # R: D2
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200
    assert len((ROOT / "docs" / "prompt_guard.md").read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_of_the_layouts_pages_resolves(page: Path) -> None:
    # R: D2
    broken = []
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http:", "https:", "mailto:")):
            continue
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_links_every_operator_page_and_the_production_example() -> None:
    # R: D2
    text = README.read_text(encoding="utf-8")
    linked = {target for target, _ in LINK.findall(text)}
    pages = {f"docs/{name}.md" for name in ("configuration", "console", "bridge", "mcp_bridge", "prompt_guard",
                                            "firewall", "operations", "deploy", "security", "testing",
                                            "performance", "model_card")}
    assert pages | {"config/example.yaml"} <= linked


def test_the_readmes_test_command_is_the_one_ci_runs() -> None:
    # R: D2 — .ci/run installs what the suite needs, then runs "the README's test command"
    first, second = (block.strip() for block in _code_blocks(README, "sh")[:2])
    assert first.endswith("toolgate serve --config config/demo.yaml")
    steps = [shlex.split(step) for step in second.split("&&")]
    assert steps == [["python3", "-m", "venv", ".venv"], [".venv/bin/pip", "install", "-e", ".[test]"],
                     [".venv/bin/pytest"]]
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ci = [line for line in ci if line]
    assert ci[-1] == ".venv/bin/pytest"
    assert "python3 -m venv .venv" in ci and ".venv/bin/pip install --quiet -e '.[test]'" in ci


def test_the_readmes_examples_send_a_conversation_id() -> None:
    # R: D2, B14 — without one, each demo request starts its own MCP session
    curl = [block for block in _code_blocks(README, "sh") if block.lstrip().startswith("curl")]
    sdk = _code_blocks(README, "python")
    assert curl and all("X-Conversation-Id:" in block for block in curl)
    assert sdk and all('"X-Conversation-Id"' in block and "default_headers=" in block for block in sdk)


def test_the_wheel_holds_no_training_code() -> None:
    # R: D5 — the packages setuptools puts in the wheel, found with the project's own settings
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = _packages(config["include"], config.get("exclude", []))
    assert "plugins.prompt_guard" in packages and "plugins.prompt_guard.model" in packages
    assert [name for name in packages if "training" in name.split(".")] == []
    assert not (ROOT / "plugins" / "prompt_guard" / "training").exists()
    assert (ROOT / "training" / "round6" / "build_round6.py").is_file()


def _packages(include: list[str], exclude: list[str]) -> list[str]:
    """setuptools' `packages.find` over the repository: every folder with an `__init__.py` under a
    package folder, by dotted name, kept when it matches an `include` pattern and no `exclude` one."""
    found = []
    inits = [init for top in ROOT.iterdir() if (top / "__init__.py").is_file() for init in top.rglob("__init__.py")]
    for init in inits:
        parts = init.parent.relative_to(ROOT).parts
        if any(not (ROOT.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue
        name = ".".join(parts)
        if any(fnmatch.fnmatchcase(name, p) for p in include) and not any(fnmatch.fnmatchcase(name, p) for p in exclude):
            found.append(name)
    return sorted(found)


def test_no_runtime_module_imports_the_training_code() -> None:
    # R: D5
    importers = []
    for path in [*(ROOT / "gateway").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(name == "training" or name.startswith("training.") or ".training" in name for name in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []
