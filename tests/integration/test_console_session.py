"""The console's sessions (C1): API-key sign-in, the cookie's flags, CSRF on every change, the
Content-Security-Policy of its pages, sign-out, and that a session sees only its own account."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import httpx2
import jwt
import pytest
from starlette.requests import Request
from starlette.responses import Response

from gateway.console.once import OnceTable
from gateway.console.session import ConsoleFull, ConsoleSessions
from gateway.identity import Identity
from tests.support import canary
from tests.support.gateway import running_gateway, simple_config
from tests.support.upstream import ScriptedUpstream
from tests.support.waiting import wait_until


def console_config(upstream_url: str, tmp_path: Path) -> dict:
    return simple_config(
        upstream_url,
        auth={"mode": "api_keys", "api_keys": [
            {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme", "email": "alice@acme.test"},
            {"key_sha256": hashlib.sha256(canary.BOB_KEY.encode()).hexdigest(), "user_id": "bob"},
        ]},
        bridge={"enabled": True, "database": str(tmp_path / "bridge.db"), "apiEndpointAllowPrivate": ["127.0.0.0/8"]},
    )


def sign_in(http: httpx2.Client, key: str) -> httpx2.Response:
    page = http.get("/console")
    token = re.search(r'name="signin_token" value="([^"]+)"', page.text)
    assert token is not None
    return http.post("/console/signin", data={"signin_token": token.group(1), "api_key": key})


def csrf_of(http: httpx2.Client) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', http.get("/console").text)
    assert found is not None
    return found.group(1)


def test_sign_in_sets_a_strict_httponly_cookie_and_pages_carry_a_csp_without_inline_script(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        signin_page = http.get("/console")
        signed_in = sign_in(http, canary.ALICE_KEY)
        shell = http.get("/console")
    assert signin_page.status_code == 200 and 'name="api_key"' in signin_page.text
    csp = signin_page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console"
    cookie = next(v for v in signed_in.headers.get_list("set-cookie") if v.startswith("toolgate_console="))
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert "httponly" in flags and "samesite=strict" in flags and "secure" not in flags  # plain HTTP here
    assert shell.status_code == 200 and shell.headers["content-security-policy"] == csp
    assert "<script>" not in shell.text and canary.ALICE_KEY not in shell.text
    assert "alice@acme.test" in shell.text


def test_a_wrong_key_or_a_missing_signin_token_makes_no_session(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        wrong = sign_in(http, "not-a-key")
        forged = http.post("/console/signin", data={"signin_token": "guess", "api_key": canary.ALICE_KEY})
        listing = http.get("/bridges")
    assert wrong.status_code == 401 and "not accepted" in wrong.text and "toolgate_console=" not in wrong.headers.get("set-cookie", "")
    assert forged.status_code == 400 and "toolgate_console=" not in forged.headers.get("set-cookie", "")
    assert listing.status_code == 401


def test_rest_changes_with_the_session_cookie_need_its_csrf_token(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    body = {"id": "wiki", "endpoint": "http://127.0.0.1:9/mcp"}
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        sign_in(http, canary.ALICE_KEY)
        token = csrf_of(http)
        listed = http.get("/connections")
        without = http.post("/connections", json=body)
        wrong = http.post("/connections", json=body, headers={"x-csrf-token": "x" + token})
        made = http.post("/connections", json=body, headers={"x-csrf-token": token})
        audit = http.get("/audit")
    assert listed.status_code == 200 and listed.json() == {"data": []}
    assert without.status_code == 403 and without.json()["error"]["code"] == "csrf_token_invalid"
    assert wrong.status_code == 403
    assert made.status_code == 201 and made.json()["owner"] == "alice"
    assert [r["action"] for r in audit.json()["data"]] == ["connection.create"]


def test_a_session_sees_only_its_own_account(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, \
            httpx2.Client(base_url=gw.url) as alice, httpx2.Client(base_url=gw.url) as bob:
        sign_in(alice, canary.ALICE_KEY)
        sign_in(bob, canary.BOB_KEY)
        alice.post("/connections", json={"id": "wiki", "endpoint": "http://127.0.0.1:9/mcp"},
                   headers={"x-csrf-token": csrf_of(alice)})
        bobs = bob.get("/connections").json()
        bobs_audit = bob.get("/audit").json()
        bob_deletes = bob.delete("/connections/wiki", headers={"x-csrf-token": csrf_of(bob)})
    assert bobs == {"data": []} and bobs_audit == {"data": []}
    assert bob_deletes.status_code == 404


def test_sign_out_needs_the_token_and_ends_the_session(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        sign_in(http, canary.ALICE_KEY)
        token = csrf_of(http)
        forged = http.post("/console/signout", data={"csrf_token": "nope"})
        still = http.get("/bridges")
        out = http.post("/console/signout", data={"csrf_token": token})
        cookie = gw_cookie = http.cookies.get("toolgate_console")
        after = http.get("/bridges")
    assert forged.status_code == 403 and still.status_code == 200
    assert out.status_code == 303 and cookie is None and gw_cookie is None
    assert after.status_code == 401


def test_the_mcp_endpoint_does_not_accept_the_console_cookie(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        sign_in(http, canary.ALICE_KEY)
        answer = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                           headers={"x-csrf-token": csrf_of(http), "accept": "application/json, text/event-stream"})
    assert answer.status_code == 401


def test_sessions_expire_when_idle_and_stay_bounded() -> None:
    # R: C1
    now = [0.0]
    sessions = ConsoleSessions(idle_seconds=60, max_sessions=2, clock=lambda: now[0])
    first = sessions.create(Identity(user_id="a"))
    now[0] = 30
    assert sessions.get(first.id) is first  # use restarts the idle clock
    now[0] = 85
    assert sessions.get(first.id) is first
    second = sessions.create(Identity(user_id="b"))
    with pytest.raises(ConsoleFull):  # full of others' live sessions: refused, no one's session dropped
        sessions.create(Identity(user_id="c"))
    assert len(sessions) == 2 and sessions.get(first.id) is first and sessions.get(second.id) is second
    now[0] = 200
    third = sessions.create(Identity(user_id="c"))  # the idle ones expired: room again
    assert sessions.get(first.id) is None and sessions.get(second.id) is None and sessions.get(third.id) is third
    assert sessions.get("x" * 500) is None
    assert first.id not in repr(first) and first.csrf_token not in repr(first)


def test_a_session_ends_at_its_maximum_age_however_much_it_is_used() -> None:
    # R: C1
    now = [0.0]
    sessions = ConsoleSessions(idle_seconds=60, max_age_seconds=100, clock=lambda: now[0])
    session = sessions.create(Identity(user_id="a"))
    for t in (50.0, 100.0):
        now[0] = t
        assert sessions.get(session.id) is session
    now[0] = 101.0
    assert sessions.get(session.id) is None


def test_a_session_signed_in_with_a_token_ends_when_the_token_expires() -> None:
    # R: C1 -- a token pasted into the sign-in form: the session must not outlive it
    now, wall = [0.0], [1_000_000.0]
    sessions = ConsoleSessions(idle_seconds=60, max_age_seconds=100, clock=lambda: now[0], wall_clock=lambda: wall[0])
    token_session = sessions.create(Identity(user_id="a"), expires_at=wall[0] + 30)
    key_session = sessions.create(Identity(user_id="b"))
    now[0] = 30.0
    assert sessions.get(token_session.id) is token_session
    now[0] = 31.0
    assert sessions.get(token_session.id) is None and sessions.get(key_session.id) is key_session
    later = sessions.create(Identity(user_id="c"), expires_at=wall[0] + 10_000)  # a long-lived token: the maximum age still holds
    now[0] = 132.0
    assert sessions.get(later.id) is None


def test_the_console_ends_a_session_when_the_jwt_it_was_signed_in_with_expires(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1, G3
    config = simple_config(
        upstream.url,
        auth={"mode": "jwt", "jwt": {"secret": canary.JWT_SECRET_REF, "audience": "toolgate", "issuer": "https://idp.test"}},
        bridge={"enabled": True, "database": str(tmp_path / "bridge.db")},
    )
    claims = {"sub": "alice", "aud": "toolgate", "iss": "https://idp.test", "exp": int(time.time()) + 3}
    token = jwt.encode(claims, canary.JWT_SECRET, algorithm="HS256")
    with running_gateway(config, tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        signed_in = sign_in(http, token)
        first = http.get("/bridges")
        assert signed_in.status_code == 303 and first.status_code == 200
        assert wait_until(lambda: http.get("/bridges").status_code == 401, timeout=20.0, interval=0.25)
    assert time.time() >= claims["exp"] - 1  # it ended with the token (a second's rounding), not before


def test_signing_in_again_replaces_the_old_session(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as http:
        sign_in(http, canary.ALICE_KEY)
        old = http.cookies.get("toolgate_console")
        with httpx2.Client(base_url=gw.url) as other_tab:  # a sign-in form opened before, posted now
            form = re.search(r'name="signin_token" value="([^"]+)"', other_tab.get("/console").text)
            assert form is not None
            http.cookies.set("toolgate_console_signin", other_tab.cookies["toolgate_console_signin"], path="/console")
        http.post("/console/signin", data={"signin_token": form.group(1), "api_key": canary.BOB_KEY})
        new = http.cookies.get("toolgate_console")
        as_bob = http.get("/bridges")
        with httpx2.Client(base_url=gw.url, cookies={"toolgate_console": old or ""}) as replay:
            replayed = replay.get("/bridges")
    assert old and new and old != new and as_bob.status_code == 200
    assert replayed.status_code == 401  # the first session is gone


def test_a_once_table_gives_each_token_once_within_its_lifetime_and_stays_bounded() -> None:
    # R: C1 -- the sign-in form's token and the issuer's state
    now = [0.0]
    tokens = OnceTable[str](lifetime_seconds=60, capacity=2, clock=lambda: now[0])
    first = tokens.issue("a")
    assert tokens.take(first) == "a" and tokens.take(first) is None  # once
    stale, left = tokens.issue("b"), tokens.issue("c")
    now[0] = 61.0
    assert tokens.take(stale) is None
    fresh = [tokens.issue(v) for v in ("d", "e", "f")]  # stale ones dropped; past the capacity the oldest
    assert len(tokens) == 2 and tokens.take(left) is None
    assert [tokens.take(t) for t in fresh] == [None, "e", "f"]
    assert tokens.take(None) is None and tokens.take("x" * 500) is None


@pytest.mark.parametrize("bad", [{"idle_seconds": 0}, {"max_age_seconds": 0}, {"max_sessions": 0}, {"per_identity": 0}])
def test_session_table_bounds_must_be_positive(bad: dict) -> None:
    with pytest.raises(ValueError):
        ConsoleSessions(**bad)


@pytest.mark.parametrize(("scheme", "secure"), [("https", True), ("http", False)])
def test_the_cookie_is_secure_exactly_when_the_console_is_served_over_tls(scheme: str, secure: bool) -> None:
    # R: C1 -- the scheme as uvicorn reports it (TLS served directly, or a trusted proxy's header)
    request = Request({"type": "http", "method": "POST", "scheme": scheme, "path": "/console/signin",
                       "headers": [(b"host", b"console.example")], "query_string": b"", "server": ("console.example", 443)})
    sessions = ConsoleSessions()
    response = Response()
    sessions.set_cookie(response, sessions.create(Identity(user_id="a")), request)
    flags = {part.strip().lower() for part in response.headers["set-cookie"].split(";")}
    assert ("secure" in flags) is secure and {"httponly", "samesite=strict", "path=/"} <= flags
