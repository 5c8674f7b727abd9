"""tests/support/haproxy.py reads HAProxy's `option httplog` lines as the load-balancer tests need
them: which server, whether a connection to it was made, the status and the termination state. The
lines are HAProxy 2.6's own, from runs of tests/integration/test_load_balancer.py in which a
replica was killed, but the last (a refused connection, `SC--`), written in their format."""

from __future__ import annotations

from tests.support.haproxy import Logged, logged

LOG = """\
127.0.0.1:52808 [04/Dec/2026:15:26:40.932] toolgate replicas/gateway-2 0/0/0/61/221 200 2537 - - ---- 24/24/23/5/0 0/0 "POST /v1/chat/completions HTTP/1.1"
127.0.0.1:42974 [04/Dec/2026:15:27:18.324] toolgate replicas/gateway-2 0/0/0/292/598 200 412 - - SD-- 24/24/23/5/0 0/0 "POST /v1/chat/completions HTTP/1.1"
127.0.0.1:60370 [04/Dec/2026:15:05:04.462] toolgate replicas/gateway-2 0/0/0/-1/0 502 209 - - SH-- 22/22/21/3/0 0/0 "POST /v1/chat/completions HTTP/1.1"
127.0.0.1:48394 [04/Dec/2026:15:25:53.294] toolgate replicas/gateway-2 0/0/0/-1/13 -1 0 - - SD-- 23/23/6/2/0 0/0 "POST /v1/chat/completions HTTP/1.1"
[WARNING]  (21393) : Server replicas/gateway-2 is DOWN, reason: Health analyze, info: "Detected 1 consecutive errors, last one was: L4 unsuccessful connection". 2 active and 0 backup servers left. 1 sessions active, 0 requeued, 0 remaining in queue.
127.0.0.1:40752 [04/Dec/2026:15:01:51.575] toolgate replicas/gateway-3 0/0/0/224/360 200 2537 - - ---- 24/24/23/11/+1 0/0 "POST /v1/chat/completions HTTP/1.1"
127.0.0.1:40790 [04/Dec/2026:15:01:52.101] toolgate replicas/gateway-1 0/0/-1/-1/3 503 217 - - SC-- 3/3/0/0/3 0/0 "POST /v1/chat/completions HTTP/1.1"
"""


def test_each_request_line_is_read_with_its_server_connect_time_status_and_termination_state() -> None:
    rows = [(r.backend, r.server, r.connect_ms, r.status, r.state) for r in logged(LOG)]
    assert rows == [
        ("replicas", "gateway-2", 0, 200, "----"),
        ("replicas", "gateway-2", 0, 200, "SD--"),   # the replica died mid-stream
        ("replicas", "gateway-2", 0, 502, "SH--"),   # ... before its headers: HAProxy answered 502
        ("replicas", "gateway-2", 0, -1, "SD--"),    # ... and the client got no answer at all
        ("replicas", "gateway-3", 0, 200, "----"),   # a retry that went to another server (`+1`)
        ("replicas", "gateway-1", -1, 503, "SC--"),  # no connection could be made: nothing was sent
    ]


def test_warnings_are_not_requests_and_each_record_keeps_its_line() -> None:
    records = logged(LOG)
    assert all(isinstance(r, Logged) and r.line in LOG.splitlines() for r in records)
    assert not any("WARNING" in r.line for r in records)
    assert logged("") == [] and logged("[NOTICE] haproxy version is 2.6.12\n") == []
