"""Console sessions cannot be used to sign others out (issue 32, finding N3).

The probe signed bob in 10,050 times with his own key, reusing one sign-in form token, and alice's
console session was gone (401): one global table, least recently used evicted first. Now each
identity holds at most `per_identity` sessions (its next sign-in ends its own oldest), a full
table refuses new sign-ins (503) instead of dropping anyone's live session, and a sign-in form
token is taken once. The table is swapped for one with a small global bound where the global
bound matters, so a few dozen sign-ins show what 10,000 did.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from typing import Any

import httpx2

from gateway.console.pages import Console
from gateway.console.session import ConsoleSessions
from tests.support import canary
from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import ServerThread
from tests.support.upstream import ScriptedUpstream

CAROL_KEY = "carol-" + secrets.token_hex(16)


def console_config(upstream_url: str, tmp_path: Path) -> dict[str, Any]:
    return simple_config(
        upstream_url,
        auth={"mode": "api_keys", "api_keys": [
            {"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme", "email": "alice@acme.test"},
            {"key": canary.BOB_KEY_REF, "user_id": "bob", "org_id": "acme", "email": "bob@acme.test"},
            {"key_sha256": hashlib.sha256(CAROL_KEY.encode()).hexdigest(), "user_id": "carol", "email": "carol@beta.test"},
        ]},
        bridge={"enabled": True, "database": str(tmp_path / "bridge.db")},
    )


def console_of(gw: ServerThread) -> Console:
    """The gateway's console (the object behind its `/console` route)."""
    route = next(r for r in gw.app.router.routes if getattr(r, "path", None) == "/console")
    console = route.endpoint.__self__
    assert isinstance(console, Console)
    return console


def form_token(http: httpx2.Client) -> str:
    found = re.search(r'name="signin_token" value="([^"]+)"', http.get("/console").text)
    assert found is not None
    return found.group(1)


def sign_in(http: httpx2.Client, key: str) -> httpx2.Response:
    return http.post("/console/signin", data={"signin_token": form_token(http), "api_key": key})


def signed_in_as(gw: ServerThread, cookie: str | None) -> str | None:
    """Whose console a session cookie opens now (the shell names the user), or None."""
    with httpx2.Client(base_url=gw.url, cookies={"toolgate_console": cookie or ""}) as http:
        page = http.get("/console").text
    found = re.search(r"([a-z]+)@(acme|beta)\.test", page) if 'name="csrf-token"' in page else None
    return found.group(1) if found else None


def test_bob_signing_in_again_and_again_never_ends_alices_session(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1 (N3: 10,050 sign-ins of bob's own key signed alice out)
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, \
            httpx2.Client(base_url=gw.url) as alice, httpx2.Client(base_url=gw.url) as bob:
        console_of(gw).sessions = ConsoleSessions(max_sessions=30)
        assert sign_in(alice, canary.ALICE_KEY).status_code == 303
        alices = alice.cookies.get("toolgate_console")
        statuses = set()
        for _ in range(45):
            bob.cookies.delete("toolgate_console")  # each sign-in a new browser of bob's: nothing replaces the last
            statuses.add(sign_in(bob, canary.BOB_KEY).status_code)
        bobs_last = bob.cookies.get("toolgate_console")
        assert statuses == {303}
        assert signed_in_as(gw, alices) == "alice"
        assert signed_in_as(gw, bobs_last) == "bob"
        assert alice.get("/bridges").status_code == 200


def test_past_his_cap_bob_loses_his_own_least_recently_used_sessions(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as bob:
        cookies = []
        for _ in range(15):
            bob.cookies.delete("toolgate_console")
            assert sign_in(bob, canary.BOB_KEY).status_code == 303
            cookies.append(bob.cookies.get("toolgate_console"))
        cap = console_of(gw).sessions.per_identity
        assert 1 <= cap < len(cookies)
        alive = [signed_in_as(gw, c) for c in cookies]
    assert alive == [None] * (len(cookies) - cap) + ["bob"] * cap


def test_a_full_session_table_refuses_a_new_sign_in_and_ends_no_one(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1 -- a global bound remains, and it refuses (503) instead of evicting another identity
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as alice, \
            httpx2.Client(base_url=gw.url) as bob, httpx2.Client(base_url=gw.url) as carol:
        console_of(gw).sessions = ConsoleSessions(max_sessions=2)
        assert sign_in(alice, canary.ALICE_KEY).status_code == 303
        assert sign_in(bob, canary.BOB_KEY).status_code == 303
        refused = sign_in(carol, CAROL_KEY)
        bobs_first = bob.cookies.get("toolgate_console")
        bob.cookies.delete("toolgate_console")
        again = sign_in(bob, canary.BOB_KEY)  # another browser of bob's: room made with his own session
        holders = [signed_in_as(gw, c.cookies.get("toolgate_console")) for c in (alice, bob, carol)]
        bobs_first_now = signed_in_as(gw, bobs_first)
    assert refused.status_code == 503 and "limit of signed-in sessions" in refused.text
    assert "toolgate_console=" not in refused.headers.get("set-cookie", "")
    assert again.status_code == 303 and bobs_first_now is None
    assert holders == ["alice", "bob", None]


def test_a_sign_in_form_token_is_taken_once(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # R: C1 (N3: one form token was replayed for every sign-in)
    with running_gateway(console_config(upstream.url, tmp_path), tmp_path) as gw, httpx2.Client(base_url=gw.url) as bob:
        token = form_token(bob)
        form_cookie = bob.cookies["toolgate_console_signin"]
        first = bob.post("/console/signin", data={"signin_token": token, "api_key": canary.BOB_KEY})
        bob.cookies.clear()
        bob.cookies.set("toolgate_console_signin", form_cookie, path="/console")
        replayed = bob.post("/console/signin", data={"signin_token": token, "api_key": canary.BOB_KEY})
        wrong_key_token = form_token(bob)
        wrong = bob.post("/console/signin", data={"signin_token": wrong_key_token, "api_key": "not-a-key"})
        bob.cookies.set("toolgate_console_signin", wrong_key_token, path="/console")
        after_wrong = bob.post("/console/signin", data={"signin_token": wrong_key_token, "api_key": canary.BOB_KEY})
    assert first.status_code == 303
    assert replayed.status_code == 400 and "form expired" in replayed.text
    assert "toolgate_console=" not in replayed.headers.get("set-cookie", "")
    assert wrong.status_code == 401
    assert after_wrong.status_code == 400 and "toolgate_console=" not in after_wrong.headers.get("set-cookie", "")
