"""Which caller owns which Bridge MCP session, and how many each caller may hold open.

The SDK's session manager keeps one global table (`bridge.limits.sessions`, 503 beyond it). In
front of it this table binds each session to the caller and bridge that opened it, and caps each
caller at `sessionsPerCaller`: a caller opening one more session closes *its own* least recently
used one, so one caller can neither fill the global table nor ever evict another caller's live
session. At most `sessionsPerCaller` opening requests of one caller are served at once (429 beyond),
so a burst of concurrent opens passes the cap by that much at most, and only until they end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.identity import Identity

Binding = tuple[str | tuple[str, str] | None, ...]
"""(kind, caller key, org, bridge (owner, id)): who opened a session and on which door."""


def caller_key(identity: Identity) -> Binding:
    """Who a caller is, for everything the Bridge keeps or bounds per caller: the user (with its
    org), else the credential itself — two credentials that name only an org, or none, are two
    callers (G4), never one by org alone. With `auth.mode: none` (the identity then carries its
    client address) the address: there any bearer string is accepted, so counting by it would give
    one client as many callers, and as many sessions and outbound slots, as strings it makes up."""
    if identity.client_address is not None:
        return ("address", identity.client_address, None)
    if identity.user_id is None:
        return ("credential", identity.credential_fp, identity.org_id)
    return ("user", identity.user_id, identity.org_id)


def caller_of(binding: Binding) -> Binding:
    """The caller part of a binding (the bridge left out): the unit the per-caller cap counts."""
    return binding[:-1]


class TooManyOpening(Exception):
    """The caller already has `sessionsPerCaller` sessions being opened right now."""


@dataclass
class _Caller:
    live: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Session ids, least recently used first."""
    opening: int = 0


class SessionTable:
    """Session id → binding, plus each caller's sessions in use order."""

    def __init__(self, per_caller: int) -> None:
        self._per_caller = per_caller
        self._bindings: dict[str, Binding] = {}
        self._callers: dict[Binding, _Caller] = {}

    def __len__(self) -> int:
        return len(self._bindings)

    def owner(self, session_id: str) -> Binding | None:
        """The binding of a session this table holds, or None."""
        return self._bindings.get(session_id)

    def touch(self, session_id: str) -> None:
        """The session was used: it becomes its caller's most recently used."""
        binding = self._bindings.get(session_id)
        if binding is not None:
            self._callers[caller_of(binding)].live.move_to_end(session_id)

    def begin_open(self, binding: Binding) -> None:
        """Count a request that may open a session. Raises `TooManyOpening` when the caller
        already has `sessionsPerCaller` of them in flight."""
        caller = self._callers.setdefault(caller_of(binding), _Caller())
        if caller.opening >= self._per_caller:
            raise TooManyOpening(f"{caller.opening} sessions are being opened by this caller")
        caller.opening += 1

    def end_open(self, binding: Binding, session_id: str | None, alive: Callable[[str], bool]) -> list[str]:
        """The request ended; `session_id` is the session it opened (None: none, e.g. a stateless
        request or a refused one). Returns the caller's own sessions to close to stay within the
        cap, least recently used first (sessions the SDK expired meanwhile are just forgotten)."""
        key = caller_of(binding)
        caller = self._callers.setdefault(key, _Caller())
        caller.opening = max(0, caller.opening - 1)
        if session_id is not None and session_id not in self._bindings:
            self.bind(session_id, binding)
        evicted: list[str] = []
        if len(caller.live) > self._per_caller:
            for stale in [s for s in caller.live if s != session_id and not alive(s)]:
                caller.live.pop(stale)
                self._bindings.pop(stale, None)
            while len(caller.live) > self._per_caller:
                oldest = next(iter(caller.live))
                caller.live.pop(oldest)
                self._bindings.pop(oldest, None)
                evicted.append(oldest)
        if not caller.live and not caller.opening:
            self._callers.pop(key, None)
        return evicted

    def bind(self, session_id: str, binding: Binding) -> None:
        """Record a session the SDK just minted (as its response starts, before the client can use it)."""
        self._bindings[session_id] = binding
        self._callers.setdefault(caller_of(binding), _Caller()).live[session_id] = None

    def forget(self, session_id: str) -> None:
        """Drop a session (deleted by its client, evicted, or expired)."""
        binding = self._bindings.pop(session_id, None)
        if binding is None:
            return
        key = caller_of(binding)
        caller = self._callers.get(key)
        if caller is not None:
            caller.live.pop(session_id, None)
            if not caller.live and not caller.opening:
                del self._callers[key]

    def prune(self, alive: Callable[[str], bool]) -> None:
        """Forget every session the SDK no longer holds (idle expiry happens there)."""
        for session_id in [s for s in self._bindings if not alive(s)]:
            self.forget(session_id)
