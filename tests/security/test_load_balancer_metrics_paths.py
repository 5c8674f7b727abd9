"""The shipped load balancer hides `/metrics` under every spelling a replica routes to it (issue 32,
remainder #4, review).

deploy/haproxy.cfg answers 404 to `/metrics` so the published port never shows a replica's
metrics. It matched the path as sent, while the replica (uvicorn) routes on the percent-decoded
path: `/%6Detrics` passed HAProxy and was served `/metrics`. The replica here opens its metrics
(`server.metrics_public`, as `simple_config` does), so only the load balancer stands between them
and the published port. Requests are written on a raw socket so that no client normalises the path.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support import haproxy
from tests.support.gateway import running_gateway, simple_config


@pytest.fixture(scope="module")
def front() -> Iterator[int]:
    haproxy.require()
    with running_gateway(simple_config("http://127.0.0.1:9")) as replica:
        proxy = haproxy.HaProxy([replica.url]).wait_ready()
        try:
            yield proxy.port
        finally:
            proxy.stop()


def get(port: int, path: str) -> tuple[str, bytes]:
    """The status line and body of `GET <path>` sent byte for byte."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body


@pytest.mark.parametrize("path", ["/metrics", "/%6Detrics", "/%6detrics", "/metric%73", "/%6D%65trics/", "/metrics%2F"])
def test_the_published_port_answers_404_to_every_spelling_of_metrics(front: int, path: str) -> None:
    # R: S3, G9
    status, body = get(front, path)
    assert status == "HTTP/1.1 404 Not Found", (path, status)
    assert b"toolgate_" not in body


def test_the_published_port_still_serves_other_paths(front: int) -> None:
    # R: S3 (the rule hides the metrics only: the replica's own answers pass)
    status, body = get(front, "/healthz")
    assert status == "HTTP/1.1 200 OK", status
