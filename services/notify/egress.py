"""Where a tenant's notifications may go: public addresses, and what the platform allows.

A tenant writes its own providers (a webhook's ``url``, a commit status's ``apiUrl``, a chat
webhook's URL in its files), and the notify service sends from inside the platform's network.
Unchecked, a tenant could make it POST to the cluster's API server, the bus's monitoring port,
a cloud metadata endpoint or any in-cluster service (server-side request forgery). So a tenant's
request goes only to a public (globally routable) address, unless the platform allows more with
``--tenant-egress``: CIDRs (``10.20.0.0/16``) or host name globs (``*.corp.example``).

The check is made on the addresses the connection is actually opened to — a host name is
resolved by ``GuardedResolver``, which refuses a name with any address not allowed (so a name
cannot resolve to a public address when checked and a private one when used) — and on a URL's
IP literal, which aiohttp connects to without resolving. Redirects are never followed
(``send.deliver``). The platform's own configuration is not limited: the platform operates the
network it sends into.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any, Final

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """A tenant's request would go to an address it may not reach; the message says which and
    why. Not an OSError, so aiohttp does not turn it into a retried connection error."""


class Allowance:
    """What the platform lets tenants reach besides public addresses (``--tenant-egress``)."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.networks: list[Network] = []
        self.hosts: list[str] = []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.hosts.append(entry.lower().rstrip("."))

    def host(self, name: str) -> bool:
        """Whether host ``name`` is allowed whatever it resolves to."""
        name = name.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.hosts)

    def address(self, ip: Address) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)


SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")
NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
NOT_GLOBAL_V6: Final = (
    # what Python 3.11's ipaddress counts as global, wrongly for a guard (issue 41)
    (SIX_TO_FOUR, "a 6to4"),  # relayed by whoever runs a relay: never judged by its IPv4
    (ipaddress.IPv6Network("fec0::/10"), "a site-local"),  # deprecated, still routed in sites
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "a local-use NAT64"),
    (ipaddress.IPv6Network("3fff::/20"), "a documentation"),
    (ipaddress.IPv6Network("5f00::/16"), "an SRv6"),
)


def address_problem(ip: Address) -> str:
    """Why a tenant may not reach ``ip`` by default ("" when it may: a public address). An
    IPv4-mapped or well-known NAT64 address (``64:ff9b::/96``, what DNS64 answers) is judged as
    the IPv4 address it carries; a 6to4 one (``2002::/16``) is refused whatever it carries."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return address_problem(ip.ipv4_mapped)
        if ip in NAT64:
            return address_problem(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        for net, what in NOT_GLOBAL_V6:
            if ip in net:
                return f"{what} address"
    for what, hit in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if hit:
            return f"{'an' if what[0] in 'aeiou' else 'a'} {what} address"
    return "" if ip.is_global else "not a public address"


def refusal(host: str, ips: Iterable[Address], allow: Allowance) -> str:
    """Why a tenant's request to ``host`` (resolved to ``ips``) is refused ("" when it is
    not): the host is allowed by name, or every address is public or in an allowed network."""
    if allow.host(host):
        return ""
    for ip in ips:
        problem = address_problem(ip)
        if problem and not allow.address(ip):
            shown = host if host == str(ip) else f"{host} ({ip})"
            return (
                f"{shown} is {problem}: a tenant's notifications go only to public addresses "
                "(the platform may allow more with --tenant-egress)"
            )
    return ""


def literal_refusal(url: str, allow: Allowance) -> str:
    """``refusal`` for a URL whose host is an IP literal (not resolved, so not seen by the
    resolver); "" for a host name, which the resolver checks when connecting. A URL that does
    not parse, and an IPv6 literal with a zone (``[::1%25]``: aiohttp connects to it without
    resolving, ``ipaddress`` cannot judge an empty zone), are refused. The URL itself is never
    in the message: a chat webhook's URL is its credential."""
    try:
        host = URL(url).host or ""
    except (ValueError, TypeError):
        return "its URL does not parse"
    if "%" in host:
        return f"{host.split('%', 1)[0]} with a zone is a scoped IPv6 address: never reached"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if ":" in host:  # an IPv6 literal to aiohttp, whatever ipaddress makes of it
            return f"{host} is not an address driftbus can judge: never reached"
        return ""
    return refusal(host, [ip], allow)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing (``EgressRefused``) a name that resolves to any address a
    tenant may not reach."""

    def __init__(self, allow: Allowance, inner: AbstractResolver | None = None) -> None:
        self._allow = allow
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        ips = [ipaddress.ip_address(r["host"]) for r in found]
        problem = refusal(host, ips, self._allow)
        if problem:
            raise EgressRefused(problem)
        return found

    async def close(self) -> None:
        await self._inner.close()


def session_kwargs(allow: Allowance, connections: int = 100) -> dict[str, Any]:
    """What a ClientSession sending a tenant's notifications is made with: at most
    ``connections`` open at once (a tenant's share, ``shares``)."""
    import aiohttp

    return {
        "connector": aiohttp.TCPConnector(
            resolver=GuardedResolver(allow), limit=connections, limit_per_host=connections
        )
    }
