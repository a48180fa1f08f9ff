"""Where a tenant's notifications may go (services/notify/egress.py): public addresses, and
what the platform allows with --tenant-egress."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from services.notify import egress


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("93.184.215.14", ""),
        ("2606:4700::1111", ""),
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.0.0.7", "a private address"),
        ("172.16.3.4", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fd00::1", "a private address"),
        ("169.254.169.254", "a link-local address"),  # the cloud metadata endpoint
        ("fe80::1", "a link-local address"),
        ("0.0.0.0", "an unspecified address"),  # noqa: S104 - an address judged, not bound
        ("224.0.0.1", "a multicast address"),
        ("100.64.0.1", "not a public address"),  # carrier-grade NAT
        ("::ffff:127.0.0.1", "a loopback address"),  # IPv4-mapped: judged as the IPv4
        ("::ffff:10.1.2.3", "a private address"),
        # (issue 41) what Python 3.11's ipaddress counts as global but is not
        ("2002:7f00:1::1", "a 6to4 address"),  # 6to4 embedding 127.0.0.1
        ("2002:5db8:d70e::1", "a 6to4 address"),  # even a public IPv4: relays are anyone's
        ("fec0::1", "a site-local address"),  # deprecated, still routed inside sites
        ("feff::1", "a site-local address"),
        ("64:ff9b::7f00:1", "a loopback address"),  # NAT64: judged as the embedded IPv4
        ("64:ff9b::a00:7", "a private address"),
        ("64:ff9b::a9fe:a9fe", "a link-local address"),
        ("64:ff9b::5db8:d70e", ""),  # NAT64 of a public IPv4
        ("64:ff9b:1::a00:1", "a local-use NAT64 address"),  # local-use NAT64
        ("100::1", "a private address"),  # discard-only
        ("::7f00:1", "a reserved address"),  # IPv4-compatible (deprecated)
        ("2001::1", "a private address"),  # Teredo
        ("2001:db8::1", "a private address"),  # documentation
        ("5f00::1", "an SRv6 address"),  # SRv6 SIDs
        ("3fff::1", "a documentation address"),  # documentation (RFC 9637)
    ],
)
def test_address_problem(address: str, problem: str) -> None:
    assert egress.address_problem(ipaddress.ip_address(address)) == problem


@pytest.mark.parametrize(
    ("host", "ips", "allow", "refused"),
    [
        ("hooks.example.com", ["93.184.215.14"], [], False),
        ("hooks.example.com", ["93.184.215.14", "10.0.0.1"], [], True),  # any one refuses
        ("db.internal", ["10.20.1.1"], ["10.20.0.0/16"], False),
        ("db.internal", ["10.21.1.1"], ["10.20.0.0/16"], True),
        ("hooks.corp.example", ["10.9.9.9"], ["*.corp.example"], False),
        ("HOOKS.Corp.Example.", ["10.9.9.9"], ["*.corp.example"], False),  # as DNS compares
        ("corp.example.evil", ["10.9.9.9"], ["*.corp.example"], True),
        ("localhost", ["127.0.0.1", "::1"], ["127.0.0.0/8"], True),  # ::1 is not allowed
        ("localhost", ["127.0.0.1", "::1"], ["127.0.0.0/8", "::1/128"], False),
        ("localhost", ["::1"], ["127.0.0.0/8"], True),  # an IPv4 network allows no IPv6
    ],
)
def test_refusal(host: str, ips: list[str], allow: list[str], refused: bool) -> None:
    said = egress.refusal(host, [ipaddress.ip_address(i) for i in ips], egress.Allowance(allow))
    assert bool(said) is refused, said
    if refused:
        assert said.startswith(host)
        assert "--tenant-egress" in said


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://127.0.0.1:8222/varz", "127.0.0.1 is a loopback address"),
        ("http://[::1]:6443/api", "::1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("https://93.184.215.14/hook", ""),
        ("http://localhost:8222/", ""),  # a name: the resolver's to judge, when connecting
    ],
)
def test_literal_refusal(url: str, refused: str) -> None:
    said = egress.literal_refusal(url, egress.Allowance())
    assert said.startswith(refused) if refused else said == ""


class Answers(AbstractResolver):
    """A resolver answering from a table (the resolver guarded is the unit here)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=ip, port=port, family=family, proto=0, flags=0)
            for ip in self.table[host]
        ]

    async def close(self) -> None:
        pass


def test_the_guarded_resolver_refuses_a_name_with_any_address_not_allowed() -> None:
    inner = Answers(
        {"pub.example": ["93.184.215.14"], "rebind.example": ["93.184.215.14", "127.0.0.1"]}
    )
    guarded = egress.GuardedResolver(egress.Allowance(), inner)

    async def both() -> Any:
        ok = await guarded.resolve("pub.example", 443)
        with pytest.raises(egress.EgressRefused, match=r"rebind.example \(127.0.0.1\) is a lo"):
            await guarded.resolve("rebind.example", 443)
        return ok

    assert [r["host"] for r in asyncio.run(both())] == ["93.184.215.14"]
    assert not isinstance(egress.EgressRefused("x"), OSError)  # not a retried connect error


def test_an_allowance_reads_networks_and_host_globs() -> None:
    a = egress.Allowance(["10.0.0.0/8", " *.corp.example ", "", "192.168.1.7"])
    assert [str(n) for n in a.networks] == ["10.0.0.0/8", "192.168.1.7/32"]
    assert a.hosts == ["*.corp.example"]


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://[::ffff:127.0.0.1%25]:8222/x", "with a zone is a scoped IPv6 address"),
        ("http://[::1%25]:8222/x", "with a zone is a scoped IPv6 address"),
        ("http://[::1%25lo]:8222/x", "with a zone is a scoped IPv6 address"),
        ("http://[::1", "its URL does not parse"),
        ("http://x.example:99999/", "its URL does not parse"),
    ],
)
def test_literals_driftbus_cannot_judge_and_urls_that_do_not_parse_are_refused(
    url: str, refused: str
) -> None:
    """(review: an empty zone id made ``ipaddress`` refuse the literal, so it was taken for a
    name and never resolved — aiohttp connected to ::1; a URL that did not parse raised out
    of the notify service)"""
    said = egress.literal_refusal(url, egress.Allowance(["0.0.0.0/0", "::/0"]))
    assert refused in said, said
    assert url not in said  # a chat webhook's URL is its credential
