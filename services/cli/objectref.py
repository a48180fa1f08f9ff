"""An object as a person types it (``why configmap/ns/name``, ``ClusterRole/x``,
``deployment.apps/ns/web``), matched against the objects the bus knows (pure).

The kind is matched without regard to case, and may be plural (``configmaps``); the API group,
when given after the kind (``KIND.GROUP``), may be its first labels (``.rbac`` for
``rbac.authorization.k8s.io``); when not given, it is whatever group the bus knows the object
under. Two objects of different groups that both match are listed, not guessed between.
"""

from __future__ import annotations

import dataclasses

from schemas.subjects import ObjectKey


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    kind: str
    group: str | None
    """None: not given (any group the object is known under)."""
    namespace: str
    name: str

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group is not None else self.kind
        return "/".join(p for p in (kind, self.namespace, self.name) if p)


def parse(text: str) -> ObjectRef:
    """``KIND[.GROUP]/NAMESPACE/NAME`` or ``KIND[.GROUP]/NAME`` (cluster-scoped)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(
            f"{text!r}: give KIND[.GROUP]/NAMESPACE/NAME, or KIND[.GROUP]/NAME for a "
            "cluster-scoped object"
        )
    kind, dot, group = parts[0].partition(".")
    if not kind:
        raise ValueError(f"{text!r}: the kind is missing before {parts[0]!r}")
    return ObjectRef(
        kind=kind,
        group=group if dot else None,
        namespace=parts[1] if len(parts) == 3 else "",
        name=parts[-1],
    )


def _kind_matches(typed: str, kind: str) -> bool:
    t, k = typed.lower(), kind.lower()
    return t in (k, f"{k}s", f"{k}es") or (k.endswith("y") and t == f"{k[:-1]}ies")


def _group_matches(typed: str | None, group: str) -> bool:
    if typed is None:
        return True
    t, g = typed.lower(), group.lower()
    return t == g or g.startswith(f"{t}.")


def match(ref: ObjectRef, known: list[ObjectKey]) -> list[ObjectKey]:
    """The known objects ``ref`` names, sorted (one: found; none; several: ambiguous)."""
    return sorted(
        {
            k
            for k in known
            if k.namespace == ref.namespace
            and k.name == ref.name
            and _kind_matches(ref.kind, k.kind)
            and _group_matches(ref.group, k.group)
        }
    )


def explain(ref: ObjectRef, found: list[ObjectKey], cluster: str) -> str:
    """Why ``found`` is not exactly one object: nothing known, or which ones are meant."""
    if not found:
        return f"no decisions about {ref} in cluster {cluster}"
    listed = ", ".join(f"{k.kind}.{k.group}" for k in found)
    return (
        f"{ref} is ambiguous in cluster {cluster}: {listed}; give KIND.GROUP (KIND. for the "
        "core group)"
    )
