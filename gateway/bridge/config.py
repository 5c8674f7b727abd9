"""YAML shape of the Bridge: `bridge: {enabled, database, connections, bridges}`."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote, urlsplit

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.bridge.limits import BridgeLimits
from gateway.bridge.naming import prefix_problems
from gateway.bridge.tenancy import may_hold
from gateway.secrets import SecretRef

_OWNER = re.compile(r"^(org:)?[^\s:]+$")
_PREFIX = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")


def _check_owner(value: str) -> str:
    if not _OWNER.match(value):
        raise ValueError("a user id, or 'org:<id>' for an org")
    return value


Owner = Annotated[str, AfterValidator(_check_owner)]
"""A user id, or `org:<id>` for an org."""


class ConnectionConfig(BaseModel):
    """An MCP server owned by a user (`owner: alice`) or an org (`owner: org:acme`) (F3).

    The id never contains `__`: that separator joins a connection id to a tool name in the
    federation (`<connectionId>__<tool>`), so the split back must be unambiguous.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$",
                    description="the connection's id: a letter, then up to 31 letters, digits, _ or - (never __)")
    owner: Owner = Field(description="who owns it: a user id (alice) or an org (org:acme)")
    endpoint: str = Field(pattern=r"^https?://", description="the MCP server's Streamable HTTP URL (http:// or https://)")
    authHeaderName: str | None = Field(
        default=None, description="the header the credential is sent in (with authSecret: nothing is sent without both)")
    authSecret: SecretRef | None = Field(
        default=None, description="that header's whole value (e.g. Bearer <token>), by reference (env:NAME or file:PATH)")
    prefix: str | None = Field(
        default=None,
        description="what its tools are listed under (<prefix>__<tool>); default its id; '' lists them as they are "
        "(allowed when no other connection can be seen with it)",
    )

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if "__" in value or value.endswith("_"):
            raise ValueError("a connection id may not contain '__' or end with '_' (reserved as the tool separator)")
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return value
        if not _PREFIX.match(value) or "__" in value or value.endswith("_"):
            raise ValueError("a prefix is '' or like an id: a letter, then letters, digits, '_' or '-' (at most 32), "
                             "no '__', not ending in '_'")
        return value

    @property
    def name_prefix(self) -> str:
        """`prefix`, or the id when none is given."""
        return self.id if self.prefix is None else self.prefix

    @model_validator(mode="after")
    def _auth_pair(self) -> "ConnectionConfig":
        if (self.authHeaderName is None) != (self.authSecret is None):
            raise ValueError("'authHeaderName' and 'authSecret' go together")
        return self


class BridgeDecl(BaseModel):
    """A bridge: an id, an owner, and the connections whose tools it federates."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$",
                    description="the bridge's id, served at /mcp/<id>: a letter or digit, then up to 63 letters, digits, _ or -")
    owner: Owner = Field(description="who owns it: a user id (alice) or an org (org:acme)")
    connections: list[str] = Field(default_factory=list, description="the ids of the connections whose tools it federates")


class AuditSpoolConfig(BaseModel):
    """`bridge.auditSpool`: where audit records the store cannot take wait on local disk (O4,
    gateway/bridge/spool.py). One folder per replica: two processes must never share one."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        default="./audit-spool", min_length=1,
        description="the spool's folder (relative to the config's folder); made if missing; one per replica",
    )
    maxBytes: int = Field(
        default=256 * 1024 * 1024, ge=64 * 1024,
        description="the most the spool's files may hold together; records beyond are dropped and counted (spool_full)",
    )


