"""What the services share at their edges: the bus, the Kubernetes client, reading manifests,
settings, telemetry, permissions, members and process start-up.

- ``bus/`` — JetStream: streams, connection, publishing, following, KV buckets, the Object Store
  (DESIGN §12: no ``nats`` import outside it, by contract; the raw calls callers still make on a
  JetStream context move behind it with issue 33).
- ``kube/`` — a thin Kubernetes API client on aiohttp: requests, discovery, list/watch, apply.

A process:

- ``runtime`` — what every service opens at start and closes at exit: NATS, streams, a
  publisher, a Kubernetes client.
- ``settings`` — settings models: one declaration per setting gives its flag, environment
  variable, help and docs.
- ``logs`` — structured logs: one JSON object per line on stderr.
- ``telemetry`` — metrics, traces and the health endpoints.
- ``heap`` — freed heap memory handed back to the system after a burst of allocations.
- ``binaries`` — where the binaries driftbus runs are found (servers, kubectl, helm).

On the bus:

- ``bundles`` — publishing a bundle revision (``publish_bundle``); its manifests inline or in
  the Object Store.
- ``statuswatch`` — following one bundle's status as a user sees it, with a deadline.
- ``newest`` — a fact published to a compacted stream only if newer than the one it keeps.
- ``members`` — heartbeats: who serves a cluster; ``serving`` (pure) says what is missing.
- ``policy`` — the tenant policy in its KV bucket, followed live.
- ``permissions`` — NATS permission sets per role, and the nats-server configuration granting
  them; ``grants`` their building blocks.

Reading manifests (``publish``, ``plan``, ``source``):

- ``load`` — directories, files, tarballs, standard input and charts; kustomizations and charts
  rendered.
- ``gitrepo`` — a Git repository at a commit, read through a bare copy.
- ``documents`` — one file's YAML or JSON documents to keyed objects, within the limits.
- ``oci`` — OCI references, media types, registry credentials, semver over tags; ``oci_client``
  the distribution API over aiohttp (digests verified, size limits), ``oci_auth`` its 401
  challenges and bearer tokens, ``oci_artifact`` Flux-format, Helm and generic artifacts pushed,
  pulled, unpacked and read (charts through ``load_helm``), ``oci_tar`` the one bounded reader
  of a layer (files and directories only, every header checked before anything is written).
- ``sops`` — SOPS-encrypted Secrets: the publisher's checks, the original metadata recorded,
  the binding to the namespace and name a file was encrypted with (decrypted by the real sops
  in ``services.applier.decrypt`` only).
- ``limits`` — how much input one publish, plan or source round may read.
- ``confine`` — rendering confined to its input: no link out of it, no remote base unless
  allowed, no credentials in messages.
"""
