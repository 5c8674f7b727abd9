"""Helpers for benchmarks: free ports, subprocess servers with readiness checks, the README table."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path

import httpx2

README = Path(__file__).resolve().parent / "README.md"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measured_on() -> str:
    """`<UTC date and time> on <machine()>`: the start of a table's "Measured …" line."""
    from datetime import datetime, timezone

    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} on {machine()}"


def edited(tree: Path) -> bool:
    """Does `tree` hold uncommitted changes to tracked files (so its commit alone is not what ran)?"""
    status = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, check=True)
    return bool(status.stdout.strip())


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


class Proc:
    """A server subprocess, ready when `url + ready_path` answers 200."""

    def __init__(self, argv: list[str], url: str, ready_path: str, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        self.argv, self.url, self.ready_path, self.env, self.timeout = argv, url, ready_path, env, timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Proc":
        root = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(self.argv, cwd=root, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode}")
            try:
                if httpx2.get(self.url + self.ready_path, timeout=1).status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{' '.join(self.argv)} not ready within {self.timeout}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def write_section(name: str, body: str, readme: Path = README, heading: str | None = None, intro: str = "") -> None:
    """Replace the text between `<!-- name:start -->` and `<!-- name:end -->` in `readme`; where the
    markers are missing, append them under `## heading` (default `name`) after `intro`."""
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body}\n{end}"
    if start in text:
        text = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + f"\n\n## {heading or name}\n\n{intro + chr(10) + chr(10) if intro else ''}{block}\n"
    readme.write_text(text)
