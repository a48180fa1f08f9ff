"""OCI artifacts (docs/oci.md), read and written over the distribution API.

- ``reference`` — OCI references, media types, registry credentials, semver over tags.
- ``client`` — the distribution API over aiohttp (digests verified, size limits).
- ``auth`` — its 401 challenges and bearer tokens.
- ``artifact`` — Flux-format, Helm and generic artifacts pushed, pulled, unpacked and read
  (charts through ``load_helm``).
- ``tar`` — the one bounded reader of a layer (files and directories only, every header checked
  before anything is written).
"""
