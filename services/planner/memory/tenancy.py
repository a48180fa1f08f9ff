"""The tenant policy a planner holds its bundles to, or why it holds none (pure).

The policy on the bus (``services.tenancy.policy``) is followed live; what this value keeps is
the one in force and whether the latest stored can be used. One that cannot is never replaced
by a guess: no new revision is taken, of any bundle, until a valid policy is applied.
"""

from __future__ import annotations

import dataclasses

from schemas.messages import Impersonation
from schemas.tenants import TenantPolicy
from services.planner.rule import limits


@dataclasses.dataclass(eq=False)
class Tenancy:
    """The tenant policy in force, and why the latest one cannot be used ("" when it can)."""

    policy: TenantPolicy = dataclasses.field(default_factory=TenantPolicy)
    """The tenant policy in force (the tenants KV bucket's, followed live)."""
    unusable: str = ""
    """Why the latest policy stored on the bus cannot be used, at start or since ("" when it
    can): then no new revision is taken, of any bundle, until a valid policy is applied — a
    tenant's limits are never guessed, nor a lockdown forgotten."""

    def use(self, policy: TenantPolicy) -> None:
        """``policy`` is in force from now on (a usable one: nothing is refused for the last)."""
        self.policy, self.unusable = policy, ""

    def identity(self, bundle: str) -> Impersonation | None:
        """Whom the writes of ``bundle`` are made as (its tenant's ServiceAccount), now."""
        return limits.identity(self.policy, bundle)
