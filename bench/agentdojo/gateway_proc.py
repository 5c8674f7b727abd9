"""The gateway as a user runs it: `toolgate serve --config <generated yaml>` in a subprocess.

Started on a free loopback port and awaited on `/readyz` with a deadline; its stderr goes to a
log file beside the config, whose tail is shown when it fails to start (a config error names the
key's path). `firewall_available` asks `toolgate check` whether this gateway knows the firewall's
config keys yet.

`Source` says which code runs: the venv's installed (editable) gateway, i.e. the work tree as it is,
or a commit exported with `git archive` and run from there (`python -m gateway.cli`, the export
first on the path), so a measurement names exactly the code it measured.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nobody listens on now (the gateway binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Source:
    """The gateway's code: `venv`'s `toolgate` (the work tree), or `tree`, an exported commit."""

    venv: Path
    tree: Path | None = None
    label: str = "work tree"

    def command(self, *args: str) -> tuple[list[str], Path, dict[str, str]]:
        """(argv, cwd, environment) of `toolgate <args>`."""
        if self.tree is None:
            return [str(self.venv / "bin" / "toolgate"), *args], ROOT, dict(os.environ)
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        return [str(self.venv / "bin" / "python"), "-m", "gateway.cli", *args], self.tree, env


def export_commit(venv: Path, revision: str) -> Source:
    """`revision` of this repository exported to a temporary folder (removed at exit). Build products
    git does not hold (prompt_guard's optional compiled scorer) are copied from the work tree when
    their source is the same; otherwise the gateway uses its pure-Python scorer (same scores)."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout

    commit = git("rev-parse", "--verify", revision + "^{commit}").decode().strip()
    tree = Path(tempfile.mkdtemp(prefix=f"agentdojo-gateway-{commit[:10]}-"))
    atexit.register(shutil.rmtree, tree, True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=git("archive", "--format=tar", commit), check=True)
    for built in ROOT.glob("plugins/**/*.so"):
        source = built.parent / (built.name.split(".")[0] + ".c")
        exported = tree / source.relative_to(ROOT)
        if source.exists() and exported.exists() and exported.read_bytes() == source.read_bytes():
            shutil.copy2(built, tree / built.relative_to(ROOT))
    return Source(venv, tree, f"commit {commit[:10]}")


def check_config(source: Source, config: dict[str, Any]) -> list[str]:
    """`toolgate check` on `config`: the problems it prints (empty when the config is valid)."""
    with tempfile.TemporaryDirectory(prefix="agentdojo-check-") as folder:
        path = Path(folder) / "gateway.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv, cwd, env = source.command("check", str(path))
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120,
                              env={**env, "AGENTDOJO_UPSTREAM_KEY": "check"})
    return [] if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])


def firewall_available(source: Source) -> tuple[bool, list[str]]:
    """(True, []) when the gateway accepts `firewall:` (with `enabled`, `trusted_arguments`) on
    prompt_guard and `trustedSources` on mcp_bridge; else (False, the problems `toolgate check` printed)."""
    from bench.agentdojo.rows import EXTRA_ROWS, gateway_config

    config = gateway_config(EXTRA_ROWS["enforce+trusted+text"], 8080, "http://127.0.0.1:9/", {"banking": "http://127.0.0.1:9/mcp"})
    config["routes"][0]["plugins"][0]["firewall"]["enabled"] = True
    problems = check_config(source, config)
    return not problems, problems


class Gateway:
    """One gateway subprocess for one row."""

    def __init__(self, source: Source, config: dict[str, Any], env: dict[str, str], label: str) -> None:
        self.source, self.config, self.label = source, config, label
        self.extra_env = env
        self.folder = Path(tempfile.mkdtemp(prefix=f"agentdojo-{label.replace('+', '-')}-"))
        self.port = free_port()
        self.config["server"]["port"] = self.port
        self.config_path = self.folder / "gateway.yaml"
        self.log_path = self.folder / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> "Gateway":
        """Start and wait for `/readyz` (the neural detector loads first), at most `timeout` seconds."""
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        argv, cwd, env = self.source.command("serve", "--config", str(self.config_path))
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=cwd, env={**env, **self.extra_env}, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway {self.label} exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get(self.url + "/readyz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                pause.wait(0.1)  # polling /readyz, bounded by the deadline
        self.stop()
        raise TimeoutError(f"gateway {self.label} not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def metrics(self) -> dict[str, float]:
        """The gateway's Prometheus samples (name with labels -> value); {} if it cannot be read."""
        try:
            text = httpx.get(self.url + "/metrics", timeout=10).text
        except httpx.HTTPError:
            return {}
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    samples[name] = float(value)
                except ValueError:
                    continue
        return samples

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)

    def cleanup(self) -> None:
        """Remove the generated config and log (kept when a row had errors, for diagnosis)."""
        shutil.rmtree(self.folder, ignore_errors=True)
