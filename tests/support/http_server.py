"""Run an ASGI app under uvicorn on a loopback port chosen by the OS (port 0), in a thread.

Used for every real server the tests talk to: the scripted upstream, MCP servers, the gateway.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.support import canary


class ServerThread:
    """A uvicorn server bound to 127.0.0.1:<free port>, started and stopped from sync code."""

    def __init__(self, app: Any, *, lifespan: str = "on", log_level: str = "warning", port: int = 0) -> None:
        """`port`: 0 (the OS chooses) unless the app must know its URL before it serves (OAuth's public_url)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        # accepted connections inherit this; without it each kept-alive POST waits ~44 ms (Nagle + delayed ACK)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port: int = self.sock.getsockname()[1]
        self.app = app
        # the gateway's and the Bridge's responses are searched for the canary secret (B4)
        config = uvicorn.Config(canary.watch(app), lifespan=lifespan, log_level=log_level, access_log=False, ws="none")
        canary.attach_logs()  # building the Config re-configured uvicorn's loggers
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        finally:
            # tasks the app left behind (e.g. SSE shutdown watchers) end here, not as GC warnings
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout * 100)):
            if self.server.started:
                return self
            if not self.thread.is_alive():
                raise RuntimeError("server thread exited during start-up")
            deadline.wait(0.01)
        raise TimeoutError(f"server did not start within {timeout}s")

    def stop(self, timeout: float = 30.0) -> None:
        canary.before_stop(self.app, self.url)
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout)
        self.sock.close()
        canary.after_stop(self.app)


@contextmanager
def serve(app: Any, **kwargs: Any) -> Iterator[ServerThread]:
    """`with serve(app) as srv: ... srv.url ...`"""
    server = ServerThread(app, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()


async def request_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request, read from `receive` to its last message."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replayed(body: bytes, receive: Any) -> Any:
    """A `receive` for an inner app, which gives it `body` (already read by a wrapper) first."""
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Any:
        return sent.pop() if sent else await receive()

    return replay
