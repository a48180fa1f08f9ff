"""The ports the test servers (and ``driftbus up``) are started on: outside the ephemeral range,
each pytest-xdist worker from its own slice, and never the same port twice in one process (etcd
exited "address already in use" in CI when two workers chose the same free port)."""

from __future__ import annotations

import socket

import pytest

from services.controlplane.servers import process
from services.controlplane.servers.process import LOOPBACK, ephemeral_ports, free_port


def test_a_servers_port_is_never_one_the_kernel_hands_to_outgoing_connections() -> None:
    """A free port in the ephemeral range can be taken by any client's connect() before the
    server binds it: etcd died with "bind: address already in use" in a clean-clone run."""
    ephemeral = ephemeral_ports()
    chosen = [free_port() for _ in range(200)]
    assert not [p for p in chosen if p in ephemeral], f"ephemeral range {ephemeral}"
    assert len(set(chosen)) > 150  # spread: workers starting servers at once pick apart


def test_the_port_chosen_is_free() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind((LOOPBACK, port))


@pytest.mark.parametrize(
    ("worker", "count", "expected"),
    [
        ("", "", range(10000, 32768)),  # not under xdist: all of it
        ("gw0", "1", range(10000, 32768)),
        ("gw0", "3", range(10000, 17589)),
        ("gw1", "3", range(17589, 25178)),
        ("gw2", "3", range(25178, 32767)),
    ],
)
def test_each_worker_picks_from_its_own_slice(
    monkeypatch: pytest.MonkeyPatch, worker: str, count: str, expected: range
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert process._share(range(10000, 32768)) == expected


def test_a_port_is_handed_out_once() -> None:
    ports = [process.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
