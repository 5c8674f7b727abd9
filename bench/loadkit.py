"""Parts of the load harness: a stateless tool-calling model, an MCP server that counts its
sessions, and real processes (those two, and `toolgate serve`) started and stopped with deadlines.

- `tooling_model_app()`: an OpenAI-compatible upstream (JSON and SSE). Asked without a tool
  result, it calls the tools `count` and `echo` (echoing the last user message); asked with tool
  results, it answers with text that quotes them, prefixed by the model name it was sent
  (`[backend-0] …`), so a client can tell which gateway and which MCP session served a turn.
  Stateless: every answer is a function of the request, so any number of conversations can run.
- `counted_mcp_app()`: the SDK-built test server of tests/support/mcp_servers (session-ful only:
  the 2026-07-28 probe is refused), plus `GET /stats`: sessions opened, deleted and still open,
  counted on the server side.
- `python -m bench.loadkit model|mcp` serves one of them on a free loopback port and prints
  `PORT <n>` once it listens; `Child` starts such a process, `Gateway` a `toolgate serve` process
  on port 0 (its port is read from /proc once it listens: no port another process could take).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx2
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


# -- the model ------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def scripted_turn(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for this request: tool calls first, then text quoting their results."""
    messages = body.get("messages") or []
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(_text(message.get("content")))
    if results:
        return {"role": "assistant", "content": f"[{body.get('model')}] " + " | ".join(reversed(results))}
    offered = {(tool.get("function") or {}).get("name") for tool in body.get("tools") or []}
    if not {"count", "echo"} <= offered:  # a real model calls only the tools it was offered
        return {"role": "assistant", "content": f"[{body.get('model')}] the tools were not offered: {sorted(offered - {None})}"}
    said = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    n = len(messages)
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}_0", "type": "function", "function": {"name": "count", "arguments": "{}"}},
        {"id": f"call_{n}_1", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"said": said})}},
    ]}


def _sse(body: dict[str, Any], message: dict[str, Any]) -> list[bytes]:
    base = {"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 0, "model": body.get("model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        events += [chunk({"tool_calls": calls}), chunk({}, "tool_calls")]
    else:
        words = message["content"].split(" ")
        events += [chunk({"content": w + (" " if i < len(words) - 1 else "")}) for i, w in enumerate(words)]
        events.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        events.append(b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n")
    return [*events, b"data: [DONE]\n\n"]


async def _chat(request: Request) -> Response:
    body = json.loads(await request.body())
    message = scripted_turn(body)
    if body.get("stream"):
        events = _sse(body, message)

        async def send():  # type: ignore[no-untyped-def]
            for event in events:
                yield event

        return StreamingResponse(send(), media_type="text/event-stream")
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return JSONResponse({
        "id": "chatcmpl-load", "object": "chat.completion", "created": 0, "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


def tooling_model_app() -> Starlette:
    """The stateless tool-calling model (see the module docstring)."""
    return Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])


# -- the MCP server -------------------------------------------------------------------------


def counted_mcp_app() -> Any:
    """The test MCP server (session-ful) at `/mcp`, and its session counts at `GET /stats`."""
    from tests.support.mcp_servers import McpServerState, http_app

    state = McpServerState()
    inner = http_app(state, legacy_only=True)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            with state.cond:
                opened, deleted = len(state.opened), len(state.deleted)
                calls = dict(state.calls)
            live = len(state.live_sessions)
            await JSONResponse({"opened": opened, "deleted": deleted, "live": live, "calls": calls})(scope, receive, send)
            return
        await inner(scope, receive, send)

    return app


# -- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a process, in KiB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listening_port(pid: int) -> int | None:
    """The TCP port process `pid` listens on (from /proc), or None while it listens on none."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in table:
        fields = row.split()
        if fields[3] == "0A" and f"socket:[{fields[9]}]" in inodes:  # 0A: LISTEN
            return int(fields[1].rsplit(":", 1)[1], 16)
    return None


class Child:
    """`python -m bench.loadkit <kind>` in a child process, started at once; `wait_ready()` waits
    (with a deadline) for the port it prints once it listens."""

    def __init__(self, kind: str, *args: str) -> None:
        self.kind = kind
        self.url = ""
        self.log = tempfile.TemporaryFile()  # the SDK logs every request a client abandoned: keep it out of the table
        self.process = subprocess.Popen([sys.executable, "-m", "bench.loadkit", kind, *args],
                                        cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def wait_ready(self, timeout: float = 60.0) -> "Child":
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)  # a deadline, not a hang
        line = self.process.stdout.readline().split() if ready else []
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError(f"bench.loadkit {self.kind} did not start: {self.log_tail()}")
        self.url = f"http://127.0.0.1:{line[1]}"
        return self

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def log_tail(self, size: int = 2000) -> str:
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - size))
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


def gateway_config(model_url: str, mcp_url: str, *, label: str = "load-model", idle_seconds: float = 300,
                   guard_mode: str | None = "enforce", extra_routes: list[dict[str, Any]] | None = None,
                   extra_upstreams: list[dict[str, Any]] | None = None,
                   bridge_store: tuple[str, str] | None = None) -> dict[str, Any]:
    """Route `assistant`: prompt_guard (unless `guard_mode` is None), then mcp_bridge on the counted
    server; the model is told `label`. With `bridge_store` = (database, front URL), the gateway's
    Bridge keeps its store there and federates the counted server as bridge `b1`, and the route
    calls `echo` through that Bridge (at `front`/mcp/b1: so every echo is audited) while `count`
    stays on the conversation's own MCP session."""
    guard = [{"type": "prompt_guard", "mode": guard_mode}] if guard_mode else []
    bridge = {"type": "mcp_bridge", "id": "tools", "endpoint": mcp_url + "/mcp", "toolFilter": ["count", "echo"],
              "sessionIdleSeconds": idle_seconds}
    tools = [bridge]
    config: dict[str, Any] = {"auth": {"mode": "none"}, "server": {"metrics_public": True}}  # each replica's /metrics is summed
    if bridge_store is not None:
        database, front = bridge_store
        tools = [{**bridge, "toolFilter": ["count"]},
                 {**bridge, "id": "audited", "endpoint": front + "/mcp/b1", "toolFilter": ["echo"]}]
        config["bridge"] = {
            "database": database,
            "connections": [{"id": "counted", "owner": "anonymous", "endpoint": mcp_url + "/mcp", "prefix": ""}],
            "bridges": [{"id": "b1", "owner": "anonymous", "connections": ["counted"]}],
            "sessionIdleSeconds": idle_seconds,
            # every conversation reaches the Bridge as the one anonymous caller (auth off): a single
            # tenant's limits, not the per-caller defaults made to keep tenants apart
            "limits": {"sessionsPerCaller": 1000, "outboundPerCaller": 256},
        }
    return {
        **config,
        "upstreams": [{"name": "model", "kind": "openai", "api_base": model_url + "/v1"}, *(extra_upstreams or [])],
        "routes": [{"model": "assistant", "upstream": "model", "upstream_model": label, "plugins": [*guard, *tools]},
                   *(extra_routes or [])],
    }


class Gateway:
    """A real `toolgate serve` process on a free loopback port, ready once `/readyz` answers 200."""

    def __init__(self, config: dict[str, Any], *, log_level: str = "info", port: int = 0) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="toolgate-load-")
        path = Path(self._dir.name) / "toolgate.yaml"
        config = {**config, "server": {**config.get("server", {}), "log_level": log_level}}
        path.write_text(yaml.safe_dump(config))
        self.log_path = Path(self._dir.name) / "gateway.log"
        self._log = self.log_path.open("wb")
        self.url = ""
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)]
        self.process = subprocess.Popen(argv, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self, timeout: float = 60.0) -> "Gateway":
        def ready() -> bool:
            if self.process.poll() is not None:
                return True
            if not self.url:
                port = listening_port(self.process.pid)
                if port is None:
                    return False
                self.url = f"http://127.0.0.1:{port}"
            try:
                return httpx2.get(self.url + "/readyz", timeout=1).status_code == 200
            except httpx2.HTTPError:
                return False

        if not wait_until(ready, timeout=timeout, interval=0.05) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError(f"toolgate serve did not become ready:\n{self.log_tail()}")
        return self

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def peak_rss_kib(self) -> list[int]:
        """Peak RSS of the serving process (a list: one entry per process, as bench/load.py reports it)."""
        return [peak_rss_kib(self.process.pid)]

    def cpu_seconds(self) -> float:
        """CPU time of the serving process so far."""
        return cpu_seconds(self.process.pid)

    @property
    def metrics_urls(self) -> list[str]:
        """Where this gateway's counters are scraped."""
        return [self.url]

    def died(self) -> str | None:
        """The log tail when the process has died, else None."""
        return self.log_tail() if self.process.poll() is not None else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        self._dir.cleanup()


