"""The planner's fold costs work proportional to what changed: a staged revision's objects
finishing one by one is linear in the objects, counted in entries read, never timed (found in
the review of issue 34: ``Folder.advance`` walked the whole revision on nearly every fold)."""

from __future__ import annotations

# --- planner: a staged revision's objects finishing one by one is quadratic -----------------


async def _finish_one_by_one(n: int) -> int:
    """How many entries the planner's Folder reads as ``n`` objects of a revision with a
    pre-sync hook become Ready one after the other (the hook done first): its work, counted
    rather than timed (a timing fails on a busy machine)."""
    from schemas.messages import Health
    from schemas.subjects import ObjectKey
    from services.core.hooks import BEFORE_CREATION, Hook, Phase
    from services.planner.memory.cluster import ClusterState
    from services.planner.memory.store import EntryStore
    from services.planner.rule.entry import Entry, Slot
    from services.planner.rule.revision import BundleView
    from services.planner.shell.folding import Folder

    class Board:
        def mark(self, ident: object) -> None:
            pass

        def continue_current_span(self, ident: object) -> None:
            pass

    class Decisions:
        async def publish(self, slot: object, d: object, **kw: object) -> None:
            pass

    class CountedEntries(EntryStore):
        reads = 0

        def _record(self, slot: Slot) -> bytes | None:
            self.reads += 1
            return super()._record(slot)

    entries = CountedEntries()
    st = ClusterState(cluster="c", entries=entries)
    st.live = True
    keys = [ObjectKey("", "ConfigMap", "ns", f"c{i}") for i in range(n)]
    hook = ObjectKey("batch", "Job", "ns", "migrate")
    stages = {hook: (int(Phase.PRE), 0), **{k: (int(Phase.SYNC), 0) for k in keys}}
    view = BundleView(
        "c", "shop", "r2", 1, True, False, False, set(stages), [], stages=stages,
        hooks={hook: Hook(Phase.PRE, 0, frozenset({BEFORE_CREATION}))},
    )  # fmt: skip
    st.bundles[("c", "shop")] = view
    folder = Folder(state=st, board=Board(), decisions=Decisions())  # type: ignore[arg-type]
    sha = b"\x01" * 32

    def done(k: ObjectKey) -> None:
        st.entries[("c", k)] = Entry(
            k, bundle="shop", revision="r2", manifest_sha=sha, applied_manifest_sha=sha,
            apply_sha=sha, applied_rv=1, server_sha=sha, server_rv=2, owner_bundle="shop",
            applied_bundle="shop",
        )  # fmt: skip
        st.details.set_health(("c", k), Health.READY, "")

    done(hook)
    await folder.advance(("c", hook), "shop")
    before = entries.reads
    for k in keys:
        done(k)
        await folder.advance(("c", k), "shop")
    return entries.reads - before


# found in review, mended in a8d7070: Folder.advance walks every object of the revision whenever
# the gate differs, and it differs on nearly every fold (Gate.waiting_on names the next object
# not done): quadratic, ~200 s of the planner's loop for a 20,000-object revision with a hook
async def test_a_staged_revision_finishing_costs_the_planner_linear_time() -> None:
    small = await _finish_one_by_one(600)
    large = await _finish_one_by_one(2400)
    # 4x the objects: linear work reads about 4x the entries; quadratic 16x
    assert large <= 5 * small, f"entries read: 600 objects {small:,}; 2,400 objects {large:,}"
