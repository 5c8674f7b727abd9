"""Pydantic's validation errors as a person reads them (C7): `endpoint must be an http:// or https://
URL`, not `String should match pattern '^https?://'`. One function for the REST API's bodies and the
graph's shape (validation.py)."""

from __future__ import annotations

from typing import Any

PATTERN_WORDS = {
    "^https?://": "must be an http:// or https:// URL",
    "^[a-zA-Z][a-zA-Z0-9_-]{0,31}$": "must be 1 to 32 letters, digits, _ or -, starting with a letter",
    "^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$": "must be 1 to 64 letters, digits, _ or -, starting with a letter or digit",
}
"""What a field pattern of the Bridge's models means, in words."""


PHRASES = ("is ", "must ", "does ")
"""How a message of `readable` that follows its field's name begins (others follow `<field>: `)."""


def readable(err: Any) -> str:
    """The message of one pydantic error (`ValidationError.errors()` entry), without its location:
    a phrase to follow the field's name (`is required`, `must be ...`) for the errors it knows,
    else pydantic's own sentence."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return PATTERN_WORDS.get(pattern, f"does not have the expected form ({pattern})")
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must be at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_type":
        return "must be a string"
    if kind in ("list_type", "tuple_type"):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object"
    if kind in ("int_type", "int_parsing"):
        return "must be a whole number"
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        return f"must be {expected}" if " or " not in expected else f"must be one of {expected}"
    return msg


def located(err: Any, body: str = "(body)") -> str:
    """`<field path> <phrase>` (`endpoint must be an http:// or https:// URL`), or `<where>: <message>`."""
    return joined(".".join(str(p) for p in err.get("loc", ())) or body, readable(err))


def joined(where: str, message: str) -> str:
    """`where` and a message of `readable`: a phrase follows it, a sentence after a colon."""
    return f"{where} {message}" if message.startswith(PHRASES) else f"{where}: {message}"
