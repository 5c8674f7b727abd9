"""`GET /audit`: the caller's own audit records, filtered by time range, action, resource, status;
with them, the changes others made to connections the caller owns or whose org they are in (a
member who points an org's connection elsewhere moves every member's calls and its credential).

Query parameters: `since`, `until` (ISO 8601, or seconds since the epoch), `action`, `resource`,
`scope` (`federation`, `bridge:<id>`, `connection:<id>`), `status`, `limit` (1–1000, default 100),
`before` (a record's `seq`: only older records — the next page). Newest first.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.bridge.api_support import Authenticate, caller_of, rendered
from gateway.bridge.audit_args import Scrub
from gateway.bridge.records import AuditQuery
from gateway.bridge.store import BridgeStore
from gateway.errors import BadRequest

_EPOCH = re.compile(r"[0-9]+(\.[0-9]*)?")


def parse_time(value: str | None) -> float | None:
    """Seconds since the epoch from an ISO 8601 time (UTC when no zone is given) or a finite number."""
    if value is None or value == "":
        return None
    if _EPOCH.fullmatch(value):
        return float(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time or epoch seconds: {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


class AuditApi:
    """`GET /audit` over the store."""

    def __init__(self, store: BridgeStore, authenticate: Authenticate, *, scrub: Scrub) -> None:
        self._scrub = scrub
        self._store = store
        self._auth = authenticate

    def routes(self) -> list[BaseRoute]:
        """The one route."""
        return [Route("/audit", rendered(self.list_audit, self._scrub), methods=["GET"])]

    async def list_audit(self, request: Request) -> Response:
        """GET /audit: the caller's own records and others' changes to the caller's connections, newest first."""
        caller = await caller_of(request, self._auth)
        params = request.query_params
        try:
            since, until = parse_time(params.get("since")), parse_time(params.get("until"))
            limit = int(params.get("limit", "100"))
            before = int(params["before"]) if params.get("before") else None
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be between 1 and 1000")
        if before is not None and not 0 <= before < 2**63:
            raise BadRequest("before must be a record's seq")
        query = AuditQuery(
            actor_id=caller.actor_id,
            owners=caller.owners,
            since=since,
            until=until,
            action=params.get("action"),
            resource=params.get("resource"),
            status=params.get("status"),
            scope=params.get("scope"),
            before=before,
            limit=limit,
        )
        records = await self._store.query_audit(query)
        return JSONResponse({"data": [r.public() for r in records]})
