"""Who is calling: the result of authentication (G3)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Identity:
    """The caller as resolved at the edge.

    `credential_fp` is a SHA-256 fingerprint of the presented token (never the token itself);
    it lets anonymous-but-keyed callers be told apart without storing their secret.
    """

    user_id: str | None = None
    org_id: str | None = None
    display_name: str | None = None
    email: str | None = None
    credential_fp: str | None = None
    expires_at: float | None = field(default=None, compare=False)
    """When the credential that proved this identity expires (epoch seconds; None: it does not —
    an API key). Not part of who the caller is: two tokens of one user are the same caller."""
    client_address: str | None = field(default=None, compare=False)
    """Only with `auth.mode: none`, where a bearer string proves nothing: the address the request
    came from, which the Bridge's per-caller limits count by instead (sessions/`caller_key`)."""

    @property
    def is_anonymous(self) -> bool:
        return self.user_id is None and self.org_id is None


ANONYMOUS = Identity()
