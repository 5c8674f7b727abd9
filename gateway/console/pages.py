"""The console's own routes (C1): the sign-in page, the shell page of the single-page app, sign-in
with an API key, sign-out, and the built assets — all under `/console`.

The pages are rendered by Jinja2 from `templates/`; the app itself is the built bundle in `static/`
(sources in the repository's `console/`, built with vite; no Node.js at install or run time). Every
page carries a Content-Security-Policy without inline script. The data comes from the Bridge's REST
API, which accepts the console's session cookie with its CSRF token (`ConsoleSessions.identity_of`).

Another sign-in method (the authorization server's code + PKCE flow) plugs in with
`Console.add_sign_in(label, href, routes)`: its routes end with `sessions.create(identity)` and
`sessions.set_cookie(...)`, exactly as the API-key form does here.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import jinja2
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.api.body import read_body
from gateway.auth import Authenticator
from gateway.bridge.api_support import rendered
from gateway.bridge.federation import owners_of
from gateway.console.once import OnceTable
from gateway.console.session import ConsoleFull, ConsoleSessions, check_csrf, is_tls
from gateway.errors import BadRequest, GatewayError
from gateway.identity import Identity

log = logging.getLogger("toolgate.console")

HERE = Path(__file__).parent
ASSETS = "/console/assets"
SIGNIN_COOKIE = "toolgate_console_signin"
MAX_FORM_BYTES = 16 * 1024
SIGNIN_TOKEN_SECONDS = 1800.0
"""How long a sign-in form may wait before it is posted (then: "the form expired", and a fresh one)."""
MAX_SIGNIN_TOKENS = 10_000
"""Sign-in forms out at once; past it the oldest form's token is forgotten (that form must be reloaded)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""No inline script or style element, nothing from another origin, never framed."""

PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

SignInWithKey = Callable[[str], Awaitable[Identity]]
"""Checks an API key as the gateway's `Authenticator` does (raises `Unauthorized`)."""


@dataclass(frozen=True)
class SignInMethod:
    """A button on the sign-in page that starts another sign-in flow."""

    label: str
    href: str


