"""Benchmarks (not shipped): each scenario measures driftbus and a peer in the same run, and the
ratio is the figure that counts (``bench/README.md``).

Running and reporting:

- ``__main__`` — ``python -m bench [SCENARIO ...]``: run scenarios, print a table, write
  ``bench/results/<scenario>.json``.
- ``report`` — the results: one record per scenario, a table for people, JSON for machines.
- ``stack`` — the real stack for the end-to-end scenarios, and the peers measured against the
  same API server (kubectl, raw server-side apply, a cache-less loop).
- ``corpus`` — realistic objects as the watcher sees them (server-returned, seeded).
- ``profile`` — ``python -m bench.profile``: where a cold apply spends its CPU (py-spy).
- ``natstraffic`` — NATS messages per driftbus process, from nats-server's ``/connz`` counters.

The scenarios:

- ``hashing`` — prune + canonical JSON + SHA-256 throughput of the SHA core.
- ``planner`` — decisions per second and memory per cached object.
- ``cold`` — N objects from nothing to applied, against kubectl and raw server-side apply.
- ``steady`` — ``steady`` and ``drift``: what a reconcile costs when (almost) nothing changed.
- ``churn`` — other controllers and clients writing to the objects all the time.
- ``scaling`` — a cold apply with 1, 2, 4 and 8 appliers.
- ``watcher`` — the watcher's events per second, and its memory, with 50,000 objects.
- ``memory`` — ``memory`` and ``memory-fleet``: planner and watcher resident memory with
  100,000 objects in one cluster, and with 5 × 20,000.
- ``durability`` — what the safer JetStream fsync policy (``sync_interval: always``) costs.
- ``tenancy`` — what impersonation costs on a cold apply.
- ``webhook`` — a cold apply where every write waits for an admission webhook.
- ``fleet`` — 5 clusters × 1,000 objects planned by 3 sharded planners, against 1 planner.
- ``fleetsim`` — ``fleet-sim``: one fleet rollout to 1,000 simulated clusters;
  ``fleetsim_members`` simulates those clusters' watchers and appliers on the bus;
  ``fleetsim_plot`` draws each rollout's clusters placed and Ready over time.
- ``plan`` — ``driftbus plan`` from the bus: a fleet of 1,000 seeded clusters, and one cluster
  of 1,000 objects.
- ``restart`` — a real planner SIGKILLed and started again on 100,000 objects: from its own
  checkpoint, and replaying every fact.
"""
