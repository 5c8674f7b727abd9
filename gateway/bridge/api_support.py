"""Shared pieces of the Bridge's REST routes: authentication, JSON bodies, error rendering."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.body import parse_json, read_body
from gateway.bridge.audit_args import Scrub
from gateway.bridge.federation import CallerScope, owners_of
from gateway.bridge.records import AuditAction, AuditRecord, BridgeRecord
from gateway.bridge.store import BridgeStore
from gateway.bridge.tenancy import named
from gateway.errors import BadRequest, Forbidden, GatewayError, NotFound, error_response
from gateway.identity import Identity

Authenticate = Callable[[Request], Awaitable[Identity]]
Endpoint = Callable[[Request], Awaitable[Response]]

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest REST body read (the MCP endpoint's own limit too); beyond it: 413, read no further."""


class Conflict(GatewayError):
    """The id is taken, or the thing was declared in the YAML config and is managed there."""

    status, type, code = 409, "invalid_request_error", "conflict"


def rendered(fn: Endpoint, scrub: Scrub) -> Endpoint:
    """Render `GatewayError`s with the gateway's one renderer (the OpenAI envelope, scrubbed of
    every resolved secret), so the routes work in any Starlette app."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except GatewayError as exc:
            return error_response(exc, scrub)

    return endpoint


async def caller_of(request: Request, authenticate: Authenticate) -> CallerScope:
    """Authenticate the request and return the caller's scope (raises `Unauthorized`)."""
    identity = await authenticate(request)
    return CallerScope(identity, owners_of(identity))


async def json_body(request: Request) -> Any:
    """The request body as JSON, or 400 saying why not (413 beyond `MAX_BODY_BYTES`, 408 when it
    stopped arriving, 400 when nested too deeply)."""
    return parse_json(await read_body(request, MAX_BODY_BYTES))


def object_body(data: Any, allowed: set[str]) -> dict[str, Any]:
    """A JSON object with only the `allowed` keys."""
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return data


MAX_ENDPOINT_CHARS = 2048
"""Longest connection endpoint taken through the API."""

_URL_UNSAFE = frozenset('<>"{}|\\^`')
"""Characters a URL never carries unescaped (RFC 3986): refused so that no page or log that shows an
endpoint has to trust its own escaping."""


def check_endpoint_url(endpoint: Any) -> None:
    """A connection endpoint sent to the REST API: an absolute http(s) URL with a host, in printable
    ASCII without spaces, `<>"{}|\\^` or backquotes, without `user:password@` (a credential goes in
    `authSecret`, sealed, never in a URL every member is shown). Raises 400 naming the field, not
    echoing the value."""
    if not isinstance(endpoint, str):
        raise BadRequest("endpoint: required, an http(s) URL")
    problem = None
    if len(endpoint) > MAX_ENDPOINT_CHARS:
        problem = f"at most {MAX_ENDPOINT_CHARS} characters"
    elif any(not (0x21 <= ord(c) <= 0x7E) or c in _URL_UNSAFE for c in endpoint):
        problem = "only printable ASCII; no spaces, control characters or any of < > \" { } | \\ ^ `"
    else:
        try:
            parts = urlsplit(endpoint)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
        except ValueError:
            parts = None
        if parts is None or not endpoint.startswith(("http://", "https://")) or not parts.hostname:
            problem = "an absolute http:// or https:// URL with a host"
        elif "@" in parts.netloc:
            problem = "no user or password in the URL (send a credential as authHeaderName + authSecret)"
    if problem is not None:
        raise BadRequest(f"endpoint: must be an http(s) URL: {problem}")


def owner_for(caller: CallerScope, requested: Any) -> str:
    """The owner of a new thing: `requested` if the caller may act for it, else the caller's own id."""
    if requested is None:
        return caller.owners[0]
    if not isinstance(requested, str) or requested not in caller.owners:
        raise Forbidden(f"you cannot create things for owner {requested!r}; yours: {', '.join(caller.owners)}")
    return requested


async def visible_bridge(store: BridgeStore, owners: tuple[str, ...], bridge_id: str) -> BridgeRecord:
    """The bridge `bridge_id` names for a caller acting for `owners` (tenancy.py: their own before
    their org's); another account's, like a missing one, is not found."""
    bridge = named(await store.find_bridges(owners, bridge_id), owners, bridge_id)
    if bridge is None:
        raise NotFound(f"bridge {bridge_id} not found")
    return bridge


def addressed(request: Request, owners: tuple[str, ...]) -> tuple[str, ...]:
    """The owners an item's path resolves its id among: the caller's (their own item before their
    org's, tenancy.py), or with `?owner=` only that one — how a caller names the org's item that
    an item of their own with the same id shadows. An owner the caller does not act for finds
    nothing (404, like any item of another account)."""
    owner = request.query_params.get("owner")
    if owner is None:
        return owners
    return (owner,) if owner in owners else ()


def change_record(caller: CallerScope, action: AuditAction, resource: str, args: dict[str, Any], started: float) -> AuditRecord:
    """The audit record of a change made through the REST API: who changed which bridge or
    connection (scope `bridge:<id>` or `connection:<id>`), with identifiers and counts only. A
    connection's change is also listed to its owner (`AuditRecord.owner`: `args["owner"]`)."""
    kind = "bridge" if action.startswith("bridge.") else "connection"
    return AuditRecord(
        ts=time.time(), action=action, actor_id=caller.actor_id, actor_email=caller.identity.email,
        resource=resource, scope=f"{kind}:{resource}", mutating=True, args=args, status="success",
        duration_ms=(time.perf_counter() - started) * 1000,
        owner=args["owner"] if kind == "connection" else None,  # every member sees a change to the org's connection
    )
