"""MCP servers for the tests, built with the SDK's low-level `Server`.

- `McpServerState` records what the server saw: calls by tool, a counter per session, sessions
  opened and deleted, timestamps of every operation, auth headers; tests wait on it with a deadline.
  Every credential an HTTP server receives must be the canary's (`canary.MCP_CREDENTIAL`, which
  `canary.mcp_auth()` configures); with `require_credential`, every request must carry it (B4).
- `http_app(state, ...)`: Streamable HTTP. `legacy_only=True` refuses the 2026-07-28 probe, so
  clients fall back to a 2025-11-25 session (`Mcp-Session-Id`); `stateless=True` serves every
  request without a session. `state.kill(session_id)` ends a session server-side (404 after).
- `python -m tests.support.mcp_servers --stdio` serves the same tools over stdio;
  `--http` serves them on a free port and prints `PORT <n>` (a server a test can kill).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import Server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.support import canary

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 56
"""64 bytes that say image/png."""

TOOLS = [
    types.Tool(name="count", description="Counts calls in this session.", input_schema={"type": "object"}),
    types.Tool(
        name="echo",
        description="Returns its arguments as JSON.",
        input_schema={"type": "object", "additionalProperties": True},
    ),
    types.Tool(name="fail", description="Always reports an error.", input_schema={"type": "object"}),
    types.Tool(name="slow", description="Waits `delay` seconds.", input_schema={"type": "object"}),
    types.Tool(name="image", description="Returns a PNG image.", input_schema={"type": "object"}),
    types.Tool(name="secret_tool", description="Outside most filters.", input_schema={"type": "object"}),
    types.Tool(name="pid", description="The server's process id.", input_schema={"type": "object"}),
    types.Tool(name="whoami", description="Echoes the credential it was sent.", input_schema={"type": "object"}),
]

SUBSCRIPTION_TOOLS = [
    types.Tool(name="touch", description="Tells every session subscribed to `uri` that it changed.", input_schema={"type": "object"}),
    types.Tool(name="grow", description="Adds the tool `grown` and tells every session the lists changed.", input_schema={"type": "object"}),
]
"""Listed (with resource subscriptions) by a server built with `subscriptions=True`."""


@dataclass
class McpServerState:
    """What a test server saw. Safe to read from the test thread; wait with `wait_for`."""

    delay: float = 0.0
    """Seconds every tool call and resource read waits (concurrency and benchmarks)."""
    event_stream_delay: float = 0.0
    """Seconds the server takes before it opens a session's event stream (the standalone GET): a
    slow server, or one behind a slow proxy. What it sends outside a request is dropped meanwhile."""
    calls: Counter[str] = field(default_factory=Counter)
    per_session: Counter[str] = field(default_factory=Counter)
    opened: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    killed: set[str] = field(default_factory=set)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    arguments: list[dict[str, Any]] = field(default_factory=list)
    trace_parents: list[str | None] = field(default_factory=list)
    """The W3C `traceparent` each tool call carried in `params._meta` (MCP's trace propagation), None when absent."""
    methods: Counter[str] = field(default_factory=Counter)
    """JSON-RPC methods received over HTTP (e.g. to prove `resources/list` was never asked)."""
    peers: Counter[tuple[str, int]] = field(default_factory=Counter)
    """POST requests per client address and port: one entry per TCP connection the client used."""
    call_peers: Counter[tuple[str, int]] = field(default_factory=Counter)
    """`tools/call` POSTs per client address and port (as `peers`, for the calls alone)."""
    end_every_session: bool = False
    """When set, every request carrying a session id gets 404 (a server that keeps ending sessions)."""
    subscribers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Resource URI -> session id -> that session (with `subscriptions=True`)."""
    unsubscribed: list[tuple[str, str]] = field(default_factory=list)
    """(session id, URI) of every `resources/unsubscribe`."""
    sessions: dict[str, Any] = field(default_factory=dict)
    """Session id -> the session, for every session that called a tool (with `subscriptions=True`)."""
    grown: bool = False
    require_credential: bool = False
    """When set, a request without the canary credential is a failed check (the test configured
    `canary.mcp_auth()`, so the secret must really be sent)."""
    cond: threading.Condition = field(default_factory=threading.Condition)

    def note(self, update: Callable[[], None]) -> None:
        """Apply `update` under the lock and wake every waiter."""
        with self.cond:
            update()
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until `predicate()` holds (re-checked on every change), at most `timeout` seconds."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def kill(self, session_id: str) -> None:
        """End a session on the server side: later requests carrying its id get 404."""
        self.note(lambda: self.killed.add(session_id))

    @property
    def live_sessions(self) -> list[str]:
        """Sessions opened and neither deleted by a client nor killed."""
        with self.cond:
            return [s for s in self.opened if s not in self.deleted and s not in self.killed]


def _credential_of(ctx: Any) -> str:
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    return (headers.get("authorization") or "none") if headers is not None else "none"


def _session_of(ctx: Any) -> str:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None:
        return headers.get("mcp-session-id") or "stateless"
    return "stdio"


def build_server(
    state: McpServerState, *, resources: bool = True, name: str = "test-server", subscriptions: bool = False
) -> Server[Any]:
    """The test tools (and resources unless `resources=False`: then no resources capability). With
    `subscriptions`, resources can be subscribed to (2025-11-25) and the tools `touch` (sends
    `notifications/resources/updated` for `uri` to its subscribers) and `grow` (lists one more
    tool from then on and sends the tools, resources and prompts `list_changed` notifications to
    every session that called a tool) are listed."""

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = TOOLS + SUBSCRIPTION_TOOLS if subscriptions else TOOLS
        if state.grown:
            tools = [*tools, types.Tool(name="grown", description="Listed after `grow`.", input_schema={"type": "object"})]
        return types.ListToolsResult(tools=tools)

    async def notify(sessions: list[Any], notification: Any) -> int:
        sent = 0
        for session in sessions:
            with contextlib.suppress(Exception):  # a session that is gone
                await session.send_notification(notification)
                sent += 1
        return sent

    async def on_subscribe_resource(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        session_id, uri = _session_of(ctx), str(params.uri)
        state.note(lambda: state.subscribers.setdefault(uri, {}).__setitem__(session_id, ctx.session))
        return types.EmptyResult()

    async def on_unsubscribe_resource(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        session_id, uri = _session_of(ctx), str(params.uri)
        state.note(lambda: (state.subscribers.get(uri, {}).pop(session_id, None), state.unsubscribed.append((session_id, uri))))
        return types.EmptyResult()

    async def timed(what: str) -> float:
        start = time.monotonic()
        if state.delay:
            await asyncio.sleep(state.delay)
        return start

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        session = _session_of(ctx)
        arguments = dict(params.arguments or {})
        parent = (params.meta or {}).get("traceparent")
        state.note(lambda: (state.calls.update([params.name]), state.arguments.append(arguments), state.trace_parents.append(parent)))
        start = await timed(params.name)
        text: str
        if subscriptions:
            state.note(lambda: state.sessions.__setitem__(session, ctx.session))
        if subscriptions and params.name == "touch":
            uri = str(arguments.get("uri"))
            updated = types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=uri))
            text = f"told {await notify(list(state.subscribers.get(uri, {}).values()), updated)}"
        elif subscriptions and params.name == "grow":
            state.note(lambda: setattr(state, "grown", True))
            changed = [types.ToolListChangedNotification(), types.ResourceListChangedNotification(), types.PromptListChangedNotification()]
            told = [await notify(list(state.sessions.values()), notification) for notification in changed]
            text = f"told {min(told)}"
        elif params.name == "count":
            state.note(lambda: state.per_session.update([session]))
            text = f"session {session} call {state.per_session[session]}"
        elif params.name == "echo":
            text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        elif params.name == "fail":
            state.note(lambda: state.spans.append((params.name, start, time.monotonic())))
            return types.CallToolResult(content=[types.TextContent(type="text", text="boom")], is_error=True)
        elif params.name == "whoami":  # a careless server that echoes the credential it was given
            credential = _credential_of(ctx)
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"bad credential {credential}")], is_error=True)
        elif params.name == "pid":
            text = str(os.getpid())
        elif params.name == "slow":
            try:
                await asyncio.sleep(float(arguments.get("delay", 0.2)))
            except asyncio.CancelledError:  # the client cancelled the call (notifications/cancelled)
                state.note(lambda: state.calls.update(["slow:cancelled"]))
                raise
            text = "slow done"
        elif params.name == "image":
            data = base64.b64encode(PNG).decode()
            state.note(lambda: state.spans.append((params.name, start, time.monotonic())))
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="a logo"), types.ImageContent(type="image", data=data, mime_type="image/png")]
            )
        else:
            text = f"{params.name} ran"
        state.note(lambda: state.spans.append((params.name, start, time.monotonic())))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri="docs://index", name="index", mime_type="text/markdown"),
                types.Resource(uri="docs://guide", name="guide", mime_type="text/plain"),
                types.Resource(uri="docs://notes", name="notes", mime_type="text/plain"),
                types.Resource(uri="docs://logo", name="logo", mime_type="image/png"),
            ]
        )

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        start = await timed(uri)
        state.note(lambda: state.spans.append((uri, start, time.monotonic())))
        if uri == "docs://logo":
            blob = base64.b64encode(PNG).decode()
            return types.ReadResourceResult(contents=[types.BlobResourceContents(uri=uri, blob=blob, mime_type="image/png")])
        if uri in ("docs://index", "docs://guide", "docs://notes"):
            text = f"contents of {uri}"
            return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type="text/plain")])
        raise MCPError(-32002, f"Resource not found: {uri}")

    handlers: dict[str, Any] = {"on_list_tools": on_list_tools, "on_call_tool": on_call_tool}
    if resources:
        handlers.update(on_list_resources=on_list_resources, on_read_resource=on_read_resource)
    if resources and subscriptions:
        handlers.update(on_subscribe_resource=on_subscribe_resource, on_unsubscribe_resource=on_unsubscribe_resource)
    schemas = {tool.name: tool.input_schema for tool in TOOLS + SUBSCRIPTION_TOOLS}
    schemas["grown"] = {"type": "object"}
    with warnings.catch_warnings():  # resource subscriptions are deprecated as of 2026-07-28, served before
        warnings.simplefilter("ignore")
        return Server(name, get_tool_input_schema=schemas.get, **handlers)


def _json_error(status: int, code: int, message: str) -> tuple[dict[str, Any], bytes]:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    start = {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    return start, body


def http_app(
    state: McpServerState,
    *,
    legacy_only: bool = False,
    stateless: bool = False,
    resources: bool = True,
    session_idle_timeout: float | None = None,
    json_response: bool = False,
    subscriptions: bool = False,
) -> Any:
    """An ASGI app serving the test server at `/mcp`, recording sessions and headers in `state`."""
    server = build_server(state, resources=resources, subscriptions=subscriptions)
    inner = server.streamable_http_app(
        stateless_http=stateless, session_idle_timeout=session_idle_timeout, json_response=json_response
    )
    return recording_app(state, inner, legacy_only=legacy_only)


def recording_app(state: McpServerState, inner: Any, *, legacy_only: bool = False) -> Any:
    """Wrap an SDK streamable-HTTP app so that `state` records what reaches it: sessions opened,
    deleted and ended by the server (`state.kill`, `end_every_session`: later requests get 404 and
    the session counts as killed), methods, credentials (checked against the canary). With
    `legacy_only` the 2026 protocol probe is refused, so clients open 2025-11-25 sessions."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        session = headers.get("mcp-session-id")
        if scope["method"] == "POST" and scope.get("client"):
            peer = tuple(scope["client"])
            state.note(lambda: state.peers.update([peer]))
        if "authorization" in headers or "x-api-key" in headers:
            state.note(lambda: state.auth_headers.append(headers.get("authorization") or headers["x-api-key"]))
        credential = headers.get("authorization") or headers.get("x-api-key")
        canary.check_credential(f"a test MCP server ({scope['method']} {scope['path']})", credential, canary.MCP_CREDENTIAL,
                                required=state.require_credential)
        version = headers.get("mcp-protocol-version")
        refuse: tuple[int, int, str] | None = None
        if legacy_only and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            refuse = (400, -32601, "Method not found")
        elif session is not None and (session in state.killed or state.end_every_session):
            state.kill(session)  # ended by the server, whichever way: not the client's leftover
            refuse = (404, -32600, "Session not found")
        if refuse is not None:
            start, body = _json_error(*refuse)
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return

        if scope["method"] == "GET" and state.event_stream_delay:
            await asyncio.sleep(state.event_stream_delay)

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                minted = dict(message.get("headers", [])).get(b"mcp-session-id")
                if minted is not None and session is None:
                    state.note(lambda: state.opened.append(minted.decode()))
                if scope["method"] == "DELETE" and session is not None:
                    state.note(lambda: state.deleted.append(session))
            await send(message)

        body = bytearray()

        async def read() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body") and body:
                    names = _record_method(state, bytes(body))
                    if "tools/call" in names and scope["method"] == "POST" and scope.get("client"):
                        peer = tuple(scope["client"])
                        state.note(lambda: state.call_peers.update([peer]))
            return message

        await inner(scope, read, watch)

    return app


def _record_method(state: McpServerState, body: bytes) -> list[str]:
    """Note the JSON-RPC methods of a request body in `state.methods`; they are returned."""
    try:
        payload = json.loads(body)
    except ValueError:
        return []
    items = payload if isinstance(payload, list) else [payload]
    names = [item["method"] for item in items if isinstance(item, dict) and isinstance(item.get("method"), str)]
    state.note(lambda: state.methods.update(names))
    return names


async def _serve_stdio(state: McpServerState) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(state)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class HttpSubprocess:
    """A test server in a child process (`--http`), so a test can stop it for real."""

    def __init__(self, *args: str) -> None:
        import select
        import subprocess
        import sys

        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.mcp_servers", "--http", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30.0)  # a deadline, not a hang
        line = self.process.stdout.readline().split() if ready else []
        if len(line) != 2 or line[0] != "PORT":
            self.process.kill()
            self.process.wait(10)
            raise RuntimeError("the MCP test server did not start")
        self.url = f"http://127.0.0.1:{line[1]}/mcp"

    def stop(self) -> None:
        """Kill the process and wait for it: its sockets are closed by the OS."""
        self.process.kill()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def main() -> None:
    """`--stdio`, or `--http` (prints `PORT <n>`, then serves until killed); `--delay` seconds."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--legacy-only", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    state = McpServerState(delay=args.delay)
    if args.stdio:
        asyncio.run(_serve_stdio(state))
        return
    from tests.support.http_server import ServerThread

    server = ServerThread(http_app(state, legacy_only=args.legacy_only)).start()
    print(f"PORT {server.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
