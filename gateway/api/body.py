"""The one request-body reader, and JSON bodies parsed from it (G6): bounded in bytes, in time and
in JSON nesting.

    require_json(request.headers)            # 415 unless the body is declared JSON
    raw = await read_body(request, limit)   # 413 past `limit`; 408 when the body stopped arriving
    data = parse_json(raw)                   # 400 for bad JSON or nesting past MAX_JSON_DEPTH

The time bound itself is the app's (`RequestIdMiddleware` ends a body that has not arrived within
`server.body_timeout_seconds` as a disconnect); here a disconnect mid-body becomes 408.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request

from gateway.errors import BadRequest, PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from gateway.json_bytes import read_json

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects accepted in a JSON body (a chat request with tool schemas
stays far below); deeper bodies get 400 before anything walks them recursively."""


def media_type(content_type: str) -> str:
    """The media type of a `Content-Type` value, lower-cased, parameters dropped."""
    return content_type.split(";", 1)[0].strip().lower()


def is_json(content_type: str) -> bool:
    """`application/json` or `application/<anything>+json`, with any parameters (`; charset=utf-8`)."""
    kind, _, subtype = media_type(content_type).partition("/")
    return kind == "application" and (subtype == "json" or (subtype.endswith("+json") and len(subtype) > len("+json")))


def require_json(headers: Mapping[str, str]) -> None:
    """415 for a request that carries a body (or names a body type) other than JSON (G6).

    A web page may send `text/plain`, a form or multipart to any address without the browser
    asking first (no CORS preflight); a JSON `Content-Type` only after a preflight the gateway
    never answers. Refusing the others keeps pages the user visits from driving the gateway."""
    content_type = headers.get("content-type", "")
    length = headers.get("content-length", "").strip()
    has_body = bool(content_type) or "transfer-encoding" in headers or length not in ("", "0")
    if has_body and not is_json(content_type):
        shown = media_type(content_type)[:60] or "none"
        raise UnsupportedMediaType(f"Content-Type {shown!r} is not accepted here: send the body as JSON with "
                                   "'Content-Type: application/json'")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing anything over `limit` bytes with 413 (without reading it all),
    and a body that stopped arriving (the app's body timeout, or the client leaving) with 408."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {int(declared)} bytes; the limit is {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise RequestTimeout("the request body did not arrive in time") from None
    return b"".join(chunks)


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """`raw` as JSON; 400 saying why when it is not JSON or nests deeper than MAX_JSON_DEPTH."""
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(raw) > MAX_JSON_DEPTH:
        raise BadRequest(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return read_json(raw)  # json.loads' values and errors, mostly at orjson's speed
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise BadRequest(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or 400."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _depth(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped; stops counting past the limit."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest
