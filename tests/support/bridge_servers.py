"""Loopback pieces for the Bridge's tests and benchmark.

- `tool_server(...)`: an SDK `MCPServer` whose tools record every call server-side (start and end
  on the process's monotonic clock), so tests can count calls and check overlap without timing.
- `bridge_app(...)`: a small Starlette app mounting `BridgeService.routes()` with an API-key → identity
  `authenticate`, the way the gateway app will (until `gateway.app.create_app` takes over).

The API keys are canary secrets (`canary.ALICE_KEY`, `canary.BOB_KEY`); tests name a caller by
`"alice-key"` / `"bob-key"` and `mcp_http` sends that caller's key. A connection with
`canary.connection_auth()` sends `canary.CONNECTION_TOKEN`; a tool server checks that no other
header ever carries a canary (a caller's key must never be forwarded) (B4).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx2
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from prometheus_client import CollectorRegistry
from pydantic import Field
from starlette.applications import Starlette
from starlette.requests import Request

from gateway.bridge.config import BridgeConfig
from gateway.bridge.service import BridgeService
from gateway.bridge.store import BridgeStore
from gateway.egress import EgressPolicy
from gateway.errors import Unauthorized
from gateway.identity import Identity
from gateway.secrets import SecretSet
from tests.support import canary
from tests.support.http_server import ServerThread, serve


@dataclass(frozen=True)
class Call:
    """One call a tool server received."""

    tool: str
    arguments: dict[str, Any]
    started: float
    ended: float
    headers: dict[str, str]


@dataclass
class CallLog:
    """Calls received by one tool server, appended from the server's thread."""

    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def of(self, tool: str) -> list[Call]:
        """Calls of one tool, in arrival order."""
        with self._lock:
            return [c for c in self.calls if c.tool == tool]

    def count(self, tool: str) -> int:
        return len(self.of(tool))


def tool_server(log: CallLog, *, delay: float = 0.2, required_header: tuple[str, str] | None = None) -> Any:
    """A Streamable HTTP app (`/mcp`) with tools: `slow_a`, `slow_b` (each waits `delay`), `echo`,
    `boom` (fails), `create_issue`, `never` (must never be called), `regional` (its argument must be
    mirrored in an `Mcp-Param-Region` header on 2026-07-28) and `weird.tool/v2` (a name the
    federation must map). With `required_header`, every tool fails unless the request carries it."""
    server = MCPServer("test-tools")

    def record(tool: str, arguments: dict[str, Any], started: float, ctx: Context) -> None:
        request = ctx.request_context.request
        headers = dict(request.headers) if request is not None else {}
        log.add(Call(tool, arguments, started, time.monotonic(), headers))
        for name, value in headers.items():
            if canary.CANARY in value and (name, value) != (canary.CONNECTION_HEADER.lower(), canary.CONNECTION_TOKEN):
                canary.RECORDER.problem(f"a Bridge tool server ({tool})", f"received a canary secret in header {name}: {value}")
        if required_header is not None and headers.get(required_header[0].lower()) != required_header[1]:
            raise ToolError("missing or wrong credential")

    @server.tool()
    async def slow_a(query: str, ctx: Context) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(delay)
        record("slow_a", {"query": query}, started, ctx)
        return {"result": f"a:{query}"}

    @server.tool()
    async def slow_b(query: str, ctx: Context) -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.sleep(delay)
        record("slow_b", {"query": query}, started, ctx)
        return {"result": f"b:{query}"}

    @server.tool()
    async def echo(text: str, ctx: Context, prefix: str = "") -> str:
        record("echo", {"text": text, "prefix": prefix}, time.monotonic(), ctx)
        return prefix + text

    @server.tool()
    async def boom(ctx: Context, query: str = "") -> str:
        record("boom", {"query": query}, time.monotonic(), ctx)
        raise ToolError("kaboom")

    @server.tool()
    async def create_issue(owner: str, repo: str, title: str, body: str, token: str, ctx: Context) -> str:
        record("create_issue", {"owner": owner, "repo": repo}, time.monotonic(), ctx)
        return f"created in {owner}/{repo}"

    @server.tool()
    async def never(ctx: Context, query: str = "") -> str:
        record("never", {"query": query}, time.monotonic(), ctx)
        return "should not have been called"

    @server.tool()
    async def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], ctx: Context) -> str:
        record("regional", {"region": region}, time.monotonic(), ctx)
        return f"region={region}"

    @server.tool(name="weird.tool/v2")
    async def weird(ctx: Context) -> str:
        record("weird.tool/v2", {}, time.monotonic(), ctx)
        return "weird ok"

    return server.streamable_http_app()


