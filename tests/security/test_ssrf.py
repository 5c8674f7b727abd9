"""Connections made through the REST API cannot reach internal addresses (issue 15, finding 6).

Traffic goes to loopback only: refusals are checked where no connection is attempted (validation,
or a resolver the test controls that maps `*.test` names to 127.0.0.x). Where a test does reach a
server (to show the error texts are all alike), it is a loopback server the operator allowed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from gateway.bridge.config import BridgeConfig
from gateway.bridge.records import ConnectionRecord
from gateway.bridge.upstream import UpstreamCallFailed, Upstreams
from gateway.egress import UNUSABLE, DestinationRefused, EgressPolicy
from gateway.secrets import SecretSet
from tests.support.bridge_servers import bridge_app, mcp_http
from tests.support.http_server import ServerThread, serve
from tests.support.mcp_servers import McpServerState, http_app

REFUSED_LITERALS = [
    "http://127.0.0.1:8080/mcp", "http://2130706433:8080/mcp", "http://0x7f.1/mcp", "http://127.1/mcp",
    "http://0.0.0.0:9000/mcp", "http://169.254.169.254/latest/meta-data", "http://[::1]:8080/mcp",
    "http://[::ffff:127.0.0.1]/mcp", "http://[::]/mcp", "http://10.0.0.5/mcp", "http://192.168.1.1/mcp",
    "http://172.16.0.1/mcp", "http://100.64.0.1/mcp", "http://[fd00::1]/mcp", "http://[fe80::1]/mcp",
    "http://224.0.0.1/mcp",
]


class MapResolver:
    """Resolves `*.test` names from a table and records every lookup (the system resolver is never asked)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"unknown test name {host}")
        return self.table[host]


@pytest.mark.parametrize("url", REFUSED_LITERALS)
async def test_loopback_private_link_local_unspecified_and_multicast_addresses_are_refused(url: str) -> None:
    # R: F3 (issue 15: 127.0.0.1 admin ports, 2130706433, 0.0.0.0, 169.254.169.254 were reachable)
    resolver = MapResolver({})
    policy = EgressPolicy(resolve=resolver, own=[])
    assert policy.refuses_literal(url)
    with pytest.raises(DestinationRefused, match=f"^{UNUSABLE}$"):
        await policy.admit(url)
    assert resolver.asked == [], "an address literal is never looked up"


async def test_a_name_is_refused_when_any_address_it_resolves_to_is_internal() -> None:
    # R: F3
    resolver = MapResolver({"internal.test": ["127.0.0.7"], "mixed.test": ["93.184.216.34", "10.1.1.1"],
                            "public.test": ["93.184.216.34"]})
    policy = EgressPolicy(resolve=resolver, own=[])
    assert not policy.refuses_literal("http://internal.test/mcp"), "names are resolved when connecting, not at creation"
    for url in ("http://internal.test/mcp", "http://mixed.test/mcp", "http://nowhere.test/mcp"):
        with pytest.raises(DestinationRefused):
            await policy.admit(url)
    await policy.admit("http://public.test/mcp")  # admitted: nothing is connected here


async def test_the_gateways_own_addresses_are_refused_and_operators_can_open_networks() -> None:
    # R: F3
    resolver = MapResolver({"self.test": ["93.184.216.34"], "lab.test": ["127.0.0.9"]})
    with pytest.raises(DestinationRefused):
        await EgressPolicy(resolve=resolver, own=["93.184.216.34"]).admit("http://self.test/mcp")
    opened = EgressPolicy(["127.0.0.0/8", "fd00::/8"], resolve=resolver, own=[])
    await opened.admit("http://lab.test/mcp")
    await opened.admit("http://[fd00::1]/mcp")
    assert not opened.refuses_literal("http://127.0.0.1:1/mcp")


