"""Which planner replica plans which cluster (DESIGN §8): heartbeats and claims in a KV bucket.

- ``claims`` — the claim loop (``Coordinator``): heartbeats, claims by compare-and-set,
  hand-overs and the fencing token; starts and stops one planner per cluster.
- ``view`` — what this replica sees of the others (heartbeats, claims), read from the bucket.
- ``bucket`` — what this replica writes to the bucket, each a compare-and-set.
- ``rules`` (pure) — the fair share, the heartbeat settings that can work, a previous run's
  claims to free. Who is alive and whether a claim may be taken is the lease rule every lease
  follows (``services.core.lease``).
"""