class Replicated:
    """`n` `toolgate serve` processes on one config behind the real HAProxy with deploy/haproxy.cfg
    (tests/support/haproxy.py); what bench/load.py needs of a `Gateway`, for the whole group."""

    def __init__(self, config: dict[str, Any], n: int, *, port: int | None = None) -> None:
        self.gateways = [Gateway(config) for _ in range(n)]
        self.proxy: Any = None
        self.url = ""
        self.port = port
        """HAProxy's port (None: a free one)."""

    def wait_ready(self, timeout: float = 60.0) -> "Replicated":
        from tests.support.haproxy import HaProxy

        try:
            for gateway in self.gateways:
                gateway.wait_ready(timeout)
            self.proxy = HaProxy([g.url for g in self.gateways], port=self.port).wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.url = self.proxy.url
        return self

    @property
    def metrics_urls(self) -> list[str]:
        return [g.url for g in self.gateways]

    def peak_rss_kib(self) -> list[int]:
        return [kib for g in self.gateways for kib in g.peak_rss_kib()]

    def cpu_seconds(self) -> float:
        return sum(g.cpu_seconds() for g in self.gateways)

    def proxy_cpu_seconds(self) -> float:
        return cpu_seconds(self.proxy.process.pid) if self.proxy is not None else 0.0

    def died(self) -> str | None:
        gone = [g.log_tail() for g in self.gateways if g.process.poll() is not None]
        if self.proxy is not None and self.proxy.process.poll() is not None:
            gone.append(self.proxy.log_tail())
        return "\n".join(gone) or None

    def stop(self) -> None:
        if self.proxy is not None:
            for request in self.proxy.abnormal()[:10]:  # HAProxy's view of any request that did not end normally
                print(f"haproxy: {request.line}", file=sys.stderr)
            self.proxy.stop()
        for gateway in self.gateways:
            gateway.stop()


def _serve(kind: str, keep_alive: float) -> None:
    """Serve one part on a free loopback port until terminated; print `PORT <port>` once it listens."""
    import asyncio

    import uvicorn

    app = tooling_model_app() if kind == "model" else counted_mcp_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted connections
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections wait in the backlog from now on, until uvicorn accepts them
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, ws="none", timeout_keep_alive=keep_alive)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="serve one part of the load harness on a loopback port")
    parser.add_argument("kind", choices=["model", "mcp"])
    parser.add_argument("--keep-alive", type=float, default=5.0,
                        help="seconds an idle connection stays open (uvicorn's default, and vLLM's: 5)")
    args = parser.parse_args()
    _serve(args.kind, args.keep_alive)