KEYS = {
    canary.ALICE_KEY: Identity(user_id="alice", org_id="acme", display_name="Alice", email="alice@acme.test"),
    canary.BOB_KEY: Identity(user_id="bob", org_id="globex", display_name="Bob", email="bob@globex.test"),
}
CALLERS = {"alice-key": canary.ALICE_KEY, "bob-key": canary.BOB_KEY}
"""Callers by name: the key each presents."""


async def authenticate_by_key(request: Request) -> Identity:
    """API key → identity, like the gateway's G3 auth with two configured keys."""
    header = request.headers.get("authorization", "")
    identity = KEYS.get(header.removeprefix("Bearer ").strip()) if header.startswith("Bearer ") else None
    if identity is None:
        raise Unauthorized("missing or unknown API key")
    return identity


def authenticate_by_name(callers: dict[str, Identity]) -> Callable[[Request], Awaitable[Identity]]:
    """An `authenticate` for tests with callers of their own: `Authorization: Bearer <name>` is
    `callers[name]` (`mcp_http(name)` presents it), anything else is refused."""

    async def authenticate(request: Request) -> Identity:
        identity = callers.get(request.headers.get("authorization", "").removeprefix("Bearer "))
        if identity is None:
            raise Unauthorized("unknown caller")
        return identity

    return authenticate


@dataclass
class BridgeApp:
    """The app and the service inside it (the service is started by the app's lifespan)."""

    app: Starlette
    service: BridgeService
    registry: CollectorRegistry


async def anonymous(request: Request) -> Identity:
    """Auth off (`auth.mode: none`): every caller is anonymous (owner key `anonymous`)."""
    return Identity()


def bridge_app(
    config: BridgeConfig, base_dir: Path, *, store: BridgeStore | None = None,
    authenticate: Callable[[Request], Awaitable[Identity]] = authenticate_by_key, egress: EgressPolicy | None = None,
) -> BridgeApp:
    """A Starlette app serving the Bridge's routes, its lifespan starting and stopping the service
    (`authenticate`: the API keys of `KEYS` unless a test brings its own callers)."""
    registry = CollectorRegistry()
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300))
    service = BridgeService(
        config, authenticate=authenticate, http=http, metrics=registry, base_dir=base_dir,
        secrets=SecretSet(), store=store, egress=egress,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            await http.aclose()

    bridge = BridgeApp(Starlette(routes=service.routes(), lifespan=lifespan), service, registry)
    bridge.app.state.canary_bridge = bridge  # its responses, metrics and database are searched for the canary
    return bridge


async def audit_flushed(bridge: BridgeApp, server: ServerThread) -> None:
    """Wait (with a deadline) until the Bridge's audit queue is drained, on the server's loop."""
    assert server.loop is not None
    future = asyncio.run_coroutine_threadsafe(bridge.service.audit.flushed(), server.loop)
    await asyncio.wait_for(asyncio.wrap_future(future), timeout=10)


@dataclass
class ServedBridge:
    """A Bridge app served on loopback beside the tool server its connections point at."""

    app: BridgeApp
    server: ServerThread
    tools_url: str

    @property
    def url(self) -> str:
        return self.server.url

    async def flushed(self) -> None:
        """Wait (with a deadline) until the audit queue is drained."""
        await audit_flushed(self.app, self.server)


@contextlib.contextmanager
def served_bridge(base_dir: Path, config: Callable[[str], dict[str, Any]]) -> Iterator[ServedBridge]:
    """A tool server (tool_server), then a Bridge app configured by `config(<its URL>)` — private
    loopback endpoints allowed unless `config` says otherwise — both served on loopback."""
    with serve(tool_server(CallLog(), delay=0.0)) as tools:
        settings = BridgeConfig.model_validate({"apiEndpointAllowPrivate": ["127.0.0.0/8"], **config(tools.url)})
        app = bridge_app(settings, base_dir)
        with serve(app.app) as bridge:
            yield ServedBridge(app, bridge, tools.url)


async def rest(bridge: ServedBridge, method: str, path: str, key: str = "alice-key", body: Any = None,
               headers: dict[str, str] | None = None) -> httpx2.Response:
    """One REST API request to `bridge` as the caller of API key `key`."""
    async with mcp_http(key) as http:
        return await http.request(method, f"{bridge.url}{path}", json=body, headers=headers)


@contextlib.contextmanager
def bridge_over(upstream_app: Any, base_dir: Path, *, connection: str, owner: str, bridge: str) -> Iterator[ServerThread]:
    """A running Bridge with one connection (to `upstream_app`, served here too, credentialed with
    `canary.connection_auth()`) and one bridge of the same owner holding it."""
    with serve(upstream_app) as upstream:
        config = BridgeConfig.model_validate({
            "database": "bridge.db",
            "connections": [{"id": connection, "owner": owner, "endpoint": f"{upstream.url}/mcp", **canary.connection_auth()}],
            "bridges": [{"id": bridge, "owner": owner, "connections": [connection]}],
        })
        with serve(bridge_app(config, base_dir).app) as server:
            yield server

def mcp_http(key: str, **kwargs: Any) -> httpx2.AsyncClient:
    """An `httpx2` client presenting an API key, for `mcp.Client` against the Bridge: a caller's
    name from `CALLERS` (`"alice-key"`) presents that caller's canary key; any other string is sent
    as it is (a wrong key)."""
    token = CALLERS.get(key, key)
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300), **kwargs)


