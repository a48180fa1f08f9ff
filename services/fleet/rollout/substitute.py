"""Per-cluster values (pure): ``${cluster.name}`` and ``${cluster.labels.KEY}`` in the strings of
a fleet bundle's manifests, replaced by the cluster's name and registry labels.

Opt-in (``publish --substitute``): a manifest that happens to contain ``${...}`` for another tool
is left alone unless asked. Only these two forms are variables; any other ``${...}`` is kept as
written. A label the cluster lacks is an error naming the cluster and the variable, never an empty
string: an empty region or endpoint applied to a cluster is worse than no apply at all.
Substitution runs on rendered manifests, so a Helm value reaches a cluster when the chart copies
it into a manifest's string; a chart that branches on the value sees the variable, not the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

VARIABLE = re.compile(r"\$\{cluster\.(name|labels\.([^}\s]+))\}")


class SubstitutionError(ValueError):
    """A manifest names a label the cluster lacks; the message names both."""


def missing(manifests: Iterable[Any], labels: Mapping[str, str]) -> list[str]:
    """The variables of ``manifests`` the labels cannot fill (sorted, once each)."""
    out: set[str] = set()
    for text in _strings(manifests):
        for m in VARIABLE.finditer(text):
            if m.group(2) is not None and m.group(2) not in labels:
                out.add(m.group(0))
    return sorted(out)


def labels_named(manifests: Iterable[Any]) -> list[tuple[str, str]]:
    """Each label variable the manifests name, with its label key (sorted, once each)."""
    out: set[tuple[str, str]] = set()
    for text in _strings(manifests):
        for m in VARIABLE.finditer(text):
            if m.group(2) is not None:
                out.add((m.group(0), m.group(2)))
    return sorted(out)


def lacking(cluster: str, variables: Iterable[str]) -> str:
    """The refusal of ``cluster``, which has no label for ``variables``."""
    names = ", ".join(sorted(variables))
    return f"cluster {cluster} has no label for {names} (driftbus clusters label {cluster} …)"


def refusal(manifests: Iterable[Any], cluster: str, labels: Mapping[str, str]) -> str | None:
    """Why the manifests cannot be placed in ``cluster`` (None: they can)."""
    names = missing(manifests, labels)
    return lacking(cluster, names) if names else None


def substitute(manifests: Iterable[Any], cluster: str, labels: Mapping[str, str]) -> list[Any]:
    """The manifests with every variable replaced; SubstitutionError when a label is missing."""
    if (why := refusal(manifests, cluster, labels)) is not None:
        raise SubstitutionError(why)

    def value(m: re.Match[str]) -> str:
        return cluster if m.group(2) is None else labels[m.group(2)]

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return VARIABLE.sub(value, node) if "${cluster." in node else node
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return [walk(m) for m in manifests]


def _strings(node: Any) -> Iterable[str]:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, str):
            if "${cluster." in n:
                yield n
        elif isinstance(n, dict):
            stack.extend(n.values())
        elif isinstance(n, list | tuple):
            stack.extend(n)
        elif not isinstance(n, int | float | bool | type(None)):
            stack.extend(list(n))  # a StoredManifests sequence
