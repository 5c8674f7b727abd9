"""Conversation keys (G4): what pools MCP sessions, scoped by the caller's identity."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.identity import Identity

CONVERSATION_HEADER = "x-conversation-id"


def _hash(*parts: str | None) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()[:32]


def client_conversation_id(header: str | None, body: dict[str, Any]) -> str | None:
    """The id the client sent: header first, then `metadata.conversation_id`."""
    if header and header.strip():
        return header.strip()
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        value = metadata.get("conversation_id")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _first_message(messages: list[Any]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") in ("user", "system", "developer"):
            return json.dumps(message.get("content"), sort_keys=True, ensure_ascii=False)
    return ""


def conversation_key(identity: Identity, client_id: str | None, messages: list[Any]) -> str | None:
    """A stable key for this conversation, or None when nothing may be pooled.

    - A client-sent id is scoped by user and org, and for a caller with no user id also by the
      fingerprint of its credential: two JWTs or API keys that name only an org are two callers,
      and two callers sending the same id never share a key (G4).
    - Otherwise the key is derived from user, org, the credential fingerprint and the first
      message, only when a user or an org is known.
    """
    if client_id is not None:
        scope_fp = identity.credential_fp if identity.user_id is None else None
        return "c-" + _hash("client", identity.user_id, identity.org_id, scope_fp, client_id)
    if identity.is_anonymous:
        return None
    return "d-" + _hash("derived", identity.user_id, identity.org_id, identity.credential_fp, _first_message(messages))
