"""Live progress of a bundle's revision while a command waits for it (``publish --wait``, ``up``,
``rollback --wait``, ``delete --wait``).

On a terminal: a bar per phase (applied, ready, pruned) with counts, rate and time left
(rich, a maintained terminal library: redrawn in place, no hand-written escape codes). Anywhere
else (CI logs, a pipe): a plain line when the first status arrives, then one every ``every``
seconds while the counts change, and the last one — readable in a log, never a wall of
carriage returns. Both start at once with a "waiting for the planner" line, so nothing is silent
in the first seconds.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from schemas.messages import BundleStatus


def line(label: str, st: BundleStatus, pruned: int, to_prune: int) -> str:
    """The plain progress line of one status."""
    c = st.counts
    parts = [f"applied {c.applied}/{c.total}", f"ready {c.ready}/{c.total}"]
    if to_prune:
        parts.append(f"pruned {pruned}/{to_prune}")
    if c.failed:
        parts.append(f"failed {c.failed}")
    return f"{label}: {st.phase} " + "  ".join(parts)


class Progress:
    """Shows each status of one revision as it comes (``update``), until ``close``."""

    def __init__(
        self, label: str, *, tty: bool | None = None, out: IO[str] | None = None, every: float = 5.0
    ) -> None:
        self.label = label
        self.out = out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.every = every
        self._last_line = ""
        self._last_at = 0.0
        self._shown = False
        """A status line was printed (the first one prints at once)."""
        self._to_prune = 0
        """The most objects seen waiting for their prune: what ``pruned`` counts up to."""
        self._bars: Any = None
        self._tasks: dict[str, Any] = {}
        self._started = time.monotonic()

    def start(self) -> None:
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as Bars,
            )

            self._bars = Bars(
                TextColumn("{task.description:<8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[phase]}"),
                console=Console(file=self.out),
                transient=False,
            )
            self._bars.start()
            self._bars.console.print(f"{self.label}: waiting for the planner …")
            for name in ("applied", "ready"):
                self._tasks[name] = self._bars.add_task(name, total=None, phase="")
        else:
            self._print(f"{self.label}: waiting for the planner …")

    def update(self, st: BundleStatus) -> None:
        c = st.counts
        self._to_prune = max(self._to_prune, c.pruning)
        pruned = self._to_prune - c.pruning
        if self._bars is not None:
            if self._to_prune and "pruned" not in self._tasks:
                self._tasks["pruned"] = self._bars.add_task("pruned", total=None, phase="")
            for name, done, total in (
                ("applied", c.applied, c.total),
                ("ready", c.ready, c.total),
                ("pruned", pruned, self._to_prune),
            ):
                if name in self._tasks:
                    self._bars.update(
                        self._tasks[name], completed=done, total=total, phase=str(st.phase)
                    )
            return
        text = line(self.label, st, pruned, self._to_prune)
        now = time.monotonic()
        if text != self._last_line and (not self._shown or now - self._last_at >= self.every):
            self._print(text)
            self._shown = True
            self._last_at = now

    def close(self, last: BundleStatus | None = None) -> None:
        if self._bars is not None:
            self._bars.stop()
            return
        if last is not None:
            text = line(self.label, last, self._to_prune - last.counts.pruning, self._to_prune)
            if text != self._last_line:
                self._print(text)

    def _print(self, text: str) -> None:
        self._last_line = text
        print(text, file=self.out, flush=True)
