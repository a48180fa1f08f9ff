"""Start and stop real etcd, kube-apiserver and nats-server processes on loopback ports.

Used by the test suite (session fixtures) and by ``driftbus up``. It is the envtest way: no
kubelet, no controllers, so whoever needs ``status`` writes it through the ``/status``
subresource. Every process logs to a file in its own directory so a failing test can show the
tail; children get ``PR_SET_PDEATHSIG`` so they die with the process that started them, and every
live child is tracked in ``RUNNING`` so the suite can prove it left no orphan.

Synchronous on purpose (subprocess + urllib): it runs in pytest fixtures and before an event loop
exists. This module is the package's public API; the modules behind it are private:

- ``process`` — one supervised server process: start, stop, reap, wait until ready.
- ``etcd`` — an etcd, the storage behind one API server (over TLS under ``driftbus up``).
- ``apiserver`` — a kube-apiserver with an admin token, token users and its service-account key.
- ``controllers`` — kube-controller-manager, kube-scheduler and kwok: a bare API server made a
  cluster that lives.
- ``natsserver`` — a JetStream nats-server; a restart comes back on the same client port.
- ``stack`` — the compositions: a ``Cluster`` (etcd + kube-apiserver, optionally controllers) and
  a ``Stack`` (a cluster + a nats-server).
- ``orphans`` — finding server processes left behind (reads ``/proc``).
"""

from services.controlplane.servers.apiserver import KubeAPIServer, User
from services.controlplane.servers.controllers import FAKE_NODE, Controllers
from services.controlplane.servers.natsserver import NatsServer
from services.controlplane.servers.orphans import orphans, pid_alive, still_running
from services.controlplane.servers.process import (
    RUNNING,
    Process,
    ServerError,
    die_with_parent,
    free_port,
    log_tail,
)
from services.controlplane.servers.stack import Cluster, Stack

__all__ = [
    "FAKE_NODE",
    "RUNNING",
    "Cluster",
    "Controllers",
    "KubeAPIServer",
    "NatsServer",
    "Process",
    "ServerError",
    "Stack",
    "User",
    "die_with_parent",
    "free_port",
    "log_tail",
    "orphans",
    "pid_alive",
    "still_running",
]
