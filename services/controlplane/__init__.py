"""A local control plane built from pinned Go modules: etcd, kube-apiserver, nats-server, and
the tools (kubectl, kustomize, helm) that ``driftbus up`` and the tests run."""
