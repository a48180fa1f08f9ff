"""Which planner replica plans which cluster (DESIGN §8): heartbeats and claims in a KV bucket.

- ``claims`` — the claim loop (``Coordinator``): heartbeats, claims by compare-and-set,
  hand-overs and the fencing token; starts and stops one planner per cluster.
- ``view`` — what this replica sees of the others (heartbeats, claims), read from the bucket.
- ``bucket`` — what this replica writes to the bucket, each a compare-and-set.
- ``rules`` (pure) — who is alive, the fair share, whether a claim may be taken.
"""
