"""The lean call's POST on the lean HTTP/1.1 client (issue 35).

A tool call on an open HTTP session is one POST (lean.py). Through the session's `httpx2` client
that POST cost about a quarter of the Bridge's CPU per federated call (httpcore's anyio streams, a
readability poll of the pooled socket before each request, h11, two socket writes per request).
For a plain `http://` endpoint, `LeanPosts.post` sends it on `gateway.upstream.http11.Http11Pool`
instead (asyncio and httptools, one write per request) and hands back an `httpx2.Response` that
reads as the client's would, under the same rules:

- the same request: the headers the session's client would send (its auth header and default
  headers merged with the call's, as `build_request` merges them; no cookies), `Accept-Encoding:
  identity` as `BoundedTransport` asks, the client's connect and read timeouts; a header the lean
  client would write differently from h11 (a line break, a name that is no token, not ASCII) goes
  through `httpx2`, which refuses it as before;
- the same answer: its body bounded while it is read and refused when content-encoded
  (`bounds.bounded`), drained to its end before its connection is kept (`reuse.DrainingStream`),
  and the client's response hooks run on it (the session watch: the server's `Mcp-Session-Id`, a
  404 or a "no such session" 400 ending the session);
- the same egress rule: a guarded target's (a caller's connection) every new connection goes to
  an address the policy admits, resolved once and checked where the socket is opened
  (`EgressPolicy.checked_addresses`, as `GuardedBackend` does);
- a redirect: not read here. The call goes through `httpx2` (`stream_within_origin`: followed within
  the origin, else refused), and so do the endpoint's later calls;
- a cancelled call drops its connection at once (2026-07-28: closing the POST is the notice); a
  connection goes back to the pool only when its answer was read to its end.

Everything else stays on `httpx2`: `https://`, a proxy from the environment, credentials in the
URL, an `httpx2.Auth` or request hooks on the client, and the session's other messages (the
resumption GET, notices, answers to the server's requests).

The pool is the session's own (`LeanHttp.posts`), closed when the session ends (connection.py):
at most `MAX_IN_FLIGHT` POSTs at once, idle connections kept per origin as `Http11Pool` keeps
them (`MAX_IDLE`, `KEEPALIVE_SECONDS`: the client's own limits, target.MCP_LIMITS).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx2

from gateway.egress import UNUSABLE, DestinationRefused, EgressPolicy
from gateway.mcp.bounds import bounded
from gateway.mcp.reuse import DrainingStream
from gateway.upstream.http11 import Http11Pool, Origin
from gateway.upstream.http11 import Response as Http11Response

MAX_IN_FLIGHT = 1000
"""POSTs one session sends at once on the lean client; more wait (within the call's own bound)."""

REDIRECTS = frozenset({301, 302, 303, 307, 308})
"""What `httpx2` reads as a redirect (with a `Location`)."""

_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[\x20\x09\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")
"""A header h11 writes as it is: a token for a name; a value without line breaks, NUL or edge whitespace."""

_SKIPPED = (b"host", b"content-length")
"""Written by `Http11Pool.post` itself."""


class _Body(httpx2.AsyncByteStream):
    """A lean response's body as an `httpx2` stream: closing it gives the connection back (or drops it)."""

    def __init__(self, response: Http11Response) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


class LeanPosts:
    """A session's POSTs to its plain-HTTP endpoint on its own `Http11Pool` (see the module docstring)."""

    def __init__(self, http: httpx2.AsyncClient, url: str, max_answer_bytes: int, egress: EgressPolicy | None) -> None:
        self._http = http
        self._url = httpx2.URL(url)
        self._origin = Origin(url)
        self._max = max_answer_bytes
        self._egress = egress
        self._pool = Http11Pool(max_connections=MAX_IN_FLIGHT, address_of=self._admitted if egress is not None else None,
                                resend=False)
        self._host = self._url.netloc
        self._client_raw: list[tuple[bytes, bytes]] | None = None
        self._client: list[tuple[bytes, bytes]] | None = None
        self.redirected = False
        """The endpoint answered a POST with a redirect: its calls go through `httpx2` from then on."""
        self.sent = 0
        """POSTs sent on the lean client."""

    @staticmethod
    def serves(url: str) -> bool:
        """Can a session's POSTs to `url` go on the lean client at all (`Http11Pool.serves`: plain
        HTTP, no credentials in the URL, no proxy from the environment)?"""
        return Http11Pool.serves(url)

    async def _admitted(self, host: str, port: int) -> str:
        assert self._egress is not None
        try:
            addresses = await self._egress.checked_addresses(host, port)
        except DestinationRefused:
            raise httpx2.ConnectError(UNUSABLE) from None
        return str(addresses[0])

    async def post(self, content: bytes, headers: dict[str, str]) -> httpx2.Response | None:
        """POST `content` with `headers` (and the client's) and read the answer's head; None when
        this request must go through `httpx2` (see the module docstring). The caller closes the
        answer; `drop(answer)` first when the call was cancelled."""
        http = self._http
        timeout = http.timeout
        if (self.redirected or http.event_hooks["request"] or http.auth is not None
                or timeout.connect is None or timeout.read is None):
            return None
        pairs = self._headers(headers)
        if pairs is None or http.cookies:
            return None
        head = b"".join([b"%s: %s\r\n" % pair for pair in pairs])
        pairs[:0] = [(b"Host", self._host)]
        pairs.append((b"Content-Length", b"%d" % len(content)))
        request = httpx2.Request("POST", self._url, headers=pairs, stream=httpx2.ByteStream(content))
        answer = await self._pool.post(self._origin, head, content, connect_timeout=timeout.connect, read_timeout=timeout.read)
        self.sent += 1
        try:
            head = httpx2.Headers([(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()])
            response = httpx2.Response(
                answer.status_code, headers=head, stream=DrainingStream(bounded(_Body(answer), head, self._max)),
                request=request,
            )
            if answer.status_code in REDIRECTS and "location" in answer.headers:
                self.redirected = True
                await response.aclose()  # drained: the connection is kept
                return None
            for hook in http.event_hooks["response"]:
                await hook(response)
        except BaseException:
            await answer.aclose()
            raise
        return response

    def _headers(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]] | None:
        """The request's headers as `httpx2` merges them (the client's, then `headers` in place of
        the client's of the same name, `Accept-Encoding: identity`), without Host and
        Content-Length; None when one is not written as h11 writes it (`_NAME`, `_VALUE`) or is
        not ASCII (httpx2 refuses it)."""
        client = self._http.headers.raw
        if client != self._client_raw:  # the client's own headers, checked once (they do not change)
            self._client_raw = client
            self._client = [(name, value) for name, value in client if name.lower() not in _SKIPPED]
            if not all(_NAME.fullmatch(name) and _VALUE.fullmatch(value) for name, value in self._client):
                self._client = None
        if self._client is None:
            return None
        own: list[tuple[bytes, bytes]] = [(b"Accept-Encoding", b"identity")]  # as BoundedTransport asks it
        try:
            for key, text in headers.items():
                name, value = key.encode("ascii"), text.encode("ascii")
                if not _NAME.fullmatch(name) or not _VALUE.fullmatch(value) or name.lower() in _SKIPPED:
                    return None
                own.append((name, value))
        except UnicodeEncodeError:
            return None
        replaced = {name.lower() for name, _ in own}
        return [pair for pair in self._client if pair[0].lower() not in replaced] + own

    async def aclose(self) -> None:
        """Close the pool's connections (the session ended)."""
        await self._pool.aclose()


def drop(response: httpx2.Response) -> None:
    """Let `response` (a lean POST's answer) close without draining: its connection is dropped."""
    if isinstance(response.stream, DrainingStream):
        response.stream.drop()
