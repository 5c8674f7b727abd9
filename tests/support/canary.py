"""A canary secret for the whole suite (B4, G6, G8): configured everywhere, found nowhere.

One random value is minted per test session (`CANARY`). Every secret the tests configure is that
value plus a role suffix, so one search finds any of them:

- `UPSTREAM_KEY`: the upstream model's key (`simple_config` gives every upstream
  `api_key: env:TOOLGATE_TEST_UPSTREAM_KEY`); the scripted upstream checks it receives exactly it.
- `MCP_CREDENTIAL` (`Bearer <MCP_TOKEN>`): the value behind mcp_bridge's `authHeaderName`
  (`mcp_auth()`); the test MCP servers check every credential they receive is exactly it.
- `CONNECTION_TOKEN`: a Bridge connection's `authSecret` (`connection_auth()`); the Bridge's tool
  servers check it arrives in its header and that no other header carries a canary.
- `ALICE_KEY`, `BOB_KEY`: API keys the gateway (and the Bridge test app) knows; `JWT_SECRET`: the
  HMAC key of JWT tests.

The values live in the environment (`TOOLGATE_TEST_*`, set on import, inherited by subprocesses),
so configs only ever hold references (G8).

While a pytest session runs (`arm()`, from tests/conftest.py), `RECORDER` searches for the canary in:
every log record (formatted as the gateway's JSON lines, unscrubbed: the product must not rely on
the last-line-of-defence scrub), every response body and header the gateway app or a Bridge app
sends (`watch`, applied by tests/support/http_server to the apps it serves), `/metrics` (fetched
from every gateway before it stops, and every registry read after), every audit record a
`SqliteStore` appends and every row of a Bridge's database after it stops, every request body the
scripted model receives, and what tests hand it (`scan`, e.g. a `toolgate serve` process's stderr).
The autouse fixtures in tests/conftest.py fail the test during which a hit was recorded. Outside
pytest (bench/) nothing is recorded and nothing is wrapped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

CANARY = "tgcanary-" + secrets.token_hex(8)
"""The needle: every canary secret contains it."""


def _value(role: str) -> str:
    return f"{CANARY}-{role}"


UPSTREAM_KEY = _value("upstream")
MCP_TOKEN = _value("mcp")
MCP_CREDENTIAL = f"Bearer {MCP_TOKEN}"
CONNECTION_TOKEN = _value("connection")
CONNECTION_HEADER = "X-Api-Token"
ALICE_KEY = _value("alice")
BOB_KEY = _value("bob")
JWT_SECRET = _value("jwt-hmac-signing-key")

ENV = {
    "TOOLGATE_TEST_UPSTREAM_KEY": UPSTREAM_KEY,
    "TOOLGATE_TEST_MCP_TOKEN": MCP_CREDENTIAL,
    "TOOLGATE_TEST_CONNECTION_TOKEN": CONNECTION_TOKEN,
    "TOOLGATE_TEST_ALICE_KEY": ALICE_KEY,
    "TOOLGATE_TEST_BOB_KEY": BOB_KEY,
    "TOOLGATE_TEST_JWT_SECRET": JWT_SECRET,
}
os.environ.update(ENV)

UPSTREAM_KEY_REF = "env:TOOLGATE_TEST_UPSTREAM_KEY"
ALICE_KEY_REF = "env:TOOLGATE_TEST_ALICE_KEY"
BOB_KEY_REF = "env:TOOLGATE_TEST_BOB_KEY"
JWT_SECRET_REF = "env:TOOLGATE_TEST_JWT_SECRET"

_ROLES = {value: role for role, value in (
    ("upstream key", UPSTREAM_KEY), ("mcp token", MCP_TOKEN), ("connection token", CONNECTION_TOKEN),
    ("alice's API key", ALICE_KEY), ("bob's API key", BOB_KEY), ("JWT secret", JWT_SECRET),
)}
_ANY = re.compile(re.escape(CANARY) + r"[-A-Za-z0-9]*")


def mcp_auth() -> dict[str, str]:
    """The mcp_bridge fields that send `MCP_CREDENTIAL` as `Authorization` (a reference, G8)."""
    return {"authHeaderName": "Authorization", "authSecret": "env:TOOLGATE_TEST_MCP_TOKEN"}


def connection_auth() -> dict[str, str]:
    """The Bridge connection fields that send `CONNECTION_TOKEN` as `X-Api-Token`."""
    return {"authHeaderName": CONNECTION_HEADER, "authSecret": "env:TOOLGATE_TEST_CONNECTION_TOKEN"}


def describe(text: str) -> str:
    """`text` with every canary secret replaced by its role (failure messages never print one)."""
    return _ANY.sub(lambda m: f"<canary: {_ROLES.get(m.group(0), 'canary')}>", text)


@dataclass(frozen=True)
class Finding:
    """A canary seen where it must not be (`source`: log, response, metrics, audit, ...), or a
    credential check that failed (`source`: credential)."""

    source: str
    where: str
    excerpt: str

    def __str__(self) -> str:
        return f"[{self.source}] {self.where}: {self.excerpt}"


@dataclass
class Recorder:
    """Findings since the last `take()`, and how many texts of each source were searched."""

    armed: bool = False
    findings: list[Finding] = field(default_factory=list)
    scanned: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def scan(self, source: str, where: str, text: str | bytes) -> bool:
        """Search `text`; record a finding when it holds the canary. True on a hit."""
        if not self.armed:
            return False
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        hit = CANARY in raw
        with self._lock:
            self.scanned[source] += 1
            if hit:
                self.findings.append(Finding(source, where, _excerpt(raw)))
        return hit

    def problem(self, where: str, message: str) -> None:
        """Record a failed credential check (a secret missing, wrong, or sent to the wrong party)."""
        if self.armed:
            with self._lock:
                self.findings.append(Finding("credential", where, describe(message)))

    def take(self) -> tuple[list[Finding], Counter[str]]:
        """The findings and counts since the last call, cleared."""
        with self._lock:
            found, counts = self.findings, self.scanned
            self.findings, self.scanned = [], Counter()
        return found, counts

    @contextlib.contextmanager
    def expect_leaks(self) -> Iterator[list[Finding]]:
        """For the self-tests: the findings recorded inside the block are handed to the test (and
        removed, so the autouse check does not fail it)."""
        with self._lock:
            start = len(self.findings)
        caught: list[Finding] = []
        try:
            yield caught
        finally:
            with self._lock:
                caught.extend(self.findings[start:])
                del self.findings[start:]


def _excerpt(text: str, width: int = 100) -> str:
    at = text.find(CANARY)
    start, end = max(0, at - width), min(len(text), at + len(CANARY) + width)
    return ("…" if start else "") + describe(text[start:end]).replace("\n", "\\n") + ("…" if end < len(text) else "")


RECORDER = Recorder()


def check_credential(who: str, received: str | None, expected: str, *, required: bool) -> None:
    """A test server's check of the credential it was sent: exactly `expected` (the canary
    configured for it), never another value; `required`: never missing either."""
    if received is None:
        if required:
            RECORDER.problem(who, f"received no credential; the test configured {expected}")
    elif received != expected:
        RECORDER.problem(who, f"received the credential {received!r}; the test configured {expected}")


# -- logs --------------------------------------------------------------------------------------


class _LogScanner(logging.Handler):
    """Formats each record as the gateway would (gateway.logs.JsonFormatter, no scrubbing) and
    searches the line."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        from gateway.logs import JsonFormatter

        self._formatter = JsonFormatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self._formatter.format(record)
        except Exception:  # a record that cannot be formatted is still searched as far as it goes
            line = f"{record.msg!r} {record.args!r}"
        RECORDER.scan("log", f"logger {record.name} ({record.levelname})", line)


