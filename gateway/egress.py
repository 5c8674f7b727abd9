"""Where connections made by callers may send requests (SSRF, OWASP's cheat sheet): never to
loopback, private, link-local, unspecified, multicast or other non-global addresses, nor to the
gateway's own addresses, unless the operator allows those networks.

    policy = EgressPolicy(allowed=["10.0.5.0/24"])
    await policy.admit("http://mcp.example.com/mcp")      # raises DestinationRefused

The name is resolved and *every* address it resolves to must be admitted, on every connect (a name
that resolved to a public address at creation may resolve to 127.0.0.1 later). The refusal says
only "the connection's server could not be used", whatever the reason, so a caller cannot tell
closed ports, services and refusals apart. Operators' own (YAML-declared) connections are not checked.
The MCP client layer applies it to every session of a REST-made connection (a `guarded` target,
gateway/mcp/target.py): `admit` before connecting, and a client on `transport()`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

log = logging.getLogger("toolgate.egress")

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""`(host, port) -> addresses`; the default asks the system resolver (tests map names themselves)."""

UNUSABLE = "the connection's server could not be used"


class DestinationRefused(Exception):
    """A connection's endpoint is not a destination callers may reach; the message is `UNUSABLE`."""

    def __init__(self) -> None:
        super().__init__(UNUSABLE)


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def own_addresses() -> set[str]:
    """This host's outbound addresses (IPv4 and IPv6): the source address the kernel picks toward a
    documentation address. A UDP `connect` sends no packet and asks no resolver."""
    found: set[str] = set()
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                found.add(str(sock.getsockname()[0]))
        except OSError:
            continue
    return found


class EgressPolicy:
    """Which addresses REST-made connections may reach: global unicast addresses that are not
    this host's, plus the networks in `allowed` (CIDRs the operator opened, e.g. `127.0.0.0/8`)."""

    def __init__(
        self, allowed: Iterable[str] = (), *, resolve: Resolver = system_resolve, own: Iterable[str] | None = None
    ) -> None:
        self._allowed = [ipaddress.ip_network(cidr, strict=False) for cidr in allowed]
        self._resolve = resolve
        self._own_given = own
        self._own: set[IpAddress] | None = None

    def address_allowed(self, address: IpAddress) -> bool:
        """May a connection reach this address?"""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self._allowed):
            return True
        return address.is_global and not address.is_multicast and address not in self._own_addresses()

    def _own_addresses(self) -> set[IpAddress]:
        if self._own is None:
            given = own_addresses() if self._own_given is None else self._own_given
            self._own = {ipaddress.ip_address(a.split("%")[0]) for a in given}
        return self._own

    def refuses_literal(self, url: str) -> bool:
        """True when `url`'s host is an IP address (in any spelling) that is not allowed — the
        check made when a connection is created, without resolving anything."""
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return True
        literal = _literal(host) if host else None
        return literal is not None and not self.address_allowed(literal)

    async def admit(self, url: str) -> None:
        """Raise `DestinationRefused` unless every address `url`'s host resolves to is allowed."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise DestinationRefused() from None
        if not host:
            raise DestinationRefused()
        await self.checked_addresses(host, port)

    async def checked_addresses(self, host: str, port: int) -> Sequence[IpAddress]:
        """The addresses `host` resolves to, when every one of them is allowed; else `DestinationRefused`."""
        addresses = await self._addresses(host, port)
        refused = [a for a in addresses if not self.address_allowed(a)]
        if not addresses or refused:
            log.warning("connection endpoint refused: %s resolves to %s", host, ", ".join(map(str, refused)) or "nothing")
            raise DestinationRefused()
        return addresses

    def client(self, timeout: float) -> httpx2.AsyncClient:
        """An HTTP client on `transport()`. No proxy from the environment, no redirects followed."""
        return httpx2.AsyncClient(transport=self.transport(), timeout=httpx2.Timeout(timeout, read=300), trust_env=False)

    def transport(self, limits: httpx2.Limits | None = None) -> httpx2.AsyncHTTPTransport:
        """A transport whose every socket is checked where it is opened: the name is resolved
        once, every address checked, and the socket connected to a checked address (so DNS cannot
        answer differently between the check and the connect). No proxy from the environment.
        TLS still verifies the name in the URL. (The MCP client layer builds its clients for
        REST-made connections on it: gateway/mcp/target.py.)"""
        transport = httpx2.AsyncHTTPTransport(trust_env=False, **({"limits": limits} if limits is not None else {}))
        pool = getattr(transport, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):  # pragma: no cover - httpx2 changed shape
            raise RuntimeError("httpx2's connection pool has no network backend to guard")
        pool._network_backend = GuardedBackend(self)  # noqa: SLF001 - httpx2 offers no public hook
        return transport

    async def _addresses(self, host: str, port: int) -> Sequence[IpAddress]:
        literal = _literal(host)
        if literal is not None:
            return [literal]
        try:
            resolved = await self._resolve(host, port)
        except (OSError, UnicodeError):
            return []
        return [a for a in (_literal(r) for r in resolved) if a is not None]


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the policy admits."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self._policy.checked_addresses(host, port)
        except DestinationRefused:
            raise httpcore2.ConnectError(UNUSABLE) from None
        return await self._inner.connect_tcp(
            str(addresses[0]), port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError(UNUSABLE)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _literal(host: str) -> IpAddress | None:
    """`host` as an IP address when it is one, in any form the resolver would accept as one
    (`2130706433`, `0x7f.1`, `127.1` are all 127.0.0.1)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.inet_aton(host))  # the BSD forms: 2130706433, 0x7f.1, 127.1
    except (OSError, ValueError):
        return None
