"""The source service: follows Git repositories and publishes each new commit as a bundle.

- ``service`` — ``driftbus source``: fetch on an interval or a webhook, resolve the commit,
  render it, publish when the objects differ.
- ``specs`` — its settings, and the sources they describe (from the flags, or a YAML list).
- ``refs`` — which commit a source stands at: a branch, a tag, or the newest tag in a semver
  range (pure).
- ``webhook`` — the push webhook: ``POST /hook`` polls now, with a secret or from loopback.
"""