def node(node_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """A graph node as the editor writes it."""
    return {"id": node_id, "kind": kind, **fields}


def tool_node(node_id: str, tool: str, connection: str = "tools", **fields: Any) -> dict[str, Any]:
    """A tool node with its schema-fixed ports given in `fields` (`inputs`, `outputs`, `config`)."""
    return {"id": node_id, "kind": "tool", "connectionId": connection, "tool": tool, **fields}


def edge(edge_id: str, source: str, target: str) -> dict[str, Any]:
    """`edge("e1", "in1.query", "t1.query")`: from node.port to node.port."""
    (src_node, src_port), (dst_node, dst_port) = source.split("."), target.split(".")
    return {"id": edge_id, "from": {"node": src_node, "port": src_port}, "to": {"node": dst_node, "port": dst_port}}


def graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], pipelines: list[dict[str, Any]]) -> dict[str, Any]:
    """A version-1 graph object."""
    return {"version": 1, "nodes": nodes, "edges": edges, "pipelines": pipelines}


def pipeline(name: str, input_node: str = "in1", output_node: str = "out1", pipeline_id: str | None = None) -> dict[str, Any]:
    """A pipeline entry."""
    return {"id": pipeline_id or f"p_{name}", "name": name, "inputNode": input_node, "outputNode": output_node}


def fan_in_graph() -> dict[str, Any]:
    """in1.query → slow_a, slow_b → merge → out1.ctx; plus a `never` node the output does not depend on."""
    return graph(
        [
            node("in1", "input", outputs=["query"]),
            tool_node("ta", "slow_a", inputs=["query"], outputs=["result"]),
            tool_node("tb", "slow_b", inputs=["query"], outputs=["result"]),
            tool_node("tn", "never", inputs=["query"], outputs=["result"]),
            node("m1", "merge", inputs=["a", "b"], outputs=["out"]),
            node("out1", "output", inputs=["ctx"]),
            node("out2", "output", inputs=["unused"]),
        ],
        [
            edge("e1", "in1.query", "ta.query"),
            edge("e2", "in1.query", "tb.query"),
            edge("e3", "ta.result", "m1.a"),
            edge("e4", "tb.result", "m1.b"),
            edge("e5", "m1.out", "out1.ctx"),
            edge("e6", "in1.query", "tn.query"),
            edge("e7", "tn.result", "out2.unused"),
        ],
        [pipeline("fan_in")],
    )