_HANDLER: _LogScanner | None = None
_LOGGERS = ("", "uvicorn")
"""Root (everything that propagates) and uvicorn's own tree (uvicorn does not propagate)."""


def attach_logs() -> None:
    """(Re-)attach the scanner; uvicorn replaces its loggers' handlers whenever a server is built."""
    if _HANDLER is None:
        return
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _HANDLER not in logger.handlers:
            logger.addHandler(_HANDLER)


# -- responses, metrics, stores ----------------------------------------------------------------


def _gateway_of(app: Any) -> Any:
    return getattr(getattr(app, "state", None), "gateway", None)


def _bridge_of(app: Any) -> Any:
    return getattr(getattr(app, "state", None), "canary_bridge", None)


def watch(app: Any) -> Any:
    """The gateway app (`create_app`) or a Bridge test app (`bridge_app`) with every response it
    sends searched (headers and body, streamed bodies included); any other app unchanged."""
    if not RECORDER.armed or (_gateway_of(app) is None and _bridge_of(app) is None):
        return app
    overlap = len(CANARY) - 1

    async def watched(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        source = "metrics" if scope["path"] == "/metrics" else "response"
        where = f"{scope['method']} {scope['path']}"
        tail = b""

        async def scanning(message: dict[str, Any]) -> None:
            nonlocal tail, where
            if message["type"] == "http.response.start":
                where = f"{where} -> {message['status']}"
                headers = b"\n".join(k + b": " + v for k, v in message.get("headers", []))
                RECORDER.scan(source, where + " (headers)", headers)
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if CANARY.encode() in tail + body:
                    RECORDER.scan(source, where, tail + body)
                tail = (tail + body)[-overlap:]
            await send(message)

        await app(scope, receive, scanning)

    return watched


def before_stop(app: Any, url: str) -> None:
    """A gateway about to stop: fetch and search its `/metrics` (through `watch`)."""
    if not RECORDER.armed or _gateway_of(app) is None:
        return
    import httpx2

    with contextlib.suppress(httpx2.HTTPError):
        RECORDER.scan("metrics", f"GET {url}/metrics before stop", httpx2.get(url + "/metrics", timeout=10).text)


def after_stop(app: Any) -> None:
    """A gateway or Bridge app that stopped: search its metrics registry and its Bridge database."""
    if not RECORDER.armed:
        return
    gateway, bridge = _gateway_of(app), _bridge_of(app)
    registry, database = None, None
    if gateway is not None:
        registry = gateway.metrics.registry
        settings = gateway.config.bridge
        if settings is not None and settings.enabled:
            from gateway.bridge.store import is_postgres, sqlite_path

            database = None if is_postgres(settings.database) else sqlite_path(settings.database, gateway.config.base_dir)
    elif bridge is not None:
        registry, database = bridge.registry, getattr(bridge.service.store, "path", None)
    if registry is not None:
        scan_registry(registry, "metrics registry after stop")
    if database and database != ":memory:" and os.path.exists(database):
        scan_database(database)


def scan_registry(registry: Any, where: str) -> None:
    """Search a Prometheus registry in its text format."""
    from prometheus_client import generate_latest

    RECORDER.scan("metrics", where, generate_latest(registry))


def scan_database(path: str) -> None:
    """Search every row of a Bridge database: audit records, connections (secret *references*
    only), bridges, graphs."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):  # noqa: S608 - names from sqlite_master
                RECORDER.scan("audit store", f"{os.path.basename(path)}: table {table}", repr(row))


def _record_audit_appends() -> None:
    """Search every audit record any `SqliteStore` appends (in-memory stores included)."""
    from gateway.bridge.store_sqlite import SqliteStore

    original = SqliteStore.append_audit
    if getattr(original, "canary", False):
        return

    async def append_audit(self: SqliteStore, records: Any) -> None:
        for record in records:
            RECORDER.scan("audit", f"audit record {record.action} {record.resource!r}", repr(record) + json.dumps(record.args))
        await original(self, records)

    append_audit.canary = True  # type: ignore[attr-defined]
    SqliteStore.append_audit = append_audit  # type: ignore[method-assign]


def arm() -> None:
    """Start recording (once per pytest session): log scanner, audit appends, `watch`."""
    global _HANDLER
    if RECORDER.armed:
        return
    RECORDER.armed = True
    _HANDLER = _LogScanner()
    attach_logs()
    logging.getLogger("toolgate").setLevel(logging.DEBUG)  # every line an operator could turn on is searched
    _record_audit_appends()
