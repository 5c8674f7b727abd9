"""YAML shape of the Bridge: `bridge: {enabled, database, connections, bridges}`."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.secrets import SecretRef

_OWNER = re.compile(r"^(org:)?[^\s:]+$")


class ConnectionConfig(BaseModel):
    """An MCP server owned by a user (`owner: alice`) or an org (`owner: org:acme`) (F3).

    The id never contains `__`: that separator joins a connection id to a tool name in the
    federation (`<connectionId>__<tool>`), so the split back must be unambiguous.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    owner: str
    endpoint: str = Field(pattern=r"^https?://")
    authHeaderName: str | None = None
    authSecret: SecretRef | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if "__" in value or value.endswith("_"):
            raise ValueError("a connection id may not contain '__' or end with '_' (reserved as the tool separator)")
        return value

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        if not _OWNER.match(value):
            raise ValueError("a user id, or 'org:<id>' for an org")
        return value

    @model_validator(mode="after")
    def _auth_pair(self) -> "ConnectionConfig":
        if (self.authHeaderName is None) != (self.authSecret is None):
            raise ValueError("'authHeaderName' and 'authSecret' go together")
        return self


class BridgeDecl(BaseModel):
    """A bridge: an id, an owner, and the connections whose tools it federates."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$")
    owner: str
    connections: list[str] = Field(default_factory=list)

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        if not _OWNER.match(value):
            raise ValueError("a user id, or 'org:<id>' for an org")
        return value


class BridgeConfig(BaseModel):
    """The `bridge:` section. `database` is a SQLite file, relative to the config's folder."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    database: str = "./toolgate.db"
    connections: list[ConnectionConfig] = Field(default_factory=list)
    bridges: list[BridgeDecl] = Field(default_factory=list)
    auditQueueSize: int = Field(default=10_000, ge=1, description="records waiting to be written; beyond: dropped")
    toolListTtlSeconds: float = Field(default=30.0, ge=0, description="how long a connection's tool list is reused")
    allowedHosts: list[str] = Field(
        default_factory=list, description="Host values accepted on /mcp (DNS-rebinding protection); empty: any"
    )

    @model_validator(mode="after")
    def _unique(self) -> "BridgeConfig":
        for kind, ids in (("connection", [c.id for c in self.connections]), ("bridge", [b.id for b in self.bridges])):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            if dup:
                raise ValueError(f"{kind} ids must be unique: {', '.join(dup)}")
        return self
