"""Configuration of one mcp_bridge node; keys are exactly the names of SPEC B."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.secrets import SecretRef
from plugins.mcp_bridge.templating import PREFETCH_TOKENS, RESULT_TOKENS, unknown_tokens

_ID = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")


def _known_tokens(value: Any, known: tuple[str, ...]) -> Any:
    """`value`, or an error naming its first unknown `{{token}}` (a misspelling is never sent as written)."""
    unknown = unknown_tokens(value, known)
    if unknown:
        raise ValueError(f"unknown template token {unknown[0]}; the tokens are " + ", ".join("{{" + n + "}}" for n in known))
    return value


class McpBridgeConfig(BaseModel):
    """One MCP server offered to the model (B1–B19)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mcp_bridge"] = Field(description="always `mcp_bridge`")
    id: str = Field(default="mcp", description="node name: used in metrics and tool-name prefixes, the `server` an"
                    " inspector sees; unique within a chain")
    endpoint: str | None = Field(default=None, description="URL of the MCP server (Streamable HTTP); exactly one of"
                                 " `endpoint` or `command`")
    command: list[str] | None = Field(default=None, min_length=1, description="stdio server: argv to start (a first word"
                                      " `python`/`python3` is the gateway's own interpreter); one child process per session")
    authHeaderName: str | None = Field(default=None, description="the header that carries the server's credential"
                                       " (HTTP only); goes with `authSecret`")
    authSecret: SecretRef | None = Field(default=None, description="the header's value, by reference; read once at"
                                         " start, never logged or returned")
    toolFilter: list[str] = Field(default_factory=list, description="the tools the model may see and call; empty: all."
                                  " A call to another is answered with an error without reaching the server")
    resources: str | list[str] = Field(default="", description="MCP resources read on every request and injected into"
                                       " the last user message: URIs or names, one per line (or a list)")
    prefetchTool: str | None = Field(default=None, description="a tool the gateway calls itself before the first model"
                                     " call (when the last user message is not empty); must be in `toolFilter` if set")
    prefetchArguments: dict[str, Any] = Field(default_factory=dict, description="the prefetch tool's arguments, with"
                                              " tokens such as `{{last_user_message}}` substituted")
    prefetchLabel: str | None = Field(default=None, description="title of the injected prefetch block; default: the"
                                      " tool's name")
    prefetchResultTemplate: str = Field(default="{{result}}", description="wraps the prefetch result; `{{result}}` is"
                                        " the tool's text")
    timeoutSeconds: float = Field(default=30, gt=0, le=3600, description="the longest one MCP call (tool call,"
                                  " resource read, listing) or the session set-up may take")
    maxConsecutiveToolCalls: int = Field(default=10, ge=0, le=1000, description="the cap on the tool loop (parallel"
                                         " calls each count); at the cap one last model call runs with tools disabled"
                                         " and the response says `tool_cap_reached`; with several plugins the smallest"
                                         " cap applies")
    protocol: Literal["auto", "legacy"] = Field(
        default="auto",
        description="auto: stateless 2026-07-28 when the server speaks it, else a 2025-11-25 session; "
        "legacy: always the 2025-11-25 handshake with an Mcp-Session-Id session",
    )
    sessionIdleSeconds: float = Field(default=300, gt=0, description="pooled session lifetime after its last call (B14)")
    resultBytes: int = Field(
        default=64 * 1024 * 1024, ge=1024,
        description="largest answer read from the server (one JSON-RPC message as sent: a JSON body or one event); "
        "cut while it is read, the call fails and the session is kept",
    )
    readOnlyTools: list[str] = Field(
        default_factory=list, description="tools that only read and reach nothing outside the server: prompt_guard's "
        "firewall never holds them, whatever the server's annotations say (T2)")
    sideEffectTools: list[str] = Field(
        default_factory=list, description="tools treated as side-effecting whatever the server's annotations say (T2)")
    trustedSources: list[str] = Field(
        default_factory=list, description="tools and resources (URI or name) whose results the firewall trusts like "
        "the client's own words: e.g. an address book or the user's own profile (T3)")

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError("a short name: a letter, then letters, digits, '_' or '-' (at most 32)")
        return value

    @field_validator("prefetchArguments", mode="before")
    @classmethod
    def _arguments_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"JSON object text: {exc.msg} at position {exc.pos}") from None
        if not isinstance(value, dict):
            raise ValueError("a JSON object")
        return value

    @field_validator("prefetchArguments")
    @classmethod
    def _argument_tokens(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _known_tokens(value, PREFETCH_TOKENS)

    @field_validator("prefetchResultTemplate")
    @classmethod
    def _result_tokens(cls, value: str) -> str:
        return _known_tokens(value, RESULT_TOKENS)

    @model_validator(mode="after")
    def _check(self) -> "McpBridgeConfig":
        if (self.endpoint is None) == (self.command is None):
            raise ValueError("exactly one of 'endpoint' (Streamable HTTP URL) or 'command' (stdio argv)")
        if self.endpoint is not None and not re.match(r"^https?://", self.endpoint):
            raise ValueError("'endpoint' must be an http:// or https:// URL")
        if (self.authHeaderName is None) != (self.authSecret is None):
            raise ValueError("'authHeaderName' and 'authSecret' go together")
        if self.prefetchTool and self.toolFilter and self.prefetchTool not in self.toolFilter:
            raise ValueError(f"prefetchTool {self.prefetchTool!r} is not in toolFilter (B9)")
        both = sorted(set(self.readOnlyTools) & set(self.sideEffectTools))
        if both:
            raise ValueError(f"tools listed both in readOnlyTools and sideEffectTools: {', '.join(both)}")
        return self

    @property
    def resource_list(self) -> list[str]:
        """`resources`, one per line (or a YAML list), blanks dropped."""
        lines = self.resources.splitlines() if isinstance(self.resources, str) else self.resources
        return [line.strip() for line in lines if line.strip()]