def test_a_bad_network_in_the_config_is_refused_at_start() -> None:
    # R: G8
    with pytest.raises(ValidationError, match="expected a network in CIDR form"):
        BridgeConfig.model_validate({"apiEndpointAllowPrivate": ["localhost"]})


@pytest.fixture
def resolver() -> MapResolver:
    return MapResolver({"internal.test": ["127.0.0.5"]})


@pytest.fixture
def bridge(tmp_path: Path, resolver: MapResolver) -> Iterator[ServerThread]:
    config = BridgeConfig.model_validate({"database": ":memory:"})
    with serve(bridge_app(config, tmp_path, egress=EgressPolicy(resolve=resolver, own=[])).app) as server:
        yield server


@pytest.mark.parametrize("url", REFUSED_LITERALS[:8])
async def test_the_api_refuses_to_create_a_connection_to_an_internal_address(bridge: ServerThread, url: str) -> None:
    # R: F3
    async with mcp_http("alice-key") as http:
        response = await http.post(f"{bridge.url}/connections", json={"id": "probe", "endpoint": url})
    assert response.status_code == 403
    assert "may not reach loopback, private, link-local or the gateway's own addresses" in response.json()["error"]["message"]


async def test_a_name_that_resolves_to_loopback_is_refused_on_every_connect_without_a_connection(
    bridge: ServerThread, resolver: MapResolver
) -> None:
    # R: F3 (checked when connecting, not only at creation: DNS can change in between)
    async with mcp_http("alice-key") as http:
        created = await http.post(f"{bridge.url}/connections", json={"id": "inner", "endpoint": "http://internal.test:8080/mcp"})
    assert created.status_code == 201
    async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as client:
        listed = (await client.list_tools()).tools
        first = await client.call_tool("inner__anything", {})
        second = await client.call_tool("inner__anything", {})
    assert listed == []
    assert first.is_error and first.content[0].text == f"tool inner__anything failed: {UNUSABLE}"
    assert second.content == first.content
    assert resolver.asked.count("internal.test") >= 3, "every connect resolved the name again"


def json_service() -> Starlette:
    return Starlette(routes=[Route("/mcp", lambda r: JSONResponse({"admin": True}), methods=["GET", "POST", "DELETE"])])


def text_service() -> Starlette:
    return Starlette(routes=[Route("/mcp", lambda r: PlainTextResponse("+OK redis ready"), methods=["GET", "POST", "DELETE"])])


async def test_error_texts_do_not_tell_closed_ports_and_services_apart(tmp_path: Path) -> None:
    # R: F3 (issue 15: error texts told closed ports, JSON services, text services and redirects apart)
    with serve(json_service()) as js, serve(text_service()) as txt:
        closed = ServerThread(json_service())  # bound, never started: nothing answers on its port
        closed.sock.close()
        config = BridgeConfig.model_validate({"database": ":memory:", "apiEndpointAllowPrivate": ["127.0.0.0/8"]})
        endpoints = {"closed": f"{closed.url}/mcp", "jsonsvc": f"{js.url}/mcp", "textsvc": f"{txt.url}/mcp"}
        with serve(bridge_app(config, tmp_path).app) as bridge:
            async with mcp_http("alice-key") as http:
                for name, url in endpoints.items():
                    assert (await http.post(f"{bridge.url}/connections", json={"id": name, "endpoint": url})).status_code == 201
            texts: dict[str, Any] = {}
            async with Client(streamable_http_client(f"{bridge.url}/mcp", http_client=mcp_http("alice-key"))) as client:
                for name in endpoints:
                    result = await client.call_tool(f"{name}__x", {})
                    texts[name] = result.content[0].text.removeprefix(f"tool {name}__x failed: ")
    assert texts == {name: UNUSABLE for name in endpoints}


class FlippingResolver:
    """A name whose DNS answers an allowed address first, then a refused one (rebinding)."""

    def __init__(self, first: str, then: str) -> None:
        self.answers = [first, then]
        self.asked = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked += 1
        return [self.answers[0] if self.asked == 1 else self.answers[1]]


