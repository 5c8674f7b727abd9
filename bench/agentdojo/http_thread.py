"""An ASGI app served by uvicorn on a loopback port the OS picks, in a daemon thread.

The bench's MCP servers and scripted model run this way inside the bench process, so they share
its memory (the environment a case mutates). Start-up is awaited on uvicorn's own flag, with a
deadline; `stop` asks uvicorn to exit and joins the thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """`ServerThread(app).start()`; `.url` is `http://127.0.0.1:<port>`; `.stop()` when done."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        # without it each kept-alive request waits on Nagle + delayed ACK (~40 ms)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False, ws="none")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"uvicorn-{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        ready = threading.Event()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server thread exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server did not start within {timeout}s")
            ready.wait(0.01)  # polling uvicorn's flag, bounded by the deadline
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout)
        self.sock.close()
