"""The real HAProxy with deploy/haproxy.cfg, in front of gateway replicas on loopback.

`render()` turns the shipped config into one for this machine: the `bind` line listens on a
loopback port, each `server gateway-N …` line points at the N-th replica, the admin socket lives in
a temporary folder; every other line is used as shipped. `HaProxy` runs it in the foreground
(`-db`) with its own pid file and log file, and reads server states from the admin socket.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "haproxy.cfg"
LOGGED = re.compile(r"\] \S+ (?P<backend>[^/\s]+)/(?P<server>\S+) -?\d+/-?\d+/(?P<connect>-?\d+)/-?\d+/-?\d+ "
                    r"(?P<status>-?\d+) \S+ \S+ \S+ (?P<state>\S{4}) \d+/\d+/\d+/\d+/\+?\d+ \d+/\d+ ")
"""A request's line of `option httplog`: backend/server, the timers (Tc, the connect time, third), the
status, the termination state (`----` for a request that ended normally), and the connection counts,
whose last (retries) reads `+1` when a retry went to another server."""
SERVER = re.compile(r"^(\s*server gateway-(\d+) )\S+(.*)$")


@dataclass(frozen=True)
class Logged:
    """One request as HAProxy logged it."""

    backend: str
    server: str
    connect_ms: int
    """Tc: -1 when no connection to the server was made (nothing was sent to it)."""
    status: int
    """-1 when HAProxy sent the client no response (it closed the connection)."""
    state: str
    line: str


def logged(log: str) -> list[Logged]:
    """The requests of HAProxy's log text, in order (its other lines, warnings and notices, left out)."""
    found = (LOGGED.search(line) for line in log.splitlines())
    return [Logged(m["backend"], m["server"], int(m["connect"]), int(m["status"]), m["state"], m.string)
            for m in found if m is not None]


def binary() -> str | None:
    """The `haproxy` binary: on PATH, or where Debian's package puts it (`.ci/run` installs it)."""
    return shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).is_file()), None)


def require() -> str:
    """The `haproxy` binary; else skip the test, or fail it under `TOOLGATE_REQUIRE_HAPROXY=1`
    (set by `.ci/run`, which installs it)."""
    found = binary()
    if found is not None:
        return found
    message = "needs HAProxy (Debian's `haproxy` package, what .ci/run installs)"
    if os.environ.get("TOOLGATE_REQUIRE_HAPROXY") == "1":
        pytest.fail(message)
    pytest.skip(message)


def render(text: str, port: int, replicas: list[str], socket_path: Path) -> str:
    """The shipped config with this machine's addresses (see the module docstring)."""
    lines = []
    for line in text.splitlines():
        server = SERVER.match(line)
        if server:
            index = int(server.group(2)) - 1
            if index >= len(replicas):
                continue
            host_port = replicas[index].removeprefix("http://")
            line = f"{server.group(1)}{host_port}{server.group(3)}"
        elif line.strip().startswith("bind "):
            line = f"    bind 127.0.0.1:{port}"
        elif line.strip().startswith("stats socket "):
            line = f"    stats socket {socket_path} mode 600 level admin"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HaProxy:
    """HAProxy on a loopback port (`port`, else a free one) in front of `replicas` (base URLs), started at once."""

    def __init__(self, replicas: list[str], port: int | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="toolgate-haproxy-")
        folder = Path(self._dir.name)
        self.socket_path = folder / "admin.sock"
        self.config_path = folder / "haproxy.cfg"
        self.log_path = folder / "haproxy.log"
        self.port = port if port is not None else _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path.write_text(render(CONFIG.read_text(), self.port, replicas, self.socket_path))
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [require(), "-db", "-f", str(self.config_path), "-p", str(folder / "haproxy.pid")],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=folder)

    def admin(self, command: str) -> str:
        """One command on the admin socket; its answer."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.socket_path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self, backend: str = "replicas") -> dict[str, str]:
        """Server name → status (`UP`, `DOWN`, …) in `backend`, from `show stat`."""
        return self._servers(backend, "status")

    def in_flight(self, backend: str = "replicas") -> dict[str, int]:
        """Server name → requests it is serving now (`scur` of `show stat`) in `backend`."""
        return {name: int(value or 0) for name, value in self._servers(backend, "scur").items()}

    def _servers(self, backend: str, column: str) -> dict[str, str]:
        text = self.admin("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {row["svname"]: row[column] for row in rows
                if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_ready(self, timeout: float = 30.0) -> "HaProxy":
        """Until every replica is UP (the first health checks passed); raises with the log otherwise."""
        def ready() -> bool:
            if self.process.poll() is not None:
                return True
            try:
                states = self.states()
            except OSError:
                return False
            return bool(states) and all(state == "UP" for state in states.values())

        if not wait_until(ready, timeout=timeout, interval=0.05) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError(f"haproxy did not come up:\n{self.log_tail()}")
        return self

    def abnormal(self) -> list[Logged]:
        """The requests that did not end normally (termination state other than `----`), as logged."""
        self._log.flush()
        return [r for r in logged(self.log_path.read_text(errors="replace")) if r.state != "----"]

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        self._dir.cleanup()
