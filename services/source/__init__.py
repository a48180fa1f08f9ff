"""The source service: follows Git and OCI repositories and publishes each new revision as a
bundle.

- ``service`` — ``driftbus source``: fetch on an interval or a webhook, resolve the commit,
  render it, publish when the objects differ.
- ``origins`` — where revisions come from: a Git repository (commits) or an OCI repository
  (manifest digests); where the rule stands now, and what a revision renders.
- ``settings`` — its settings (on their own: every service's command line declares them).
- ``specs`` — the sources its settings describe (from the flags, or a YAML list).
- ``refs`` — which commit a source stands at: a branch, a tag, or the newest tag in a semver
  range (pure).
- ``webhook`` — the push webhook: ``POST /hook`` polls now, with a secret or from loopback.
"""
