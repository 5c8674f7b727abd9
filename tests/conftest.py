"""Fixtures shared by the whole suite: a scripted upstream served on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.http_server import serve
from tests.support.upstream import ScriptedUpstream


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    scripted = ScriptedUpstream()
    with serve(scripted.app) as server:
        scripted.url = server.url  # type: ignore[attr-defined]
        yield scripted
        scripted.release.set()
