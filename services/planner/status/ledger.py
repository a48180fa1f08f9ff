"""Each bundle's tally kept current from the objects that changed, not counted again per tick.

Counting a bundle from scratch reads every one of its objects; the status board did that for
each changed bundle five times a second, and at 5 × 20,000 objects the planner spent 94 % of its
time there and fell behind on the facts it had to fold (the ``memory-fleet`` bench). The entry
store and the details record every slot written since the ledger last looked (their ``changed``
sets, on from the ledger's first look); the ledger marks those objects again in each bundle's
``Book`` and keeps the strays (live objects carrying a bundle's label that it does not declare)
indexed by that bundle. A status costs what changed since the last one, plus the bundle's lines.

What ``tally.tally`` counts from scratch is the reference: the ledger's tally must equal it
after any sequence of changes (``tests/unit/test_ledger.py``). A book is filled again from
scratch whenever its view is replaced (a new revision) or loses a key (another bundle took an
object over), and everything is whenever the store itself is replaced.
"""

from __future__ import annotations

from collections.abc import Generator

from schemas.subjects import ObjectKey
from services.core.steps import finished
from services.planner.memory.store import EntryStore
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.planner.status.phase import Tally
from services.planner.status.tally import Book, Known, mark, tally_of

Ident = tuple[str, str]  # (cluster, bundle)
STEP = 1024
"""Objects marked between two yields of ``preparing`` (a few milliseconds)."""


class Ledger:
    """One cluster's books and strays, kept current from the store's and details' changes."""

    def __init__(self) -> None:
        self._store: EntryStore | None = None
        self._books: dict[Ident, Book] = {}
        self._strays: dict[Ident, set[Slot]] = {}
        """(cluster, bundle) -> the live objects carrying its label that no bundle declares"""
        self._stray_of: dict[Slot, str] = {}

    def tally(self, view: BundleView, known: Known, views: dict[Ident, BundleView]) -> Tally:
        """``view``'s tally as ``tally.tally`` counts it; ``views`` are the bundles in force
        (books of the others are dropped)."""
        self._follow(known, views)
        ident = (view.cluster, view.name)
        book = self._books.get(ident)
        if book is None or not book.fits(view):
            book = self._books[ident] = Book.filled(view, known)
        return tally_of(view, known, book, self._strays.get(ident, set()))

    def preparing(
        self, view: BundleView, known: Known, views: dict[Ident, BundleView]
    ) -> Generator[None, None, None]:
        """What ``tally`` does before it counts — follow what changed, fill the book of a new
        revision — in steps of ``STEP`` objects (the shell's ``yielding.stepped`` runs it): a
        book of 100,000 objects filled in one piece held the planner's event loop for most of a
        second. What changes between the steps is in the store's ``changed`` set, for the next
        look."""
        yield from self._following(known, views)
        ident = (view.cluster, view.name)
        book = self._books.get(ident)
        if book is not None and book.fits(view):
            return
        book = Book(view)
        for i, key in enumerate(view.keys):
            book.put(key, mark((view.cluster, key), known, view))
            if i % STEP == STEP - 1:
                yield
        self._books[ident] = book

    def _follow(self, known: Known, views: dict[Ident, BundleView]) -> None:
        finished(self._following(known, views))

    def _following(
        self, known: Known, views: dict[Ident, BundleView]
    ) -> Generator[None, None, None]:
        entries, details = known.entries, known.details
        if self._store is not entries or entries.changed is None or details.changed is None:
            self._start(known)
            return
        changed = entries.changed | details.changed
        entries.changed, details.changed = set(), set()
        for ident in [i for i in self._books if views.get(i) is not self._books[i].view]:
            del self._books[ident]
        keys: dict[str, set[ObjectKey]] = {}
        for i, slot in enumerate(changed):
            self._restray(slot, entries.stray_of(slot))
            keys.setdefault(slot[0], set()).add(slot[1])
            if i % STEP == STEP - 1:
                yield
        for book in list(self._books.values()):
            cluster = book.view.cluster
            # a set intersection: with many bundles, each costs what the smaller side holds
            for i, key in enumerate(book.view.keys & keys.get(cluster, set())):
                book.put(key, mark((cluster, key), known, book.view))
                if i % STEP == STEP - 1:
                    yield

    def _start(self, known: Known) -> None:
        """Follow this store from now: every book is filled again, the strays indexed anew."""
        known.entries.changed, known.details.changed = set(), set()
        self._store = known.entries
        self._books.clear()
        self._strays.clear()
        self._stray_of.clear()
        for slot, owner in known.entries.all_strays():
            self._restray(slot, owner)

    def _restray(self, slot: Slot, owner: str) -> None:
        was = self._stray_of.get(slot, "")
        if was == owner:
            return
        if was:
            del self._stray_of[slot]
            of = self._strays[slot[0], was]
            of.discard(slot)
            if not of:
                del self._strays[slot[0], was]
        if owner:
            self._stray_of[slot] = owner
            self._strays.setdefault((slot[0], owner), set()).add(slot)
