"""Pydantic's validation errors in words a person reads (C7)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.bridge.config import BridgeDecl, ConnectionConfig
from gateway.bridge.messages import located


def first(model: type, data: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return located(caught.value.errors()[0])


def test_a_pattern_is_said_in_words() -> None:
    # R: C7
    assert first(ConnectionConfig, {"id": "c", "owner": "a", "endpoint": "ftp://x"}) == (
        "endpoint must be an http:// or https:// URL")
    assert first(ConnectionConfig, {"id": "1c", "owner": "a", "endpoint": "http://x"}) == (
        "id must be 1 to 32 letters, digits, _ or -, starting with a letter")
    assert first(BridgeDecl, {"id": "b b", "owner": "a"}) == (
        "id must be 1 to 64 letters, digits, _ or -, starting with a letter or digit")


def test_missing_and_mistyped_fields_are_said_in_words() -> None:
    # R: C7
    assert first(ConnectionConfig, {"id": "c", "owner": "a"}) == "endpoint is required"
    assert first(BridgeDecl, {"id": "b", "owner": "a", "connections": "x"}) == "connections must be a list"
