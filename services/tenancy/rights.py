"""What a tenant may ask of the platform beyond its limits, and only if its policy grants it
(pure; docs/tenancy.md "Rights").

Two things a tenant's bundle can ask that reach past the tenant itself:

- ``--override-window`` writes through the platform's sync windows (a change freeze). Granted
  by ``rights.overrideWindows``; otherwise the revision is refused whole
  (:func:`override_refusal`, checked by the planner and ``driftbus plan`` before anything else).
- A commit status posted by the platform's provider, with the platform's token, on the
  repository the bundle's ``source`` names (which its publisher writes). Granted per repository
  by ``rights.commitStatusRepositories``; otherwise nothing is posted
  (:func:`commit_status_refusal`, checked by ``driftbus notify``).

Platform bundles (no tenant) keep every right: their publishers already write anything as
driftbus itself. Each refusal is one line naming the tenant, the bundle and the missing right.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Final

from schemas.subjects import split_bundle
from schemas.tenants import Tenant, TenantPolicy

REPOSITORY: Final = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
"""A repository as a commit-status provider names it: ``OWNER/REPO``, ``GROUP/SUB/PROJECT``, or
a GitLab project's number. No ``%``, no ``..``: the name goes into the API's URL path."""
_PATTERN: Final = re.compile(r"[A-Za-z0-9_.*?\[\]!/-]+")


def override_refusal(policy: TenantPolicy, bundle: str) -> str | None:
    """Why ``bundle``'s revision may not be published with ``--override-window``, or None."""
    name = split_bundle(bundle)[0]
    if not name:
        return None
    tenant = policy.tenants.get(name)
    if tenant is not None and tenant.rights.override_windows:
        return None
    return (
        f"tenant {name} may not override sync windows: bundle {bundle} was published with "
        "--override-window, and its policy does not grant rights.overrideWindows"
    )


def commit_status_refusal(policy: TenantPolicy | None, bundle: str, repository: str) -> str | None:
    """Why the platform's provider may not post a commit status on ``repository`` for
    ``bundle``, or None. ``policy`` None: the tenant policy is not known (never read, or
    unusable), so a tenant's bundle gets nothing."""
    name = split_bundle(bundle)[0]
    if not name:
        return None
    if policy is None:
        return (
            f"tenant {name}'s bundle {bundle}: no commit status on {repository} with the "
            "platform's token: the tenant policy is not known (unreadable or unusable)"
        )
    tenant = policy.tenants.get(name)
    if tenant is None:
        return (
            f'tenant "{name}" is not defined in the tenant policy: no commit status on '
            f"{repository} for bundle {bundle}"
        )
    granted = tenant.rights.commit_status_repositories
    plain = REPOSITORY.fullmatch(repository) and not {".", ".."} & set(repository.split("/"))
    if plain and any(fnmatchcase(repository.lower(), p.lower()) for p in granted):
        return None
    return (
        f"tenant {name} may not have the platform post commit statuses on {repository}: "
        f"bundle {bundle} names it, and its policy's rights.commitStatusRepositories "
        f"[{', '.join(granted)}] does not grant it"
    )


def rights_problem(tenant: Tenant) -> tuple[tuple[str | int, ...], str] | None:
    """The first pattern of ``rights`` that can match no repository: (where, what)."""
    for i, pattern in enumerate(tenant.rights.commit_status_repositories):
        if not _PATTERN.fullmatch(pattern):
            why = "has characters a repository path cannot contain"
        elif pattern.count("[") != pattern.count("]"):
            why = "has an unbalanced '[' or ']'"
        else:
            continue
        key = "commitStatusRepositories"
        return ("rights", key, i), f"rights.{key}[{i}] {pattern!r}: {why}"
    return None
