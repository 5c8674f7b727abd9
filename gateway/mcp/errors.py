"""Why an MCP call failed, as short texts that never carry a secret or the content (B4, B13)."""

from __future__ import annotations

import asyncio
import re

import httpx2
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

SESSION_ENDED = re.compile(
    r"session (not found|terminated|expired|unknown)|(no valid|unknown|invalid|missing|expired) session",
    re.IGNORECASE,
)
"""How servers say a session is gone (B16), whatever the error code: the Python SDK's 404 ("Session
not found", the client's "Session terminated"), the TypeScript SDK's 400 ("Bad Request: No valid
session ID provided"), and JSON-RPC errors of other servers ("session not found", "Invalid session
ID", "Unknown session")."""
UNREADABLE_ANSWER_PREFIX = "SSE stream failed:"
"""How the SDK reports an answer it could not read (an event over its size limit, a broken event
stream): the session is fine and the same call would fail the same way, so it is not retried."""


def _unreadable_answer(exc: MCPError) -> bool:
    return exc.code == CONNECTION_CLOSED and exc.message.startswith(UNREADABLE_ANSWER_PREFIX)


class McpCallFailed(Exception):
    """A call that did not produce a result; `reason` is safe to show the model and the logs."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SessionLost(McpCallFailed):
    """The connection behind a session closed (server gone, transport closed)."""

    def __init__(self, reason: str = "the connection to the MCP server closed") -> None:
        super().__init__(reason)


class CallTimeout(McpCallFailed):
    """A call (or the session set-up) ran past `timeoutSeconds` (B17)."""


class AnswerTooLarge(McpCallFailed):
    """The server's answer passed the client's bound (`limit` bytes) and was cut while it was read
    (bounds.py); the session is kept, and the call is not retried (it would fail the same way)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the MCP server's answer is over the limit of {limit} bytes")
        self.limit = limit


def session_ended(exc: BaseException) -> bool:
    """True when the server ended the session: the pool replaces it and retries once (B16).

    A bare HTTP status the SDK could not read an error from (its stand-in "Server returned an error
    response") is judged by the connection, which saw the status (`SessionWatch`)."""
    if isinstance(exc, SessionLost):
        return True
    if isinstance(exc, MCPError):
        if SESSION_ENDED.search(exc.message):
            return True
        return exc.code == CONNECTION_CLOSED and not _unreadable_answer(exc)
    return False


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(_leaves(inner))
        return found
    return [exc]


def describe(exc: BaseException, *, detail: bool = True) -> str:
    """A short reason for a failure, built from the exception's kind, never from headers or URLs.

    With `detail`, an MCP error's own message (server text, up to 200 characters) is included:
    right for the model's tool calls, whose result text passes the inspectors; injected context
    leaves it out, so uninspected server text never reaches the model.
    """
    if isinstance(exc, McpCallFailed):
        return exc.reason
    for leaf in _leaves(exc):
        if isinstance(leaf, httpx2.ConnectError) or isinstance(leaf, ConnectionError):
            return "the MCP server could not be reached"
        if isinstance(leaf, httpx2.TimeoutException) or isinstance(leaf, (TimeoutError, asyncio.TimeoutError)):
            return "the MCP server did not answer in time"
        if isinstance(leaf, MCPError):
            if leaf.code == REQUEST_TIMEOUT:
                return "the MCP server did not answer in time"
            if _unreadable_answer(leaf):
                return "the MCP server's answer could not be read (too large or malformed)"
            if session_ended(leaf):
                return "the MCP session ended"
            suffix = f": {leaf.message[:200]}" if detail else ""
            return f"the MCP server answered with error {leaf.code}{suffix}"
        if isinstance(leaf, httpx2.HTTPError):
            return f"HTTP error talking to the MCP server ({type(leaf).__name__})"
        if isinstance(leaf, OSError):
            return "the MCP server could not be started or reached"
    return f"unexpected error ({type(exc).__name__})"


class ResourceUnavailable(McpCallFailed):
    """A configured resource the server does not list, or a server without the resources capability."""
