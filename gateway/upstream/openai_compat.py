"""The native fast path: any OpenAI-compatible base, over the lean HTTP/1.1 client where it
applies (`http://`, no proxy, no request hooks: gateway.upstream.http11) and the shared
`httpx2.AsyncClient` otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.json_bytes import json_bytes, read_json
from gateway.upstream.base import check_chunk, check_completion, error_for_status
from gateway.upstream.http11 import Http11Pool, Origin, Response


UNANSWERED = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)
"""The connection failed before any byte of a response: what a request meets when it is written
on a kept-alive connection the server was just closing (uvicorn closes idle ones after 5 s)."""


class OpenAICompatUpstream:
    """POSTs to `{api_base}/chat/completions`; maps transport failures to 502/504 (G5).

    A request whose connection failed before any response arrived (`UNANSWERED`) is sent once
    more on a new connection, as the official `openai` SDK does for connection errors; a second
    failure, or one after the response began, is reported."""

    def __init__(self, name: str, api_base: str, api_key: str | None, timeout: float, http: httpx2.AsyncClient) -> None:
        self.name = name
        self._url = api_base.rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._timeout = httpx2.Timeout(timeout, connect=min(timeout, 10.0))
        self._timeout_s = timeout
        self._http = http
        self._origin = Origin(self._url)
        self._head = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in
                              {**self._headers, "accept": "*/*", "user-agent": "toolgate"}.items())
        # a header value with a line break (an env secret with a trailing newline) would split the
        # request on the wire: such an upstream stays on httpx2, which refuses it per call, as before
        self._leanable = Http11Pool.serves(self._url) and not any(
            ch in str(v) for v in self._headers.values() for ch in "\r\n\0")
        self._lean: Http11Pool | None = None
        """Made on the first call that can use it: `_leanable`, and no request hooks on the shared
        client (checked per call: tracing adds its traceparent hook after the upstreams are built)."""

    def _transport_error(self, exc: httpx2.HTTPError) -> Exception:
        if isinstance(exc, httpx2.TimeoutException):
            return UpstreamTimeout(f"upstream '{self.name}' did not answer within {self._timeout_s:g}s")
        if isinstance(exc, httpx2.ConnectError):
            return UpstreamError(f"upstream '{self.name}' is unreachable (connection failed)")
        return UpstreamError(f"upstream '{self.name}' failed: {type(exc).__name__}")

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json_bytes(body, ascii=True)
        try:
            response = await self._send(payload, stream=False)
            if isinstance(response, Response):
                try:
                    await response.aread()
                finally:
                    await response.aclose()
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 400:
            raise error_for_status(self.name, response.status_code, response.content, response.headers.get("retry-after"))
        try:
            data = read_json(response.content)
        except ValueError:
            raise UpstreamError(f"upstream '{self.name}' returned a body that is not JSON") from None
        return check_completion(self.name, data)

    async def _send(self, payload: bytes, *, stream: bool) -> httpx2.Response | Response:
        """POST `payload`; once more if the connection failed before any response (`UNANSWERED`).
        A lean `Response` (plain HTTP) has its head read; its body is the caller's to read and close."""
        if self._leanable and not self._http.event_hooks["request"]:
            if self._lean is None:
                self._lean = Http11Pool()
            return await self._lean.post(self._origin, self._head, payload,
                                         connect_timeout=min(self._timeout_s, 10.0), read_timeout=self._timeout_s)
        request = self._http.build_request("POST", self._url, content=payload, headers=self._headers, timeout=self._timeout)
        try:
            return await self._http.send(request, stream=stream)
        except UNANSWERED:
            return await self._http.send(request, stream=stream)

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        payload = json_bytes(body, ascii=True)
        done = False
        try:
            response = await self._send(payload, stream=True)
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            if response.status_code >= 400:
                raise error_for_status(self.name, response.status_code, await response.aread(), response.headers.get("retry-after"))
            events = SseEvents()
            async for data in response.aiter_bytes():
                # read on past [DONE] to the end of the body, so the connection is kept alive
                if done:
                    continue
                batch = []
                for event in events.feed(data):
                    if event == b"[DONE]":
                        done = True
                        break
                    batch.append(self._chunk(event))
                if batch:
                    yield batch
        except httpx2.HTTPError as exc:
            raise self._transport_error(exc) from None
        finally:
            await response.aclose()
        if not done:
            raise UpstreamError(f"upstream '{self.name}' ended the stream without [DONE]")

    def _chunk(self, data: bytes) -> dict[str, Any]:
        try:
            chunk = read_json(data)
        except ValueError:
            raise UpstreamError(f"upstream '{self.name}' sent a stream event that is not JSON") from None
        return check_chunk(self.name, chunk)

    async def aclose(self) -> None:
        """Close the lean client's connections (the shared `httpx2` client belongs to the app)."""
        if self._lean is not None:
            await self._lean.aclose()


class SseEvents:
    """Splits a server-sent-event byte stream into the payloads of its `data:` fields."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The data of every event completed by `data` (events end with a blank line)."""
        self._buffer += data
        if b"\r" in self._buffer:
            self._buffer = self._buffer.replace(b"\r\n", b"\n")
        *complete, self._buffer = self._buffer.split(b"\n\n")
        payloads = []
        for event in complete:
            lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if lines:
                payloads.append(b"\n".join(lines))
        return payloads
