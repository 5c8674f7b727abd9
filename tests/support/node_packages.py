"""The npm packages the Node-based tests run, installed by the test session itself when missing.

Three folders pin them with a package.json and a package-lock.json: tests/support/node (the MCP
servers and the conformance suite we did not write), its conformance-fixture (the suite's fixture
server) and oidc (oidc-provider, the OAuth tests' issuer). At the start of a session
(tests/conftest.py) every folder without an installed tree gets `npm ci --no-audit --no-fund`
when npm is on PATH, so a newcomer's `pytest` skips none of the tests this machine can run. npm
fetches only what the lock files name, from the registry they name; nothing else is downloaded.
An installed folder is left alone (one `stat` each), so later sessions pay nothing.

`TOOLGATE_NPM_INSTALL=0` turns it off: the tests that need the packages then skip, or fail under
`TOOLGATE_REQUIRE_NODE=1` (tests/support/node_servers.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE_DIRS = (NODE_DIR, NODE_DIR / "conformance-fixture", NODE_DIR / "oidc")
INSTALL_SECONDS = 900.0
"""The deadline of one `npm ci` (the three together take about a minute on a fast network)."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one folder that had no installed tree."""

    folder: Path
    installed: bool
    detail: str


def is_installed(folder: Path) -> bool:
    """npm writes `node_modules/.package-lock.json` once an install has completed."""
    return (folder / "node_modules" / ".package-lock.json").is_file()


def enabled() -> bool:
    return os.environ.get("TOOLGATE_NPM_INSTALL", "1") != "0"


@contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """One install per folder at a time, across concurrent test sessions on this machine."""
    name = hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"toolgate-npm-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install_missing(folders: Sequence[Path] = PACKAGE_DIRS, say: Callable[[str], None] = print,
                    npm: str | None = None, deadline: float = INSTALL_SECONDS) -> list[Outcome]:
    """`npm ci` in each of `folders` that has no installed tree; one outcome per such folder.

    Never raises for npm's sake: a missing npm, a failed or timed-out install is said (`say`) and
    returned, and the tests that need the folder then skip (or fail under TOOLGATE_REQUIRE_NODE=1)
    with their own message."""
    missing = [folder for folder in folders if not is_installed(folder)]
    if not missing:
        return []
    npm = npm or shutil.which("npm")
    if npm is None:
        names = ", ".join(_shown(folder) for folder in missing)
        say(f"npm packages missing in {names} and npm is not on PATH: the tests that run Node.js "
            "servers will skip (install Node.js 20 with npm, or run .ci/run)")
        return [Outcome(folder, False, "npm is not on PATH") for folder in missing]
    outcomes = []
    for folder in missing:
        with _exclusive(folder):
            if is_installed(folder):  # another session installed it while this one waited
                outcomes.append(Outcome(folder, True, "installed by another session"))
                continue
            say(f"installing the npm packages the tests run: npm ci in {_shown(folder)} (once; "
                "TOOLGATE_NPM_INSTALL=0 skips it)")
            outcomes.append(_npm_ci(npm, folder, deadline))
        if not outcomes[-1].installed:
            say(f"npm ci in {_shown(folder)} failed: {outcomes[-1].detail}")
    return outcomes


def _npm_ci(npm: str, folder: Path, deadline: float) -> Outcome:
    argv = [npm, "ci", "--no-audit", "--no-fund", "--prefix", str(folder)]
    try:
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=deadline,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Outcome(folder, False, f"no answer within {deadline:.0f} s")
    if done.returncode != 0 or not is_installed(folder):
        said = [line.removeprefix("npm error").strip() for line in (done.stderr or done.stdout).splitlines()]
        first = [line for line in said if line and not line.startswith("code ")][:2]
        return Outcome(folder, False, f"exit status {done.returncode}: " + " | ".join(first))
    return Outcome(folder, True, "installed")


def _shown(folder: Path) -> str:
    root = NODE_DIR.parents[2]
    return str(folder.relative_to(root)) if folder.is_relative_to(root) else str(folder)
