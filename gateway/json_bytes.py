"""JSON on the chat path by orjson (issue 35: `json` was 4-6 % of a chat request's CPU).

    json_bytes(value)              # what json.dumps(value, ensure_ascii=False).encode() means
    json_bytes(value, ascii=True)  # for a body whose old writer escaped non-ASCII (the same JSON)
    read_json(raw)                 # what json.loads(raw) reads (an upstream's answer and chunks)

orjson writes the same JSON values without spaces after separators. What it refuses — keys that
are not strings, integers past 64 bits, strings with lone surrogates (which `json.loads` lets
through in escapes) — falls back to `json.dumps` with the same `ensure_ascii`, so such a value is
written (or fails) as it was before. One difference remains: a float NaN or infinity (from a body
that carried the non-standard `NaN` literal) is written as `null`, not as the invalid `NaN`.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_bytes(value: Any, *, ascii: bool = False, default: Any = None) -> bytes:
    """`value` as JSON bytes (see the module docstring); `default` turns other objects into JSON ones."""
    try:
        return orjson.dumps(value, default=default)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=ascii, default=default).encode()


def read_json(raw: bytes) -> Any:
    """`raw` parsed as `json.loads` parses it. orjson reads it unless it refuses (the `NaN`
    literal, lone surrogates in escapes, a BOM, invalid UTF-8): then `json.loads` does, and
    raises `ValueError` as before. A text with 20 digits or more in all goes to `json.loads`
    directly: it may hold an integer past 64 bits, which orjson would read as a float."""
    if len(raw) - len(raw.translate(None, _DIGITS)) >= 20:
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


_DIGITS = b"0123456789"
