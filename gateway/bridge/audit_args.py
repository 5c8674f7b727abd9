"""What an audit record keeps of a call (F4): identifiers, never free text or secrets.

Values under identifier keys (`owner`, `repo`, `path`, `query`, `cloudId`, `id`, keys ending in
`Id`/`_id`, ...) are kept when they are short scalars that do not look like a credential; every
other value becomes its type and length (`{"type": "string", "length": 42}`), so a token or a
message body is never stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

IDENTIFIER_KEYS = frozenset(
    k.lower()
    for k in (
        "owner", "repo", "repository", "path", "query", "cloudId", "id", "ids", "org", "organization",
        "project", "projectKey", "issueKey", "spaceKey", "pageId", "branch", "ref", "sha", "number",
        "issue_number", "pull_number", "page", "perPage", "per_page", "limit", "cursor", "user", "username",
        "team", "channel", "workspace", "site", "database", "table", "bucket", "key_path", "language", "state",
    )
)
_ID_SUFFIX = re.compile(r"(Id|_id|Ids|_ids)$")
_SECRET_KEY = re.compile(r"(token|secret|passw|pwd|api_?key|apikey|auth|credential|cookie|session|private)", re.I)
_CREDENTIAL_VALUE = re.compile(
    r"^(Bearer\s|Basic\s|gh[pousr]_|github_pat_|sk-|xox[abpr]-|AKIA|eyJ[a-zA-Z0-9_-]{8,}\.)|-----BEGIN", re.I
)
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_\-]{32,}$")
MAX_KEPT = 256

_MUTATING_VERBS = frozenset(
    (
        "create", "update", "delete", "remove", "merge", "push", "write", "edit", "set", "add", "put", "post",
        "patch", "move", "rename", "close", "reopen", "commit", "upload", "send", "assign", "transition",
        "archive", "publish", "fork", "insert", "replace", "drop", "destroy", "revoke", "approve", "comment",
        "upsert", "submit", "execute", "run", "trigger", "deploy", "cancel", "lock", "unlock", "invite",
    )
)
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


Scrub = Callable[[str], str]
"""Replaces known secret values in a text (`SecretSet.scrub`); a value it changes holds a secret."""


def reduce_args(args: Mapping[str, Any] | None, scrub: Scrub | None = None) -> dict[str, Any]:
    """The audit form of a call's arguments."""
    return {str(key): _reduce(str(key), value, scrub) for key, value in (args or {}).items()}


def _reduce(key: str, value: Any, scrub: Scrub | None) -> Any:
    if _is_identifier(key) and _keepable(value, scrub):
        return value
    return shape_of(value)


def _is_identifier(key: str) -> bool:
    if _SECRET_KEY.search(key):
        return False
    return key.lower() in IDENTIFIER_KEYS or bool(_ID_SUFFIX.search(key))


def _keepable(value: Any, scrub: Scrub | None) -> bool:
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if not isinstance(value, str) or len(value) > MAX_KEPT:
        return False
    if _CREDENTIAL_VALUE.search(value) or _OPAQUE.match(value):
        return False
    return scrub is None or scrub(value) == value


def shape_of(value: Any) -> dict[str, Any]:
    """Type and length of a value, nothing of its content."""
    if isinstance(value, str):
        return {"type": "string", "length": len(value)}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, (int, float)):
        return {"type": "number"}
    if isinstance(value, Mapping):
        return {"type": "object", "length": len(value)}
    if isinstance(value, (list, tuple)):
        return {"type": "array", "length": len(value)}
    if value is None:
        return {"type": "null"}
    return {"type": type(value).__name__}


def is_mutating(tool_name: str) -> bool:
    """True for writing tools: a word of the name is a writing verb (`create_issue`, `mergePullRequest`)."""
    words = {w.lower() for w in _WORDS.findall(tool_name)}
    return bool(words & _MUTATING_VERBS)