class BridgeConfig(BaseModel):
    """The `bridge:` section. `database` is a SQLite file (relative to the config's folder) or a
    PostgreSQL server shared by replicas (S1)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="serve the Bridge (/mcp, its REST API and the console)")
    database: str = Field(
        default="./toolgate.db",
        description="a SQLite file (a path, ':memory:' or sqlite:///path) or postgresql://user@host:port/db "
        "(its password in databasePassword)",
    )
    databasePassword: SecretRef | None = Field(
        default=None, description="the PostgreSQL role's password, by reference (env:NAME or file:PATH)"
    )
    databasePoolSize: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections per replica at most")
    connections: list[ConnectionConfig] = Field(
        default_factory=list, description="connections declared in the config (users add more through the API and console)")
    bridges: list[BridgeDecl] = Field(
        default_factory=list, description="bridges declared in the config (users add more through the API and console)")
    auditQueueSize: int = Field(
        default=10_000, ge=1, description="records waiting to be written; beyond: to the spool if there is one, else dropped"
    )
    auditSpool: AuditSpoolConfig | None = Field(
        default=None,
        description="keep audit records the store cannot take (store down, queue full) on local disk and write them "
        "when it returns (O4); unset: they are dropped and counted",
    )
    storeDownAtStart: Literal["exit", "serve"] = Field(
        default="exit",
        description="the store cannot be reached at start: 'exit' (toolgate serve fails) or 'serve' (chat routes are "
        "served, the Bridge answers 503 and /readyz/bridge 503 until the store is reached; retried with backoff)",
    )
    toolListTtlSeconds: float = Field(default=30.0, ge=0, description="how long a connection's tool list is reused")
    sessionIdleSeconds: float = Field(
        default=300.0, gt=0, description="a caller's upstream session of a connection is closed this long after its last call (F15)"
    )
    allowedHosts: list[str] = Field(
        default_factory=list, description="Host values accepted on /mcp (DNS-rebinding protection); empty: any"
    )
    limits: BridgeLimits = Field(default_factory=BridgeLimits, description="bounds on graphs, pipeline values, sessions")
    apiEndpointAllowList: list[str] = Field(
        default_factory=list,
        description="URLs (scheme://host[:port][/path]) that connections made through the REST API may use; empty: any",
    )

    secretKey: SecretRef | None = Field(
        default=None,
        description="reference (env:NAME or file:PATH) to the key that seals credentials written once through the "
        "REST API or the console; unset: the API takes no credentials",
    )
    apiEndpointAllowPrivate: list[str] = Field(
        default_factory=list,
        description="networks (CIDR) REST-made connections may reach although they are loopback, private, "
        "link-local or this host's own (e.g. 127.0.0.0/8 for a local setup); empty: none",
    )

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        if "://" not in value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("sqlite", "postgresql", "postgres"):
            raise ValueError(f"{parts.scheme}://: expected a file path, sqlite:///path or postgresql://user@host:port/db")
        if parts.scheme != "sqlite":
            if parts.password is not None:
                raise ValueError("no password in the URL: give it by reference in bridge.databasePassword")
            if not parts.hostname or parts.path in ("", "/"):
                raise ValueError("expected postgresql://user@host:port/db (a host and a database)")
        return value

    @field_validator("apiEndpointAllowPrivate")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r}: expected a network in CIDR form, e.g. 127.0.0.0/8 or 10.0.5.0/24") from None
        return values

    @field_validator("apiEndpointAllowList")
    @classmethod
    def _allow_list(cls, values: list[str]) -> list[str]:
        for value in values:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{value!r}: expected an http(s) URL with a host")
        return values

    def api_endpoint_allowed(self, endpoint: str) -> bool:
        """May a connection made through the REST API point at `endpoint`? Config-declared
        connections are the operator's and are not checked. Matches scheme, host and port exactly,
        and the path by whole segments (`https://h/mcp` allows `https://h/mcp/x`, not `https://h/mcpx`)."""
        if not self.apiEndpointAllowList:
            return True
        target = _url_key(endpoint)
        if target is None:
            return False
        for allowed in self.apiEndpointAllowList:
            key = _url_key(allowed)
            if key is None or key[:3] != target[:3]:
                continue
            prefix = key[3].rstrip("/")
            if target[3] == prefix or target[3].startswith(prefix + "/"):
                return True
        return False

    @model_validator(mode="after")
    def _org_bridges_hold_org_connections(self) -> "BridgeConfig":
        owners = {c.id: c.owner for c in self.connections}
        for bridge in self.bridges:
            foreign = [c for c in bridge.connections if c in owners and not may_hold(bridge.owner, owners[c])]
            if foreign:
                raise ValueError(
                    f"bridge {bridge.id} belongs to {bridge.owner}: it may hold only that org's connections, "
                    f"not {', '.join(foreign)}"
                )
        return self

    @model_validator(mode="after")
    def _unique(self) -> "BridgeConfig":
        for kind, ids in (("connection", [c.id for c in self.connections]), ("bridge", [b.id for b in self.bridges])):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            if dup:
                raise ValueError(f"{kind} ids must be unique: {', '.join(dup)}")
        problems = prefix_problems([(c.id, c.owner, c.name_prefix) for c in self.connections])
        by_id = {c.id: c for c in self.connections}
        for bridge in self.bridges:
            members = [by_id[c] for c in bridge.connections if c in by_id]
            problems += [f"bridge {bridge.id}: {p}" for p in
                         prefix_problems([(c.id, c.owner, c.name_prefix) for c in members], same_caller=True)]
        if problems:
            raise ValueError("tool names could collide: " + "; ".join(dict.fromkeys(problems)))
        return self


def _url_key(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path) of an http(s) URL, or None when it is not one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if any(segment in (".", "..") for segment in unquote(parts.path).split("/")):
        return None  # a dot segment could climb out of an allowed path
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80), parts.path or "/"
