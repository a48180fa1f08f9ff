"""How a fleet revision is rolled out, declared once for every command that publishes one.

``RolloutSettings`` is the one declaration of the rollout flags (docs/fleet.md): ``driftbus
publish`` reads them as command flags (``add_flags``: a boolean is a bare switch, a step is
repeated, a choice is checked by argparse), ``driftbus source --selector`` as settings (flags
and ``DRIFTBUS_*`` variables: ``SourceSettings`` derives from it), and a sources file
entry as fields (``on_leave``, ``substitute``, ``rollout:``). A flag added here reaches both.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, get_args

from schemas.fleet import OnFailure, OnLeave, RolloutSpec
from services.common.settings import setting


class RolloutFlagError(ValueError):
    """A rollout setting has a value no rollout takes; the message names the setting."""


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """The rollout of a fleet revision: its steps and gates (``spec``), what a cluster that
    leaves gets, and per-cluster values."""

    rollout: tuple[str, ...] = setting(
        (),
        "a rollout step, in order: a selector within the fleet or N% of its clusters; the "
        "whole fleet is the implicit last step (publish: repeat the flag; source: "
        "comma-separated)",
    )
    bake: float = setting(
        0.0,
        "seconds every cluster of a step stays Ready on the revision before the next step starts",
    )
    max_unavailable: int = setting(
        0, "clusters of a step on their way to the revision at once (0: all of the step)"
    )
    step_timeout: float = setting(
        RolloutSpec().step_timeout,
        "seconds a step may take to be Ready before it halts the rollout",
    )
    # setting() is a dataclasses.field (ruff knows only str, int… annotations as immutable)
    on_failure: OnFailure = setting(  # noqa: RUF009
        "halt",
        "a failed step: halt (later steps never get the revision) or rollback (the clusters "
        "already on it are put back on the previous revision too)",
    )
    on_leave: OnLeave = setting(  # noqa: RUF009
        "prune",
        "what a cluster that leaves the fleet gets: prune (its objects deleted, every prune "
        "safeguard holds) or orphan (left in place)",
    )
    substitute: bool = setting(
        False,
        "replace ${cluster.name} and ${cluster.labels.KEY} in the manifests per cluster (a "
        "cluster lacking the label is refused, named)",
    )

    def spec(self) -> RolloutSpec:
        """The steps and gates, as a fleet revision carries them."""
        return RolloutSpec(
            steps=list(self.rollout),
            bake=self.bake,
            max_unavailable=self.max_unavailable,
            step_timeout=self.step_timeout,
            on_failure=self.on_failure,
        )

    def checked(self) -> RolloutSettings:
        """Itself, or RolloutFlagError naming the setting whose value no rollout takes (a
        variable is read as text: argparse's choices never saw it)."""
        for name, allowed in _CHOICES.items():
            if (value := getattr(self, name)) not in allowed:
                raise RolloutFlagError(
                    f"--{name.replace('_', '-')} {value!r}: expected one of {', '.join(allowed)}"
                )
        return self


_FIELDS = dataclasses.fields(RolloutSettings)
_HINTS = typing.get_type_hints(RolloutSettings)
_CHOICES = {
    f.name: get_args(_HINTS[f.name])
    for f in _FIELDS
    if typing.get_origin(_HINTS[f.name]) is typing.Literal
}


def add_flags(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """``RolloutSettings`` as command flags (``publish``)."""
    for f in _FIELDS:
        flag = "--" + f.name.replace("_", "-")
        doc = str(f.metadata["doc"]).replace("%", "%%")
        hint = _HINTS[f.name]
        if hint is bool:
            group.add_argument(flag, action="store_true", help=doc)
        elif typing.get_origin(hint) is tuple:
            group.add_argument(flag, action="append", default=[], metavar="STEP", help=doc)
        elif f.name in _CHOICES:
            group.add_argument(
                flag,
                choices=_CHOICES[f.name],
                default=f.default,
                help=f"{doc} (default %(default)s)",
            )
        else:
            group.add_argument(
                flag,
                type=hint,
                default=f.default,
                metavar="N" if hint is int else "SECONDS",
                help=f"{doc} (default %(default)s)",
            )


def from_args(args: argparse.Namespace) -> RolloutSettings:
    """The rollout flags ``add_flags`` read."""
    values: dict[str, Any] = {f.name: getattr(args, f.name) for f in _FIELDS}
    values["rollout"] = tuple(values["rollout"])
    return RolloutSettings(**values)


def given(settings: RolloutSettings) -> list[str]:
    """The rollout flags that differ from their defaults (a publish with one goes to a fleet;
    a source with one and no selector is refused: never a flag dropped)."""
    changed = (f.name for f in _FIELDS if getattr(settings, f.name) != f.default)
    return ["--" + name.replace("_", "-") for name in changed]
