"""YAML shape of the Bridge: `bridge: {enabled, database, connections, bridges}`."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.secrets import SecretRef

_OWNER = re.compile(r"^(org:)?[^\s:]+$")


class ConnectionConfig(BaseModel):
    """An MCP server owned by a user (`owner: alice`) or an org (`owner: org:acme`) (F3)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    owner: str
    endpoint: str = Field(pattern=r"^https?://")
    authHeaderName: str | None = None
    authSecret: SecretRef | None = None

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        if not _OWNER.match(value):
            raise ValueError("a user id, or 'org:<id>' for an org")
        return value


class BridgeDecl(BaseModel):
    """A bridge: an id, an owner, and the connections whose tools it federates."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$")
    owner: str
    connections: list[str] = Field(default_factory=list)


class BridgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    database: str = "./toolgate.db"
    connections: list[ConnectionConfig] = Field(default_factory=list)
    bridges: list[BridgeDecl] = Field(default_factory=list)
