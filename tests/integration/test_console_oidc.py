"""Console sign-in through the authorization server (C1): authorization code + PKCE against a real
issuer (npm oidc-provider), driven over HTTP as the browser would; the session then sees only its
own account's data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from playwright.sync_api import expect

from tests.support import canary
from tests.support.bridge_servers import CallLog, tool_server
from tests.support.browser import chromium
from tests.support.gateway import running_gateway
from tests.support.http_server import ServerThread, serve
from tests.support.node_servers import free_port
from tests.support.oidc import (
    CONSOLE_CLIENT,
    CONSOLE_SECRET_ENV,
    OidcProvider,
    console_client,
    oauth_section,
    sign_in,
    sign_in_in_browser,
)
from tests.support.upstream import ScriptedUpstream

CONSOLE_SECRET = "console-client-secret-7f3a9c"  # noqa: S105 (a test client's secret)


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def issuer(port: int) -> Iterator[OidcProvider]:
    with OidcProvider(clients=[console_client(port, CONSOLE_SECRET)]) as provider:
        yield provider


@pytest.fixture
def gateway(upstream: ScriptedUpstream, issuer: OidcProvider, port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerThread]:
    monkeypatch.setenv(CONSOLE_SECRET_ENV, CONSOLE_SECRET)
    with serve(tool_server(CallLog(), delay=0)) as tools:
        config: dict[str, Any] = {
            "auth": {"mode": "oauth", "oauth": oauth_section(issuer.issuer, port)},
            "upstreams": [{"name": "echo", "kind": "inspect"}],
            "routes": [{"model": "m", "upstream": "echo"}],
            "bridge": {
                "database": "bridge.db",
                "connections": [{"id": "tools", "owner": "alice", "endpoint": f"{tools.url}/mcp"}],
                "bridges": [{"id": "demo", "owner": "alice", "connections": ["tools"]}],
            },
        }
        with running_gateway(config, tmp_path, port=port) as server:
            yield server


async def start_sign_in(browser: httpx2.AsyncClient, gateway: str) -> httpx2.Response:
    """The sign-in page's button: GET /console/login, answered by a redirect to the issuer."""
    page = await browser.get(f"{gateway}/console")
    assert 'href="/console/login"' in page.text
    return await browser.get(f"{gateway}/console/login")


async def at_issuer(browser: httpx2.AsyncClient, gateway: str, user: str, password: str | None = None) -> tuple[httpx2.Response, dict[str, str]]:
    """The sign-in button, then `user` signing in at the issuer: the redirect to the issuer and the
    query of the issuer's redirect back to the console's callback (not yet followed)."""
    to_issuer = await start_sign_in(browser, gateway)
    return to_issuer, await sign_in(browser, to_issuer.headers["location"], user, f"{gateway}/console/callback", password)