class Console:
    """The console's routes over a session table and the gateway's credential check."""

    def __init__(
        self, sessions: ConsoleSessions, sign_in_with_key: SignInWithKey | None, scrub: Callable[[str], str],
        *, key_required: bool = True,
    ) -> None:
        """`sign_in_with_key` None: no API-key form (another sign-in method must be added);
        `key_required` False: auth is off, the form signs in without a key."""
        self.sessions = sessions
        self._key_required = key_required
        self._sign_in_with_key = sign_in_with_key
        self._scrub = scrub
        self._signin_tokens = OnceTable[bool](lifetime_seconds=SIGNIN_TOKEN_SECONDS, capacity=MAX_SIGNIN_TOKENS)
        self._methods: list[SignInMethod] = []
        self._extra_routes: list[BaseRoute] = []
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, auto_reload=False
        )

    def add_sign_in(self, method: SignInMethod, routes: list[BaseRoute], *, replaces_api_key: bool = False) -> None:
        """Offer another sign-in flow on the sign-in page (its routes are served with the console's)."""
        self._methods.append(method)
        self._extra_routes.extend(routes)
        if replaces_api_key:
            self._sign_in_with_key = None

    def routes(self) -> list[BaseRoute]:
        """`/console`, its sign-in and sign-out, the assets, and any added sign-in flow."""
        return [
            Route("/console", self.page, methods=["GET"]),
            Route("/console/", self.page, methods=["GET"]),
            Route("/console/signin", rendered(self.sign_in, self._scrub), methods=["POST"]),
            Route("/console/signout", rendered(self.sign_out, self._scrub), methods=["POST"]),
            Mount(ASSETS, app=StaticFiles(directory=HERE / "static", check_dir=False), name="console-assets"),
            Route("/favicon.ico", self.favicon, methods=["GET"]),  # asked for by browsers that ignore the page's icon link
            *self._extra_routes,
        ]

    def authenticator(self, bearer: Callable[[Request], Awaitable[Identity]]) -> Callable[[Request], Awaitable[Identity]]:
        """The Bridge REST API's `authenticate`: a request with a credential header is checked as
        always (G3); one without is the console session's identity when its cookie (and, for a
        change, its CSRF token) is valid; otherwise `bearer` decides (401, or anonymous with auth off)."""

        async def authenticate(request: Request) -> Identity:
            if "authorization" not in request.headers and "x-api-key" not in request.headers:
                identity = self.sessions.identity_of(request)
                if identity is not None:
                    return identity
            return await bearer(request)

        return authenticate

    async def favicon(self, request: Request) -> Response:
        """GET /favicon.ico: the console's icon (an SVG), so no page logs a 404 for it."""
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml",
                            headers={"Cache-Control": "public, max-age=86400"})

    async def page(self, request: Request) -> Response:
        """GET /console: the app for a signed-in browser, else the sign-in page."""
        session = self.sessions.session_of(request)
        if session is None:
            return self._sign_in_page(request)
        identity = session.identity
        user = identity.email or identity.display_name or identity.user_id or (
            f"org {identity.org_id}" if identity.org_id else "anonymous")
        html = self._templates.get_template("shell.html").render(
            assets=ASSETS, csrf_token=session.csrf_token, user=user, owners=",".join(owners_of(identity)),
            script="console.js", styles=["console.css"],
        )
        return HTMLResponse(html, headers=PAGE_HEADERS)

    async def sign_in(self, request: Request) -> Response:
        """POST /console/signin: an API key, checked once, becomes a session (the key is not kept).
        The form's token is the one this browser was given (its cookie) and is taken here: a
        form is posted once, successful or not."""
        if self._sign_in_with_key is None:
            raise BadRequest("API-key sign-in is off: sign in through the authorization server")
        form = await _form(request)
        presented = form.get("signin_token", "")
        expected = request.cookies.get(SIGNIN_COOKIE, "")
        if not expected or not hmac.compare_digest(presented.encode(), expected.encode()) or not self._signin_tokens.take(presented):
            return self._sign_in_page(request, "The sign-in form expired; please try again.", 400)
        try:
            identity = await self._sign_in_with_key(form.get("api_key", ""))
        except GatewayError as exc:
            log.info("console sign-in refused: %s", exc.code)
            return self._sign_in_page(request, "That API key was not accepted.", 401)
        self.sessions.discard(request)
        try:
            session = self.sessions.create(identity, identity.expires_at)  # a pasted token's session ends with it
        except ConsoleFull:
            log.warning("console sign-in refused: the session table is full (%d sessions)", len(self.sessions))
            return self._sign_in_page(request, "The console is at its limit of signed-in sessions; please try again later.", 503)
        response = RedirectResponse("/console", status_code=303, headers={"Cache-Control": "no-store"})
        self.sessions.set_cookie(response, session, request)
        response.delete_cookie(SIGNIN_COOKIE, path="/console", httponly=True, samesite="strict", secure=is_tls(request))
        return response

    async def sign_out(self, request: Request) -> Response:
        """POST /console/signout (with the session's CSRF token): the session ends."""
        session = self.sessions.session_of(request)
        if session is not None:
            form = await _form(request)
            check_csrf(session, form.get("csrf_token") or request.headers.get("x-csrf-token"))
        response = RedirectResponse("/console", status_code=303, headers={"Cache-Control": "no-store"})
        self.sessions.end(request, response)
        return response

    def sign_in_failed(self, request: Request, message: str, status: int = 400) -> Response:
        """The sign-in page saying why a sign-in (of any method) did not complete."""
        return self._sign_in_page(request, message, status)

    def _sign_in_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        # against login CSRF (a foreign page signing this browser in as its own account): the token is
        # in the form and in a SameSite=Strict cookie, and the server takes it once (no replay)
        form = self._sign_in_with_key is not None
        token = self._signin_tokens.issue(True) if form else ""
        html = self._templates.get_template("signin.html").render(
            assets=ASSETS, error=error, methods=self._methods, api_key_form=form,
            signin_token=token, key_required=self._key_required,
        )
        response = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
        if form:
            response.set_cookie(SIGNIN_COOKIE, token, httponly=True, samesite="strict", secure=is_tls(request), path="/console")
        return response


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form (no multipart: the console posts nothing else), first value of each field."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise BadRequest("send the form as application/x-www-form-urlencoded")
    body = await read_body(request, MAX_FORM_BYTES)
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def console_for(authenticator: Authenticator, scrub: Callable[[str], str]) -> Console:
    """The gateway's console: sessions in this process, API-key sign-in through `authenticator`
    (the same check as every API, so the session carries the identity of G3)."""

    async def sign_in_with_key(key: str) -> Identity:
        key = key.strip()
        return await authenticator.authenticate(f"Bearer {key}" if key else None, "/console")

    return Console(ConsoleSessions(), sign_in_with_key, scrub, key_required=authenticator.mode != "none")
