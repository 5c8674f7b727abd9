"""Faulty servers and leftover probes for the fault matrix (tests/integration/test_fault_matrix.py).

- `fault_app(state)`: a Streamable HTTP MCP server (low-level SDK `Server`, 2025-11-25 sessions)
  whose tools misbehave on purpose: `hang` (never answers until the test releases it; records the
  cancellation), `big` (megabytes of text), `binary` (image, audio and a blob), `fail` (isError),
  `exit` (the process dies mid-call: only in a `FaultSubprocess`), `count` (names its session).
  Sessions opened, deleted and killed are recorded in a `FaultState` (an `McpServerState`).
- `FaultSubprocess`: that server in a child process; `serve_on(app, port)`: any app on a given port
  (a server that comes up after the gateway did).
- Leftover probes: `loop_tasks(server)` (the tasks alive on a server thread's event loop),
  `open_connections(server)` (TCP connections a uvicorn server holds), `metric(url, ...)`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import select
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.server import Server
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http_server import ServerThread
from tests.support.mcp_servers import PNG, McpServerState, recording_app

WAV = b"RIFF" + b"\x00" * 28
"""32 bytes that say audio/wav."""

FAULT_TOOLS = [
    types.Tool(name="count", description="Counts calls in this session.", input_schema={"type": "object"}),
    types.Tool(name="hang", description="Never answers (until released).", input_schema={"type": "object"}),
    types.Tool(name="big", description="Returns `megabytes` MB of text.", input_schema={"type": "object"}),
    types.Tool(name="binary", description="Returns an image, audio and a blob.", input_schema={"type": "object"}),
    types.Tool(name="fail", description="Reports an error.", input_schema={"type": "object"}),
    types.Tool(name="exit", description="Ends the server process mid-call.", input_schema={"type": "object"}),
]


@dataclass
class FaultState(McpServerState):
    """`McpServerState` plus what the fault tools record."""

    release: threading.Event = field(default_factory=threading.Event)
    """Set by the test to let every `hang` call go (so a server can always stop)."""
    hanging: int = 0
    """`hang` calls currently waiting."""
    cancelled: Counter[str] = field(default_factory=Counter)
    """Tool calls whose handler was cancelled (the client gave up and said so)."""


def big_text(megabytes: float) -> str:
    """`megabytes` MB of recognisable text: lines `line <n>` padded to 64 bytes."""
    lines = int(megabytes * 1024 * 1024) // 64
    return "".join(f"line {n}".ljust(63) + "\n" for n in range(lines))


def build_fault_server(state: FaultState) -> Server[Any]:
    """The fault tools (no resources)."""

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=FAULT_TOOLS)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        headers = getattr(getattr(ctx, "request", None), "headers", None)
        session = (headers.get("mcp-session-id") if headers is not None else None) or "stateless"
        arguments = dict(params.arguments or {})
        state.note(lambda: (state.calls.update([params.name]), state.arguments.append(arguments)))
        name = params.name
        if name == "count":
            state.note(lambda: state.per_session.update([session]))
            return _text(f"session {session} call {state.per_session[session]}")
        if name == "hang":
            state.note(lambda: setattr(state, "hanging", state.hanging + 1))
            try:
                await anyio.to_thread.run_sync(state.release.wait, 120, abandon_on_cancel=True)
            except BaseException:
                state.note(lambda: state.cancelled.update([name]))
                raise
            finally:
                state.note(lambda: setattr(state, "hanging", state.hanging - 1))
            return _text("released")
        if name == "big":
            return _text(big_text(float(arguments.get("megabytes", 10))))
        if name == "binary":
            blob = types.BlobResourceContents(uri="file:///report.pdf", blob=base64.b64encode(b"%PDF" * 100).decode(), mime_type="application/pdf")
            return types.CallToolResult(content=[
                types.TextContent(type="text", text="three attachments"),
                types.ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
                types.AudioContent(type="audio", data=base64.b64encode(WAV).decode(), mime_type="audio/wav"),
                types.EmbeddedResource(type="resource", resource=blob),
            ])
        if name == "fail":
            return types.CallToolResult(content=[types.TextContent(type="text", text="the disk is full")], is_error=True)
        if name == "exit":
            os._exit(17)  # the process dies with the call in flight: no answer, sockets reset
        return _text(f"{name} ran")

    schemas = {tool.name: tool.input_schema for tool in FAULT_TOOLS}
    return Server("fault-server", get_tool_input_schema=schemas.get, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def fault_app(state: FaultState, *, json_response: bool = False) -> Any:
    """The fault server at `/mcp`, 2025-11-25 sessions only (the 2026 probe is refused), recording
    sessions in `state` (`mcp_servers.recording_app`): `state.kill(id)` (or `end_every_session`)
    makes the server answer 404, and a session answered 404 counts as killed (ended by the server)."""
    inner = build_fault_server(state).streamable_http_app(json_response=json_response)
    return recording_app(state, inner, legacy_only=True)


# -- servers on chosen ports and in child processes -------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve_on(app: Any, port: int) -> Iterator[ServerThread]:
    """Serve `app` on 127.0.0.1:`port` (e.g. a server that comes up after its clients started)."""
    server = ServerThread(app)
    server.sock.close()
    server.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.sock.bind(("127.0.0.1", port))
    server.port = port
    server.start()
    try:
        yield server
    finally:
        server.stop()


class FaultSubprocess:
    """The fault server in a child process, so a tool call can end the process for real."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.support.faults"], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30.0)  # a deadline, not a hang
        line = self.process.stdout.readline().split() if ready else []
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError("the fault server did not start")
        self.url = f"http://127.0.0.1:{line[1]}/mcp"

    def stop(self) -> int | None:
        """Kill the process (when still alive) and reap it; its exit code."""
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code


# -- leftover probes ---------------------------------------------------------------------------


class ActiveRequests:
    """An ASGI wrapper counting the requests its app is still serving (a stream the client
    dropped ends when the app notices, so `active` going back to 0 proves the request ended)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.active = 0
        self.served = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self._lock:
            self.active += 1
            self.served += 1
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                self.active -= 1



PER_LOOP_TASKS = frozenset({"_shutdown_watcher"})
"""Tasks a library starts once per event loop, on first use, and keeps until the loop ends (sse_starlette's
shutdown watcher, started by the first SSE response the Bridge's MCP endpoint sends): not leftovers."""


def loop_tasks(server: ServerThread) -> Counter[str]:
    """The tasks alive on `server`'s event loop (besides this probe and `PER_LOOP_TASKS`), by name
    and coroutine: compare with the value taken before the first request to find stuck tasks."""
    assert server.loop is not None

    async def probe() -> Counter[str]:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me and t.get_coro().__qualname__ not in PER_LOOP_TASKS]
        return Counter(f"{t.get_name()}|{t.get_coro().__qualname__}" for t in tasks)

    return asyncio.run_coroutine_threadsafe(probe(), server.loop).result(10)


def open_connections(server: ServerThread) -> int:
    """TCP connections `server` (uvicorn) holds open now, idle keep-alive ones included."""
    return len(server.server.server_state.connections)


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of the gateway's `/metrics` (0 when absent)."""
    text = httpx2.get(url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def main() -> None:
    """Serve the fault server on a free port, print `PORT <n>`, serve until killed."""
    argparse.ArgumentParser().parse_args()
    server = ServerThread(fault_app(FaultState())).start()
    print(f"PORT {server.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
