"""The settings a planner follows on the bus, each with its own rule for a stored value that
cannot be used: the tenant policy fails closed (no new revision is taken until a valid one
comes, never the previous, perhaps wider, policy), the sync windows keep the last good ones (a
deny window is never dropped for a typo). Both say why on every bundle's status and in the log.
"""

from __future__ import annotations

import dataclasses
import logging

from schemas.windows import WindowsFile
from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.planner.shell.intake import BundleIntake
from services.planner.shell.periodic import Duties
from services.stored.document import Good
from services.tenancy import store as policy
from services.tenancy.policy import PolicyError
from services.windows.document import compiled

log = logging.getLogger("driftbus.planner")


@dataclasses.dataclass(eq=False)
class Followed:
    """What a new version of a followed setting changes in the cluster's planner."""

    state: ClusterState
    intake: BundleIntake
    duties: Duties

    def policy(self, msg: bus.Message) -> None:
        """A new tenant policy, or one that cannot be used: then no new revision is taken (the
        ones in force stay as they are) until a valid one comes — the same as a planner that
        starts on it, never the previous, perhaps wider, policy."""
        try:
            new = policy.policy_of(msg)
        except PolicyError as exc:
            self.state.tenancy.unusable = (
                f"the tenant policy on the bus is unusable ({exc}); no new revision is taken "
                "until a valid one is applied (driftbus tenants apply FILE)"
            )
            log.error("cluster %s: %s", self.state.cluster, self.state.tenancy.unusable)
            return
        if new != self.state.tenancy.policy or self.state.tenancy.unusable:
            log.info("cluster %s: tenant policy changed", self.state.cluster)
            self.intake.policy_changed(new)

    def windows(self, good: Good[WindowsFile]) -> None:
        """New sync windows in force (removed: none). Unusable ones leave the last good ones in
        force — a deny window is never dropped for a typo — said in the log and on status."""
        st = self.state
        if good.problem:
            st.gates.windows_unusable = f"{good.problem}; the last good windows stay in force"
            log.error("cluster %s: %s", st.cluster, st.gates.windows_unusable)
            return
        windows = compiled(good.value)
        st.gates.set_windows(windows)
        log.info("cluster %s: %d sync windows in force", st.cluster, len(windows))
        self.duties.windows_changed(new=True)
