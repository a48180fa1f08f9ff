"""Which planner replica plans which cluster (DESIGN §8): pure rules, no I/O, no clock.

Replicas heartbeat into a KV bucket and claim clusters there with compare-and-set; this module
only answers the questions the claim loop asks, so each answer is a table row in the tests.
Who is live, whether a claim may be taken and whether a replica may still plan are the lease
rule every lease follows (``services.core.lease``: ``live``, ``may_claim``, ``lease_holds``);
what is the planners' own is here:

* ``assign(clusters, planners, holders)`` — the fair share: every live replica gets ⌊n/m⌋ or
  ⌈n/m⌉ clusters; a replica keeps what it holds up to its share (nothing moves needlessly, so a
  new replica takes only its share and the others keep the rest without a restart); the rest go
  by rendezvous hashing, so every replica that sees the same inputs computes the same answer;
* ``heartbeat_problem(interval, timeout)`` — why heartbeat settings cannot work, if they cannot.

The claim loop that asks them and writes the bucket is ``claims``; its view is ``view``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping


def _score(cluster: str, planner: str) -> int:
    # rendezvous (highest random weight) hashing: stable under planners coming and going
    digest = hashlib.sha256(f"{cluster}\0{planner}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def assign(
    clusters: Iterable[str], planners: Iterable[str], holders: Mapping[str, str]
) -> dict[str, str]:
    """cluster → the planner that should plan it. ``holders`` (cluster → planner) are the
    current claims; holders that are not in ``planners`` (dead) are ignored."""
    all_clusters = sorted(set(clusters))
    replicas = sorted(set(planners))
    if not replicas:
        return {}
    base, extra = divmod(len(all_clusters), len(replicas))
    held: dict[str, list[str]] = {p: [] for p in replicas}
    for c in all_clusters:
        holder = holders.get(c, "")
        if holder in held:
            held[holder].append(c)
    # The ⌈n/m⌉ seats go to the replicas holding most now, so rebalancing moves the fewest.
    ranked = sorted(replicas, key=lambda p: (-len(held[p]), p))
    capacity = {p: base + (1 if i < extra else 0) for i, p in enumerate(ranked)}
    out: dict[str, str] = {}
    load = dict.fromkeys(replicas, 0)
    for p in replicas:
        # over its share: keep the clusters it would win by hashing anyway
        for c in sorted(held[p], key=lambda c: (-_score(c, p), c))[: capacity[p]]:
            out[c] = p
            load[p] += 1
    for c in all_clusters:
        if c in out:
            continue
        free = [p for p in replicas if load[p] < capacity[p]]
        p = max(free, key=lambda p: (_score(c, p), p))
        out[c] = p
        load[p] += 1
    return out


def moves(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    """Clusters whose planner changed (what a rebalance costs: each is a rebuild)."""
    return sum(1 for c, p in after.items() if before.get(c) not in (None, p))


def orphaned(
    holders: Mapping[str, str], running: Collection[str], share: Mapping[str, str], me: str
) -> list[str]:
    """Clusters whose claim names ``me`` but which ``me`` does not plan and is not to plan: a
    replica restarted under its old name (both replicas killed at once) finds its previous run's
    claims. It runs only its share; a claim left naming it would keep every other live replica
    from taking that cluster (``may_claim``), and nothing would ever plan it. So they are freed."""
    ours = (c for c, holder in holders.items() if holder == me)
    return sorted(c for c in ours if c not in running and share.get(c) != me)


def heartbeat_problem(interval: float, timeout: float) -> str | None:
    """Why these heartbeat settings cannot work, if they cannot: a replica fences itself one
    interval before the others may take over, which needs room for at least one heartbeat."""
    if timeout < 2 * interval:
        return (
            f"--heartbeat-timeout ({timeout}s) must be at least twice "
            f"--heartbeat-interval ({interval}s)"
        )
    return None
