"""Server-side sessions of the web console (C1): who a browser is signed in as, and its CSRF token.

A session is created once the browser has proven an identity (an API key checked by the gateway's
`Authenticator`, or a sign-in through the authorization server) and lives in this process only:

    sessions = ConsoleSessions(idle_seconds=1800, max_sessions=10_000, per_identity=10)
    session = sessions.create(identity)             # after a successful sign-in (ConsoleFull: 503)
    sessions.set_cookie(response, session, request) # HttpOnly, SameSite=Strict, Secure over TLS
    identity = sessions.identity_of(request)        # None without a live session; 403 on a bad CSRF token
    sessions.end(request, response)                 # sign-out

The cookie carries only a random id (256 bits); the table is keyed by its SHA-256, so neither a
log line nor a memory dump of the table yields a usable cookie. Sessions expire after
`idle_seconds` without use and `max_age_seconds` after sign-in.

Bounds, so that no one can sign anyone else out: each identity (the caller as the Bridge counts
callers, `caller_key`) holds at most `per_identity` sessions — its next sign-in ends *its own*
least recently used one. The whole table holds at most `max_sessions`; when it is full of live
sessions, a new sign-in ends the identity's own oldest session if it has one, and is otherwise
refused (`ConsoleFull`, 503): another identity's session is never dropped for it.

CSRF: every request whose method is not GET/HEAD/OPTIONS must carry the session's token in the
`X-CSRF-Token` header (a synchronizer token: the server keeps it, the page receives it in a
`<meta>` element and the console's script sends it back). A cross-site page can neither read the
token nor set the header, and the cookie is `SameSite=Strict` besides.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection
from starlette.responses import Response

from gateway.bridge.sessions import Binding, caller_key
from gateway.errors import Forbidden, Unavailable
from gateway.identity import Identity

COOKIE_NAME = "toolgate_console"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSIONS_PER_IDENTITY = 10
"""Sessions one identity holds at once (browsers, profiles); its next sign-in ends its own oldest."""
MAX_SESSIONS = 10_000
"""Sessions of everyone together; beyond, a new sign-in gets 503 until sessions end or expire."""


class CsrfRefused(Forbidden):
    """A state-changing request of a console session without its CSRF token (403)."""

    code = "csrf_token_invalid"


class ConsoleFull(Unavailable):
    """The session table is full of live sessions of others (503): a new sign-in waits for some to end."""

    code = "console_sessions_full"


@dataclass
class ConsoleSession:
    """One signed-in browser. `id` is the cookie value: it is never logged or rendered."""

    id: str = field(repr=False)
    identity: Identity
    owner: Binding
    """Whose session it is, for the per-identity bound (`caller_key` of `identity`)."""
    csrf_token: str = field(repr=False)
    created: float
    last_used: float
    ends: float
    """When it ends however much it is used (the table's clock): its maximum age, or sooner when
    the credential it was signed in with expires sooner."""


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def is_tls(request: HTTPConnection) -> bool:
    """True when the browser reached us over TLS (directly, or as uvicorn's proxy headers say)."""
    return request.url.scheme in ("https", "wss")


class ConsoleSessions:
    """The console's session table: create (bounded per identity and in all), look up (with idle
    and age expiry), end."""

    def __init__(
        self, *, idle_seconds: float = 1800.0, max_age_seconds: float = 12 * 3600.0, max_sessions: int = MAX_SESSIONS,
        per_identity: int = SESSIONS_PER_IDENTITY,
        clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if idle_seconds <= 0 or max_age_seconds <= 0 or max_sessions < 1 or per_identity < 1:
            raise ValueError("idle_seconds and max_age_seconds must be positive, max_sessions and per_identity at least 1")
        self.idle_seconds = idle_seconds
        self.max_age_seconds = max_age_seconds
        self.max_sessions = max_sessions
        self.per_identity = per_identity
        self._clock = clock
        self._wall_clock = wall_clock
        self._table: OrderedDict[str, ConsoleSession] = OrderedDict()  # least recently used first
        self._owned: dict[Binding, OrderedDict[str, None]] = {}  # each identity's keys, least recently used first

    def __len__(self) -> int:
        return len(self._table)

    def create(self, identity: Identity, expires_at: float | None = None) -> ConsoleSession:
        """A new session for a proven `identity`. Past `per_identity` (or with the table full), that
        identity's own least recently used session ends; with the table full of others' live
        sessions, `ConsoleFull`.
        `expires_at` (epoch seconds): when the credential the browser signed in with expires — a
        token pasted into the sign-in form: the session must not outlive it."""
        now = self._clock()
        self._expire(now)
        owner = caller_key(identity)
        own = self._owned.get(owner)
        while own and len(own) >= self.per_identity:
            self._drop(next(iter(own)))
        if len(self._table) >= self.max_sessions:
            self._expire_aged(now)
        if len(self._table) >= self.max_sessions:
            if not own:
                raise ConsoleFull("the console holds as many sessions as it can; sign in again when some have ended")
            self._drop(next(iter(own)))  # full: the identity makes room with its own oldest, never another's
        lifetime = self.max_age_seconds
        if expires_at is not None:
            lifetime = min(lifetime, expires_at - self._wall_clock())
        session = ConsoleSession(
            secrets.token_urlsafe(32), identity, owner, secrets.token_urlsafe(32), now, now, now + lifetime
        )
        key = _key(session.id)
        self._table[key] = session
        self._owned.setdefault(owner, OrderedDict())[key] = None
        return session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie value (its idle clock restarts), or None."""
        if not session_id or len(session_id) > 128:
            return None
        now = self._clock()
        key = _key(session_id)
        session = self._table.get(key)
        if session is None:
            return None
        if now - session.last_used > self.idle_seconds or now > session.ends:
            self._drop(key)
            return None
        session.last_used = now
        self._table.move_to_end(key)
        self._owned[session.owner].move_to_end(key)
        return session

    def session_of(self, request: HTTPConnection) -> ConsoleSession | None:
        """The session named by the request's cookie, or None."""
        return self.get(request.cookies.get(COOKIE_NAME))

    def identity_of(self, request: HTTPConnection) -> Identity | None:
        """The identity of a request made by a signed-in console page: None without a live session;
        `CsrfRefused` (403) when a state-changing request lacks the session's CSRF token."""
        session = self.session_of(request)
        if session is None:
            return None
        if request.scope.get("method", "GET") not in SAFE_METHODS:
            check_csrf(session, request.headers.get(CSRF_HEADER))
        return session.identity

    def set_cookie(self, response: Response, session: ConsoleSession, request: HTTPConnection) -> None:
        """Hand the session to the browser: HttpOnly, SameSite=Strict, Secure when served over TLS,
        path-wide (the console's script calls the REST API at `/bridges`, `/connections`, `/audit`)."""
        response.set_cookie(
            COOKIE_NAME, session.id, httponly=True, samesite="strict", secure=is_tls(request), path="/"
        )

    def discard(self, request: HTTPConnection) -> None:
        """Forget the request's session, if any (a new sign-in replaces it: no session fixation)."""
        session_id = request.cookies.get(COOKIE_NAME)
        if session_id and len(session_id) <= 128:
            self._drop(_key(session_id))

    def end(self, request: HTTPConnection, response: Response) -> None:
        """Sign out: forget the request's session and clear its cookie."""
        self.discard(request)
        response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict", secure=is_tls(request))

    def _drop(self, key: str) -> None:
        session = self._table.pop(key, None)
        if session is None:
            return
        own = self._owned[session.owner]
        del own[key]
        if not own:
            del self._owned[session.owner]

    def _expire(self, now: float) -> None:
        # the table is in order of last use: the idle ones are at its front
        while self._table:
            key, oldest = next(iter(self._table.items()))
            if now - oldest.last_used <= self.idle_seconds:
                return
            self._drop(key)

    def _expire_aged(self, now: float) -> None:
        # sessions past their maximum age may sit anywhere in the table: swept only when it is full
        for key in [key for key, session in self._table.items() if now > session.ends]:
            self._drop(key)


def check_csrf(session: ConsoleSession, presented: str | None) -> None:
    """Raise `CsrfRefused` unless `presented` is the session's token (compared in constant time)."""
    if not presented or not hmac.compare_digest(presented.encode("utf-8"), session.csrf_token.encode("utf-8")):
        raise CsrfRefused(f"this request changes something: send the console session's token in {CSRF_HEADER}")
