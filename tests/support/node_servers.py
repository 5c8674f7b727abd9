"""MCP software we did not write, run from npm packages pinned in tests/support/node/package.json
(installed by `.ci/run` with `npm ci`).

- `EverythingServer`: `@modelcontextprotocol/server-everything` (TypeScript SDK) over Streamable
  HTTP on 127.0.0.1 (the `listen-host.mjs` preload binds a port-only `listen()` to loopback).
  `restart()` kills the process and starts a new one on the same port: every session the old
  one held is unknown to the new one, which answers them HTTP 400 "Bad Request: No valid session
  ID provided", as the TypeScript SDK's examples do.

Without Node.js or the installed packages a test using these is skipped, unless
`TOOLGATE_REQUIRE_NODE=1` (set by `.ci/run`), where it fails instead.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"
EVERYTHING = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
START_SECONDS = 90.0


def require_node(entry: Path) -> str:
    """The `node` binary, when it and `entry` are installed; else skip (or fail under CI)."""
    node = shutil.which("node")
    if node is not None and entry.exists():
        return node
    message = f"needs Node.js and `npm ci` in {NODE_DIR} (what .ci/run does)"
    if os.environ.get("TOOLGATE_REQUIRE_NODE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_node(argv: list[str], cwd: Path, port: int, marker: str, what: str, log_stderr: bool = True,
               deadline: float = START_SECONDS, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start a Node.js server on `port` (with `env` added to its environment) and wait (with a
    deadline) for `marker` in its log (stderr, or stdout with `log_stderr=False`); its log is read
    on afterwards, or a full pipe would stop it."""
    process = subprocess.Popen(
        argv, cwd=cwd, env={**os.environ, **(env or {}), "PORT": str(port)}, text=True,
        stdout=subprocess.DEVNULL if log_stderr else subprocess.PIPE,
        stderr=subprocess.PIPE if log_stderr else subprocess.DEVNULL,
    )
    log = process.stderr if log_stderr else process.stdout
    assert log is not None
    seen: list[str] = []
    while True:
        ready, _, _ = select.select([log], [], [], deadline)
        line = log.readline() if ready else ""
        if not line:
            process.kill()
            process.wait(10)
            said = "".join(seen[-40:]).strip()
            raise RuntimeError(f"{what} did not start" + (f"; its last words: {said[-2000:]}" if said else ""))
        seen.append(line)
        if marker in line:
            break
    threading.Thread(target=log.read, name=f"{what}-log", daemon=True).start()
    return process


def stop_node(process: subprocess.Popen[str] | None) -> None:
    """Kill a server `start_node` started (None: nothing to do) and wait for it."""
    if process is not None:
        process.kill()
        process.wait(10)


class EverythingServer:
    """server-everything's Streamable HTTP transport in a child process."""

    def __init__(self) -> None:
        self.node = require_node(EVERYTHING)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[str] | None = None
        self.starts = 0

    def start(self) -> "EverythingServer":
        """Start the process and wait (with a deadline) until it says it listens."""
        process = start_node([self.node, "--import", "./listen-host.mjs", str(EVERYTHING), "streamableHttp"],
                             NODE_DIR, self.port, "listening on port", "server-everything")
        self.process = process
        self.starts += 1
        return self

    def stop(self) -> None:
        """Kill the process and wait for it (its sessions die with it)."""
        process, self.process = self.process, None
        stop_node(process)

    def restart(self) -> None:
        """A new process on the same port: the old sessions are unknown to it."""
        self.stop()
        self.start()
