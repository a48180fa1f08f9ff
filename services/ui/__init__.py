"""The status page: a read-only web view of bundles and objects, fed from the bus.

- ``server`` — ``driftbus ui``: the page (``static/``) and its endpoints, fed by the status,
  decision and server streams.
- ``live`` — what the page shows, kept current from those streams (it reads and sends nothing).
- ``detail`` — what a click explains, read when asked: an object's decision history, last error
  and desired-vs-live difference; a bundle's revision history.
- ``accepted`` — which revision of a bundle the planner took an object in (pure): the only one a
  click explains, and the only way an object is read from the cluster.
- ``fleet`` — the fleet view: bundles × clusters coloured by phase, and each rollout's progress.
- ``guard`` — who may read the page: a token, only under a name of this machine, a pinned tenant.
"""

UI_PORT = 8787
"""The page's default port: not 8080, which kubectl falls back to and many dev servers take."""
