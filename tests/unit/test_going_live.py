"""The go-live after a rebuild (planner/shell/going_live.py): every desired object evaluated once;
a hit is counted where it is decided, its entry neither packed again nor sorted, and what sends
something goes out by bundle in apply order (Namespaces first), whatever the store's order."""

from __future__ import annotations

from typing import Any

from schemas.decision import DecisionAction, DecisionReason
from schemas.messages import Bundle, BundleOptions
from schemas.subjects import ObjectKey
from services.planner.memory.cluster import ClusterState
from services.planner.memory.store import EntryStore
from services.planner.rule.entry import Entry, Slot
from services.planner.rule.revision import BundleView
from services.planner.shell import going_live
from services.planner.shell.folding import Folder

SHA, OTHER = b"\x01" * 32, b"\x02" * 32
NS = ObjectKey("", "Namespace", "", "shop")


def cm(name: str) -> ObjectKey:
    return ObjectKey("", "ConfigMap", "shop", name)


class Board:
    def mark(self, ident: object) -> None:
        pass

    def continue_current_span(self, ident: object) -> None:
        pass


class Decisions:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.hits: list[Slot] = []
        self.published: list[tuple[Slot, Any, bool]] = []

    async def rebuilt_hit(self, slot: Slot, entry: Entry, d: Any) -> None:
        assert d.action is DecisionAction.HIT
        assert self.state.entries[slot] == entry
        self.hits.append(slot)

    async def publish(self, slot: Slot, d: Any, **kw: Any) -> None:
        self.published.append((slot, d, kw["batchable"]))


class CountedEntries(EntryStore):
    writes = 0

    def __setitem__(self, slot: Slot, entry: Entry) -> None:
        self.writes += 1
        super().__setitem__(slot, entry)


def applied(key: ObjectKey, *, live: bytes = SHA, **fields: Any) -> Entry:
    """Desired by ``shop``, applied as desired, seen live with ``live``."""
    base: dict[str, Any] = {
        "bundle": "shop", "revision": "r1", "manifest_sha": SHA, "applied_manifest_sha": SHA,
        "apply_sha": SHA, "applied_rv": 1, "server_sha": live, "server_rv": 2,
        "owner_bundle": "shop", "applied_bundle": "shop", "applied_revision": "r1",
    }  # fmt: skip
    return Entry(key, **{**base, **fields})


def new(key: ObjectKey, bundle: str = "shop") -> Entry:
    """Desired, never written nor seen."""
    return Entry(key, bundle=bundle, revision="r1", manifest_sha=SHA)


async def test_hits_are_counted_where_decided_and_the_rest_sent_in_apply_order() -> None:
    entries = CountedEntries()
    st = ClusterState(cluster="c", entries=entries)
    view = BundleView.of(
        Bundle(cluster="c", bundle="shop", revision="r1", options=BundleOptions()), 1
    )
    st.bundles[("c", "shop")] = view
    hits = [cm(f"same-{i}") for i in range(5)]
    # the store's order puts the ConfigMaps first; apply order wants the Namespace first
    for k in [*hits[:2], cm("new"), cm("drifted"), *hits[2:]]:
        view.keys.add(k)
    for k in hits:
        st.entries["c", k] = applied(k)
    st.entries["c", cm("new")] = new(cm("new"))
    st.entries["c", cm("drifted")] = applied(cm("drifted"), live=OTHER, correct_drift=True)
    st.entries["c", NS] = new(NS)
    view.keys.add(NS)
    st.entries["c", cm("gone-from-desire")] = Entry(cm("gone-from-desire"), server_sha=SHA)
    decisions = Decisions(st)
    folder = Folder(state=st, board=Board(), decisions=decisions)  # type: ignore[arg-type]
    written = entries.writes
    before = {k: st.entries["c", k] for k in hits}

    by_bundle = await going_live.deciding(st, folder, decisions)  # type: ignore[arg-type]

    assert sorted(decisions.hits) == sorted(("c", k) for k in hits)
    assert {k: st.entries["c", k] for k in hits} == before
    assert entries.writes - written == 3  # the three that send something: in flight now
    assert list(by_bundle) == ["shop"]
    sent = [(slot[1], d and d.reason) for slot, d, _ in by_bundle["shop"]]
    assert sent == [
        (NS, DecisionReason.NEW),
        (cm("drifted"), DecisionReason.DRIFT),
        (cm("new"), DecisionReason.NEW),
    ]
    assert all(st.entries[slot].inflight == SHA for slot, _, _ in by_bundle["shop"])

    await going_live.publishing(decisions, by_bundle["shop"], frozenset())  # type: ignore[arg-type]
    # a batch may carry only what driftbus never wrote nor saw
    assert [(s[1], b) for s, _, b in decisions.published] == [
        (NS, True),
        (cm("drifted"), False),
        (cm("new"), True),
    ]


async def test_a_held_bundle_is_held_and_its_writes_decided_hold() -> None:
    st = ClusterState(cluster="c")
    view = BundleView.of(
        Bundle(cluster="c", bundle="shop", revision="r1", options=BundleOptions()), 1
    )
    st.bundles[("c", "shop")] = view
    view.keys.add(cm("new"))
    st.entries["c", cm("new")] = new(cm("new"))
    st.gates.suspended["shop"] = "maintenance"
    decisions = Decisions(st)
    folder = Folder(state=st, board=Board(), decisions=decisions)  # type: ignore[arg-type]

    by_bundle = await going_live.deciding(st, folder, decisions)  # type: ignore[arg-type]

    [(slot, d, _)] = by_bundle["shop"]
    assert (slot, d and d.action) == (("c", cm("new")), DecisionAction.HOLD)
    assert "shop" in st.gates.held
    assert st.entries[slot].inflight is None  # nothing sent, nothing in flight


async def test_the_hits_of_a_traced_bundle_stay_with_its_decisions() -> None:
    """A bundle whose publish is traced sends its hits in its span (a ``decide`` span each, as
    before the go-live counted hits apart); an untraced bundle's hits are counted at once."""
    st = ClusterState(cluster="c")
    for name in ("shop", "blog"):
        view = BundleView.of(
            Bundle(cluster="c", bundle=name, revision="r1", options=BundleOptions()), 1
        )
        st.bundles[("c", name)] = view
        for k in (
            ObjectKey("", "ConfigMap", name, "same"),
            ObjectKey("", "ConfigMap", name, "new"),
        ):
            view.keys.add(k)
            st.entries["c", k] = (
                applied(k, bundle=name, owner_bundle=name, applied_bundle=name)
                if k.name == "same"
                else new(k, bundle=name)
            )
    decisions = Decisions(st)
    folder = Folder(state=st, board=Board(), decisions=decisions)  # type: ignore[arg-type]

    by_bundle = await going_live.deciding(
        st,
        folder,
        decisions,  # type: ignore[arg-type]
        traced=lambda bundle: bundle == "shop",
    )

    assert decisions.hits == [("c", ObjectKey("", "ConfigMap", "blog", "same"))]
    assert [(s[1].name, d and d.action) for s, d, _ in by_bundle["shop"]] == [
        ("new", DecisionAction.APPLY),
        ("same", DecisionAction.HIT),
    ]
    assert [(s[1].name, d and d.action) for s, d, _ in by_bundle["blog"]] == [
        ("new", DecisionAction.APPLY)
    ]
