"""The lean relay's headers for the SDK's envelope ladder: what `dict(request.headers)` gives,
built in one pass (issue 35)."""

from __future__ import annotations

from starlette.datastructures import Headers

from gateway.bridge.fast_path import _first_values


def test_the_headers_handed_to_the_ladder_are_those_dict_of_the_request_headers_gives() -> None:
    # R: F2 -- the lean relay classifies a request exactly as the SDK's path would
    raw = [
        (b"host", b"127.0.0.1:8000"), (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28"), (b"accept", b"text/html"),  # a repeated name: its first value
        (b"x-latin", "caf\u00e9".encode("latin-1")), (b"mcp-method", b"tools/call"),
    ]
    assert _first_values(raw) == dict(Headers(raw=raw))
    assert _first_values([]) == {}
