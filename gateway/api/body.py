"""The one size-limited request-body reader, and JSON bodies parsed from it (G6)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from gateway.errors import BadRequest, PayloadTooLarge


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing anything over `limit` bytes with 413 (without reading it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {int(declared)} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """The body as JSON, or 400 saying why it is not."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or 400."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body
