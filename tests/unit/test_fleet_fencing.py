"""The rollout driver's fencing (issue 41 item 12) and a tenant's fleet held to its NATS
credentials (item 8), the pure parts: which placement a planner refuses (``revision.fenced``),
the lease's token and its check before every publish, and which clusters a tenant's recorded
credentials admit (``credentials_refusal``). The black-box tests are in
tests/integration/test_fleet.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import msgspec
import pytest

from schemas.bundle import Bundle
from schemas.codec import decode, encode
from schemas.fleet import Placement, RolloutState
from schemas.tenants import TenantCredentials
from services.cli.main import main
from services.fleet.driver.lease import Lease, LeaseLost
from services.fleet.driver.placing import Placer
from services.fleet.rollout.steps import Place
from services.planner.rule.revision import fenced
from services.tenancy.clusters import credentials_refusal


def placement(token: int, *, fleet: bool = True, bundle: str = "web") -> Bundle:
    return Bundle(cluster="c", bundle=bundle, revision="r", fleet=fleet, fencing_token=token)


@pytest.mark.parametrize(
    ("seen", "message", "refused", "after"),
    [
        ({}, placement(5), False, {"web": 5}),
        ({"web": 5}, placement(5), False, {"web": 5}),  # the same driver's next placement
        ({"web": 5}, placement(9), False, {"web": 9}),  # a driver that took over
        ({"web": 9}, placement(5), True, {"web": 9}),  # the deposed one, late
        ({"web": 9}, placement(0), False, {"web": 9}),  # not the driver's (an old driver's)
        ({"web": 9}, placement(5, fleet=False), False, {"web": 9}),  # a user's publish
        ({"web": 9}, placement(5, bundle="api"), False, {"web": 9, "api": 5}),  # per bundle
    ],
)
def test_a_placement_older_than_one_taken_is_refused(
    seen: dict[str, int], message: Bundle, refused: bool, after: dict[str, int]
) -> None:
    why = fenced(message, seen)
    assert bool(why) is refused
    if refused:
        assert f"fencing token {message.fencing_token}" in why
        assert "a newer driver's is 9" in why
    assert seen == after


def test_a_placement_carries_its_token_on_the_wire_and_old_messages_read_as_zero() -> None:
    data = encode(placement(7))
    assert decode(data, Bundle).fencing_token == 7
    old = msgspec.json.decode(encode(placement(0)))
    del old["fencing_token"]  # an older driver's placement
    assert decode(msgspec.json.encode(old), Bundle).fencing_token == 0


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lease(clock: Clock | None = None) -> Lease:
    return Lease(
        None,  # type: ignore[arg-type]
        holder="a", interval=1.0, timeout=4.0, taken=lambda: None, clock=clock or Clock(),
    )  # fmt: skip


def test_the_lease_gives_its_token_only_while_it_is_held() -> None:
    clock = Clock()
    held = lease(clock)
    with pytest.raises(LeaseLost):
        held.check()  # never held
    held._take(clock.now, 42, "test")  # held for timeout - interval = 3 s from now
    clock.now += 2.9
    assert held.check() == 42
    clock.now += 0.6  # a stall past the lease: its own clock says so
    with pytest.raises(LeaseLost, match=r"ran out 0\.5s ago"):
        held.check()


def test_nothing_is_published_once_the_lease_is_lost() -> None:
    """The placer asks the lease before each publish: a lost lease raises before the bus is
    touched (the placer's bus here is None: any publish would fail otherwise)."""
    lost = lease()
    placer = Placer(None, None, lost.check)  # type: ignore[arg-type]
    state = RolloutState(bundle="web", target=Placement(revision="r1"))
    action = Place("c", "target", 0, dt.datetime.now(dt.UTC))

    async def perform() -> Any:
        return await placer.perform(state, action)

    with pytest.raises(LeaseLost):
        asyncio.run(perform())


CREDS = TenantCredentials(tenants={"team-a": ("dev", "qa")})


@pytest.mark.parametrize(
    ("credentials", "tenant", "cluster", "refused"),
    [
        (None, "team-a", "prod", ""),  # none recorded: a bus without tenant publishers
        (CREDS, "team-a", "dev", ""),
        (CREDS, "team-a", "qa", ""),
        (
            CREDS,
            "team-a",
            "prod",
            'tenant team-a may not publish to cluster "prod": its NATS credentials allow only '
            "[dev, qa]",
        ),
        (
            CREDS,
            "team-b",
            "dev",
            'tenant team-b may not publish to cluster "dev": its NATS credentials name no '
            "cluster (nats-config --tenant records none for it)",
        ),
        (CREDS, "", "prod", ""),  # a platform bundle is no tenant's
        (TenantCredentials(), "team-a", "dev", "its NATS credentials name no cluster"),
    ],
)
def test_a_tenants_fleet_reaches_only_the_clusters_its_credentials_name(
    credentials: TenantCredentials | None, tenant: str, cluster: str, refused: str
) -> None:
    why = credentials_refusal(credentials, tenant, cluster)
    if not refused:
        assert why is None
    else:
        assert why is not None
        assert refused in why


def test_nats_config_record_refuses_a_cluster_that_is_no_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit, match="nats-config --record"):
        main(["nats-config", "--cluster", "dev", "--tenant", "team-a=Dev_1", "--record"])