async def test_a_name_rebound_between_the_check_and_the_connect_is_refused_at_the_socket() -> None:
    # R: F3 (the socket is opened to the address that was checked, never to a second lookup's)
    with serve(json_service()) as allowed:
        resolver = FlippingResolver(first="127.0.0.2", then="127.0.0.3")  # only 127.0.0.2 is opened below
        policy = EgressPolicy(["127.0.0.2/32"], resolve=resolver, own=[])
        url = f"http://rebind.test:{allowed.port}/mcp"
        await policy.admit(url)  # the check sees 127.0.0.2 ...
        async with policy.client(timeout=5) as http:
            with pytest.raises(httpx2.ConnectError, match=UNUSABLE):
                await http.post(url, json={})  # ... the connect sees 127.0.0.3 and opens no socket
    assert resolver.asked == 2


async def test_the_guarded_client_connects_to_the_checked_address(tmp_path: Path) -> None:
    # R: F3
    with serve(json_service()) as allowed:
        policy = EgressPolicy(["127.0.0.0/8"], resolve=MapResolver({"lab.test": ["127.0.0.1"]}), own=[])
        async with policy.client(timeout=5) as http:
            response = await http.post(f"http://lab.test:{allowed.port}/mcp", json={})
    assert response.json() == {"admin": True}


class CountingPolicy(EgressPolicy):
    """The real policy, counting its admissions; `refusing` makes the next ones refuse (as a name
    repointed inside would be)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitted: list[str] = []
        self.refusing = False

    async def admit(self, url: str) -> None:
        if self.refusing:
            raise DestinationRefused()
        await super().admit(url)
        self.admitted.append(url)


async def test_a_rest_made_connections_pooled_and_pipeline_sessions_are_admitted_on_every_connect_replacements_too(
    tmp_path: Path,
) -> None:
    # R: F3, F10, F15, B16 (issue 15 x issue 11: a pooled session is no way around the check; the
    # session that replaces one the server ended is a new connect and is admitted again)
    state = McpServerState()
    with serve(http_app(state, legacy_only=True)) as server:
        policy = CountingPolicy(["127.0.0.1/32"], resolve=MapResolver({}), own=[])  # the test server's Host check wants the literal
        upstreams = Upstreams(base_dir=tmp_path, secrets=SecretSet(), list_ttl=30, egress=policy)
        conn = ConnectionRecord("svc", "alice", f"{server.url}/mcp", source="api")
        try:
            pooled = [(await upstreams.call_tool_as("alice", conn, "count", {})).content[0] for _ in range(2)]
            admitted_pooled = len(policy.admitted)
            await upstreams.call_tool(conn, "count", {})  # a pipeline node: its own session
            admitted_node = len(policy.admitted)
            state.kill(state.opened[0])  # the server ends alice's pooled session ...
            replaced = (await upstreams.call_tool_as("alice", conn, "count", {})).content[0]
            admitted_replacement = len(policy.admitted)
            policy.refusing = True  # ... and once more, now that the endpoint may no longer be reached
            state.kill(state.opened[-1])
            opened_before = len(state.opened)
            with pytest.raises(UpstreamCallFailed) as refused:
                await upstreams.call_tool_as("alice", conn, "count", {})
            with pytest.raises(UpstreamCallFailed) as refused_node:
                await upstreams.call_tool(conn, "count", {})
        finally:
            await upstreams.close()
    assert [getattr(c, "text", "").split()[-1] for c in pooled] == ["1", "2"], "one pooled session, admitted when opened"
    assert (admitted_pooled, admitted_node, admitted_replacement) == (1, 2, 3)
    assert getattr(replaced, "text", "").endswith(" call 1"), "the replacement is a new session"
    assert refused.value.reason == UNUSABLE and refused_node.value.reason == UNUSABLE
    assert len(state.opened) == opened_before, "no session was opened to a refused endpoint"
