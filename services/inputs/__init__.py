"""Reading what users publish: manifests from directories, files, tarballs, standard input,
charts, Git and OCI, within limits and confined to their input. Never touches the bus (by
contract): ``publish``, ``plan`` and ``source`` read here and send elsewhere.

- ``load`` — directories, files, tarballs, standard input and charts; kustomizations and charts
  rendered.
- ``git`` — a Git repository at a commit, read through a bare copy.
- ``documents`` — one file's YAML or JSON documents to keyed objects, within the limits.
- ``sops`` — SOPS-encrypted Secrets: the publisher's checks, the original metadata recorded, the
  binding to the namespace and name a file was encrypted with (decrypted by the real sops in
  ``services.applier.decrypt`` only).
- ``limits`` — how much input one publish, plan or source round may read.
- ``confine`` — rendering confined to its input: no link out of it, no remote base unless
  allowed, no credentials in messages.
- ``oci/`` — OCI artifacts: references, the registry client, its auth, layers, artifacts.
"""
