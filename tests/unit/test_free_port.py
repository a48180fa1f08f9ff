"""The ports the test servers (and ``driftbus up``) are started on."""

from __future__ import annotations

import socket

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
