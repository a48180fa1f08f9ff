"""A local control plane built from pinned Go modules: etcd, kube-apiserver, nats-server, and
the tools (kubectl, kustomize, helm) that ``driftbus up`` and the tests run.

- ``assets`` — find or build those binaries (from ``tools/go/``, cached by version).
- ``servers/`` — start and stop the servers as processes on loopback ports.
- ``tls`` — a throwaway certificate authority for nats-server with TLS on loopback.
"""
