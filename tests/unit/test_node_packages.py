"""The test session installs the npm packages its Node-based tests run (tests/support/node_packages.py).

Real npm on PATH, on throwaway folders whose one dependency is a local folder (`file:`), so nothing
is fetched from a registry. Without npm these skip, or fail under TOOLGATE_REQUIRE_NODE=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import node_packages
from tests.support.node_packages import NODE_DIR, PACKAGE_DIRS, install_missing, is_installed

NPM = shutil.which("npm")


def _npm() -> str:
    if NPM is None:
        if os.environ.get("TOOLGATE_REQUIRE_NODE") == "1":
            pytest.fail("needs npm on PATH")
        pytest.skip("needs npm on PATH")
    return NPM


def _project(folder: Path, npm: str) -> Path:
    """A package with one local dependency and its lock file, not installed."""
    (folder / "dep").mkdir(parents=True)
    (folder / "dep" / "package.json").write_text(json.dumps({"name": "dep", "version": "1.0.0"}))
    (folder / "package.json").write_text(json.dumps(
        {"name": "t", "version": "1.0.0", "private": True, "dependencies": {"dep": "file:dep"}}))
    subprocess.run([npm, "install", "--package-lock-only", "--no-audit", "--no-fund"], cwd=folder,
                   check=True, capture_output=True, timeout=120)
    assert (folder / "package-lock.json").is_file() and not is_installed(folder)
    return folder


def test_a_folder_without_its_packages_is_installed_with_npm_ci_once(tmp_path: Path) -> None:
    # R: D2
    npm = _npm()
    folder = _project(tmp_path / "p", npm)
    said: list[str] = []
    outcomes = install_missing([folder], say=said.append, npm=npm)
    assert [(o.folder, o.installed) for o in outcomes] == [(folder, True)]
    assert is_installed(folder) and (folder / "node_modules" / "dep" / "package.json").is_file()
    assert len(said) == 1 and "npm ci in" in said[0] and "TOOLGATE_NPM_INSTALL=0" in said[0]
    # an installed folder is left alone: nothing run, nothing said
    again: list[str] = []
    assert install_missing([folder], say=again.append, npm=npm) == [] and again == []


def test_a_failed_npm_ci_is_said_and_returned_not_raised(tmp_path: Path) -> None:
    # R: D2
    npm = _npm()
    folder = _project(tmp_path / "p", npm)
    package = json.loads((folder / "package.json").read_text())
    package["dependencies"]["other"] = "file:other"  # the lock file no longer matches
    (folder / "package.json").write_text(json.dumps(package))
    said: list[str] = []
    [outcome] = install_missing([folder], say=said.append, npm=npm)
    assert not outcome.installed and outcome.detail.startswith("exit status 1: ")
    assert "in sync" in outcome.detail
    assert not is_installed(folder)
    assert said[-1].startswith("npm ci in ") and "failed: exit status 1" in said[-1]


def test_without_npm_the_folders_missing_packages_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # R: D2
    folder = tmp_path / "p"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm here
    said: list[str] = []
    [outcome] = install_missing([folder], say=said.append)
    assert outcome == node_packages.Outcome(folder, False, "npm is not on PATH")
    assert len(said) == 1 and str(folder) in said[0] and "npm is not on PATH" in said[0]


def test_the_session_installs_every_npm_folder_of_the_tests() -> None:
    # R: D2 — a folder added under tests/support/node without being listed would leave its tests skipping
    locks = {p.parent for p in NODE_DIR.rglob("package-lock.json") if "node_modules" not in p.parts}
    assert locks == set(PACKAGE_DIRS)
