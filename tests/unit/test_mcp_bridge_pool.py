"""The session pool's own rules, with scripted SDK clients (B14, B15, B17, B18)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.mcp.connection import McpConnection
from gateway.mcp.errors import CallTimeout, SessionLost
from plugins.mcp_bridge.metrics import BridgeMetrics
from plugins.mcp_bridge.plugin import secret_forms
from gateway.mcp.pool import SessionPool


class SilentServer:
    """Scripted clients whose handshake never finishes; counts how many were started and ended."""

    def __init__(self) -> None:
        self.entered = 0
        self.left = 0
        self.started = asyncio.Event()

    def client(self) -> Any:
        server = self

        class Client:
            async def __aenter__(self) -> Any:
                server.entered += 1
                server.started.set()
                try:
                    await asyncio.Event().wait()
                finally:
                    server.left += 1

            async def __aexit__(self, *exc: object) -> None:
                return None

        return Client()


async def nothing(connection: McpConnection, client: Any) -> str:
    return "ran"


@asynccontextmanager
async def pool_of(server: SilentServer, timeout: float) -> AsyncIterator[SessionPool]:
    pool = SessionPool(server.client, server="t", timeout=timeout, idle_seconds=60, metrics=BridgeMetrics(CollectorRegistry(), "t"))
    pool.start()
    try:
        yield pool
    finally:
        await pool.close()


def session_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(("mcp-session:", "mcp-open:"))]


# R: B17, B18
async def test_concurrent_callers_of_a_silent_server_share_one_set_up_and_its_timeout() -> None:
    server = SilentServer()
    async with pool_of(server, timeout=0.2) as pool:
        results = await asyncio.gather(*(pool.run("conv", f"r{i}", nothing) for i in range(4)), return_exceptions=True)
        assert pool.size == 0
    assert [type(r) for r in results] == [CallTimeout] * 4
    assert (server.entered, server.left) == (1, 1)


# R: B15
async def test_a_request_cancelled_while_its_session_opens_leaves_nothing_running() -> None:
    server = SilentServer()
    async with pool_of(server, timeout=30) as pool:
        request = asyncio.create_task(pool.run(None, "token-1", nothing))
        await asyncio.wait_for(server.started.wait(), 5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.wait_for(pool.release_request("token-1"), 5)
        assert session_tasks() == []
        assert pool.size == 0
    assert (server.entered, server.left) == (1, 1)


# R: B14
async def test_stop_abandons_a_session_still_being_opened() -> None:
    server = SilentServer()
    async with pool_of(server, timeout=30) as pool:
        caller = asyncio.create_task(pool.run("conv", "r1", nothing))
        await asyncio.wait_for(server.started.wait(), 5)
    assert session_tasks() == []
    assert server.left == 1
    with pytest.raises(SessionLost):
        await caller


# R: B14
async def test_a_listing_whose_first_caller_gave_up_is_fetched_by_the_next_caller_not_failed() -> None:
    connection = McpConnection(SilentServer().client, "t")
    fetched = asyncio.Event()
    calls = 0

    async def fetch() -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            fetched.set()
            await asyncio.Event().wait()
        return ["tool"]

    first = asyncio.create_task(connection.memo("tools", fetch))
    await asyncio.wait_for(fetched.wait(), 5)
    second = asyncio.create_task(connection.memo("tools", fetch))
    first.cancel()
    assert await asyncio.wait_for(second, 5) == ["tool"]
    assert first.cancelled()
    assert calls == 2
    assert await connection.memo("tools", fetch) == ["tool"]
    assert calls == 2


# R: B4
def test_a_scheme_prefixed_secret_is_redacted_with_and_without_its_scheme() -> None:
    assert secret_forms("Bearer tok-0123456789") == ("Bearer tok-0123456789", "tok-0123456789")
    assert secret_forms("tok-0123456789") == ("tok-0123456789",)
    assert secret_forms("Basic ab") == ("Basic ab",)