async def test_console_signs_in_through_the_issuer_with_pkce_and_each_account_sees_its_own(
    gateway: ServerThread, issuer: OidcProvider
) -> None:
    # R: C1, F16, F2
    callback = f"{gateway.url}/console/callback"
    async with httpx2.AsyncClient(timeout=30) as browser:
        page = await browser.get(f"{gateway.url}/console")
        to_issuer, back = await at_issuer(browser, gateway.url, "alice")
        landed = await browser.get(f"{callback}?{urlencode(back)}")
        shell = await browser.get(f"{gateway.url}/console")
        bridges = await browser.get(f"{gateway.url}/bridges")
        replayed = await browser.get(f"{callback}?{urlencode(back)}")
        key_form = await browser.post(f"{gateway.url}/console/signin", data={"api_key": canary.ALICE_KEY})
        first_session = browser.cookies.get("toolgate_console")
        to_issuer_again = await browser.get(f"{gateway.url}/console/login")  # a signed-in browser signs in anew
        again = await sign_in(browser, to_issuer_again.headers["location"], "alice", callback)  # no form: the issuer remembers
        assert (await browser.get(f"{callback}?{urlencode(again)}")).status_code == 200
    async with httpx2.AsyncClient(timeout=30, cookies={"toolgate_console": first_session or ""}) as stale:
        replaced = await stale.get(f"{gateway.url}/bridges")
    async with httpx2.AsyncClient(timeout=30) as bob:
        _, bobs_answer = await at_issuer(bob, gateway.url, "bob")
        assert (await bob.get(f"{callback}?{urlencode(bobs_answer)}")).status_code == 200
        bobs_bridges = await bob.get(f"{gateway.url}/bridges")
        bobs_shell = await bob.get(f"{gateway.url}/console")
    assert 'name="api_key"' not in page.text  # an issuer is configured: no API-key form
    authorize = urlsplit(to_issuer.headers["location"])
    query = {k: v[0] for k, v in parse_qs(authorize.query).items()}
    assert to_issuer.status_code == 303 and f"{authorize.scheme}://{authorize.netloc}" == issuer.issuer
    assert (query["response_type"], query["client_id"], query["redirect_uri"], query["code_challenge_method"]) == (
        "code", CONSOLE_CLIENT, callback, "S256")
    assert query["scope"] == "openid email profile org" and len(query["state"]) >= 32 and len(query["nonce"]) >= 32
    assert len(query["code_challenge"]) == 43  # base64url of a SHA-256
    login_cookie = next(v for v in to_issuer.headers.get_list("set-cookie") if v.startswith("toolgate_console_login="))
    flags = {part.strip().lower() for part in login_cookie.split(";")}
    assert {"httponly", "samesite=lax", "path=/console/callback"} <= flags
    assert back["iss"] == issuer.issuer and back["state"] == query["state"]
    assert landed.status_code == 200 and 'http-equiv="refresh" content="0;url=/console"' in landed.text
    session_cookie = next(v for v in landed.headers.get_list("set-cookie") if v.startswith("toolgate_console="))
    assert "samesite=strict" in session_cookie.lower() and "httponly" in session_cookie.lower()
    assert shell.status_code == 200 and "alice@acme.test" in shell.text and 'name="csrf-token"' in shell.text
    assert [b["id"] for b in bridges.json()["data"]] == ["demo"]
    assert replayed.status_code == 400 and "unknown or expired" in replayed.text
    assert key_form.status_code == 400 and "API-key sign-in is off" in key_form.text
    assert first_session and replaced.status_code == 401  # a new sign-in replaced the session (no fixation)
    assert bobs_bridges.status_code == 200 and bobs_bridges.json()["data"] == []
    assert "bob@globex.test" in bobs_shell.text and "alice" not in bobs_shell.text
    for response in (page, to_issuer, landed, shell, bridges, replayed, key_form):
        assert CONSOLE_SECRET not in response.text and CONSOLE_SECRET not in str(response.headers)


async def test_a_callback_from_another_browser_a_refusal_or_a_forged_state_signs_nobody_in(
    gateway: ServerThread, issuer: OidcProvider
) -> None:
    # R: C1
    callback = f"{gateway.url}/console/callback"
    async with httpx2.AsyncClient(timeout=30) as victim, httpx2.AsyncClient(timeout=30) as attacker:
        # the attacker starts a sign-in and completes it at the issuer, then hands the callback URL to the victim
        _, back = await at_issuer(attacker, gateway.url, "bob")
        planted = await victim.get(f"{callback}?{urlencode(back)}")
        victim_view = await victim.get(f"{gateway.url}/console")
        refused = await victim.get(f"{callback}?{urlencode({'error': 'access_denied', 'state': 'x'})}")
        forged = await victim.get(f"{callback}?{urlencode({'code': 'made-up', 'state': 'made-up'})}")
        with pytest.raises(PermissionError):
            await at_issuer(victim, gateway.url, "alice", password="wrong")
    assert planted.status_code == 400 and "started in another browser" in planted.text
    assert "toolgate_console=" not in str(planted.headers.get_list("set-cookie"))
    assert 'href="/console/login"' in victim_view.text  # still signed out
    assert refused.status_code == 400 and "refused the sign-in (access_denied)" in refused.text
    assert forged.status_code == 400 and "unknown or expired" in forged.text
    assert re.search(r"<script>", planted.text) is None


def test_a_person_signs_in_to_the_console_through_the_issuer_in_chromium(gateway: ServerThread, issuer: OidcProvider) -> None:
    # R: C1
    with chromium() as browser:
        expect.set_options(timeout=20_000)  # a deadline, not a pause: 2 shared cores can be slow
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        pages: list[str] = []
        page.on("framenavigated", lambda frame: pages.append(frame.url) if frame == page.main_frame else None)
        page.goto(gateway.url + "/console")
        expect(page.locator("input[name=api_key]")).to_have_count(0)
        sign_in_in_browser(page, gateway.url, issuer, "alice")
        expect(page.get_by_role("heading", name="Connections")).to_be_visible()
        assert any(url.startswith(issuer.issuer + "/interaction/") for url in pages)  # the issuer's own login page
        assert any(url.startswith(gateway.url + "/console/callback?") for url in pages)
        expect(page.get_by_text("alice@acme.test")).to_be_visible()
        cookies = {c["name"]: c for c in context.cookies(gateway.url)}
        session = cookies["toolgate_console"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        assert "toolgate_console_login" not in cookies  # the sign-in's own cookie is gone
        context.close()
