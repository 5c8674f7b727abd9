"""Typed records that cross the store boundary: connections, bridges, audit entries, audit queries."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["config", "api"]
AuditAction = Literal[
    "mcp.tool_call", "mcp.pipeline_call",
    "bridge.create", "bridge.update", "bridge.delete", "bridge.graph_save",
    "connection.create", "connection.update", "connection.delete", "connection.tool_call",
]
AuditStatus = Literal["success", "failure"]
ItemKey = tuple[str, str]
"""(owner, id): what tells connections and bridges apart. Ids are per owner (tenancy.py), so every
store row, cache, pool and binding of one is keyed by both, never by the id alone."""


def item_label(key: ItemKey) -> str:
    """`owner/id`: how logs name a connection or bridge (two owners' `gh` read apart)."""
    return "/".join(key)


class Owned:
    """A connection or a bridge: an id unique among its owner's (not across owners)."""

    id: str
    owner: str

    @property
    def key(self) -> ItemKey:
        """(owner, id): unique across owners."""
        return (self.owner, self.id)

    @property
    def label(self) -> str:
        """How logs name it (`item_label`)."""
        return item_label(self.key)


@dataclass(frozen=True)
class ConnectionRecord(Owned):
    """An MCP server a user or org owns (F3). `auth_secret` is a reference (`env:`/`file:`), never a
    value. `prefix` names its tools in the federation (F15): None means its id, "" no prefix."""

    id: str
    owner: str
    endpoint: str
    auth_header_name: str | None = None
    auth_secret: str | None = None
    source: Source = "api"
    prefix: str | None = None

    @property
    def name_prefix(self) -> str:
        """The prefix its tools are listed under: `prefix`, or its id when none was given."""
        return self.id if self.prefix is None else self.prefix

    def public(self) -> dict[str, Any]:
        """What the REST API shows: no secret reference."""
        return {
            "id": self.id,
            "owner": self.owner,
            "endpoint": self.endpoint,
            "authHeaderName": self.auth_header_name,
            "prefix": self.name_prefix,
            "source": self.source,
        }


@dataclass(frozen=True)
class BridgeRecord(Owned):
    """A bridge: an id, an owner, and the ids of the connections it federates."""

    id: str
    owner: str
    connections: tuple[str, ...] = ()
    source: Source = "api"

    def public(self) -> dict[str, Any]:
        """What the REST API shows."""
        return {"id": self.id, "owner": self.owner, "connections": list(self.connections), "source": self.source}


@dataclass(frozen=True)
class AuditRecord:
    """One `tools/call` that reached the handler (F4). `args` is already reduced (see audit_args)."""

    ts: float
    action: AuditAction
    actor_id: str
    actor_email: str | None
    resource: str
    scope: str
    mutating: bool
    args: dict[str, Any]
    status: AuditStatus
    duration_ms: float
    seq: int | None = None
    owner: str | None = None
    """For a change to a connection: its owner (a user id or `org:<id>`). Every caller acting for
    that owner sees the record in their own listing (`AuditQuery.owners`), not only its actor: a
    member who changes an org's connection changes where every member's calls, and the credential
    it carries, go."""
    record_id: str | None = None
    """Unique per record, given by the audit writer (audit.py) when it is queued: a batch written
    again (replayed from the spool after a lost acknowledgement) is recognised and not stored twice
    (O4). Not shown by `public()`."""

    def public(self) -> dict[str, Any]:
        """JSON form for `GET /audit` and `toolgate audit list --json`."""
        return {
            "seq": self.seq,
            "ts": self.ts,
            "action": self.action,
            "actor": {"id": self.actor_id, "email": self.actor_email},
            "resource": self.resource,
            "scope": self.scope,
            "mutating": self.mutating,
            "args": self.args,
            "status": self.status,
            "duration_ms": round(self.duration_ms, 3),
        }


@dataclass(frozen=True)
class AuditQuery:
    """A filter over one actor's audit records; `None` fields do not filter."""

    actor_id: str | None
    owners: tuple[str, ...] = ()
    """With `actor_id`: also the records of changes others made to connections these owners own
    (`AuditRecord.owner`)."""
    since: float | None = None
    until: float | None = None
    action: str | None = None
    resource: str | None = None
    status: str | None = None
    scope: str | None = None
    before: int | None = None
    """Only records older than this `seq` (the next page of a newest-first listing)."""
    limit: int = 100


@dataclass(frozen=True)
class SavedGraph:
    """A bridge's graph as stored: the JSON, its version (1 for the first save, +1 for each save
    after; the REST API's ETag) and who saved it."""

    graph: dict[str, Any]
    version: int
    saved_by: str | None


def iso_utc(ts: float) -> str:
    """A Unix time as ISO 8601 in UTC with `Z` (millisecond precision)."""
    moment = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Health:
    """The last outcome of a listing, call or test on a connection by this gateway process (C8):
    `ok` when its server answered (a tool's error result or a JSON-RPC error is an answer), else why not."""

    ok: bool
    checked_at: float
    error: str | None = None

    def public(self) -> dict[str, Any]:
        """What `GET /connections` shows."""
        return {"ok": self.ok, "checkedAt": iso_utc(self.checked_at), "error": self.error}


@dataclass(frozen=True)
class GraphVersion:
    """One saved graph of a bridge as its version list shows it (C6): no graph, its size only."""

    version: int
    saved_at: float
    saved_by: str | None
    nodes: int
    edges: int

    def public(self) -> dict[str, Any]:
        """What `GET /bridges/{id}/graph/versions` shows."""
        return {"version": self.version, "savedAt": iso_utc(self.saved_at), "savedBy": self.saved_by,
                "nodes": self.nodes, "edges": self.edges}
