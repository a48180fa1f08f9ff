"""Rights a tenant's policy grants (services/tenancy/rights.py): ``--override-window`` and
the platform's commit statuses on a repository, none unless granted; a platform bundle keeps
both; and what ``driftbus notify`` makes of them (``match.platform_token_refusal``)."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import msgspec
import pytest

from schemas.notify import EventKind, Provider, ProviderType
from schemas.tenants import Rights, Tenant, TenantPolicy
from services.notify.events import Event
from services.notify.match import platform_token_refusal
from services.tenancy import policy as tenancy
from services.tenancy.rights import commit_status_refusal, override_refusal

SHA = "0123456789abcdef0123456789abcdef01234567"


def policy(**rights: Rights) -> TenantPolicy:
    return TenantPolicy(
        tenants={
            name: Tenant(service_account=f"sys/{name}", rights=r) for name, r in rights.items()
        }
    )


GRANTED = policy(a=Rights(override_windows=True, commit_status_repositories=("acme/*", "x/one")))
NONE = policy(a=Rights())


@pytest.mark.parametrize(
    ("pol", "bundle", "refused"),
    [
        pytest.param(GRANTED, "a/web", False, id="granted"),
        pytest.param(NONE, "a/web", True, id="not-granted"),
        pytest.param(NONE, "web", False, id="platform-bundle"),
        pytest.param(NONE, "b/web", True, id="unknown-tenant"),
    ],
)
def test_override_refusal(pol: TenantPolicy, bundle: str, refused: bool) -> None:
    why = override_refusal(pol, bundle)
    assert (why is not None) is refused
    if why is not None:  # one line: the tenant, the bundle, the right
        assert why.startswith(f"tenant {bundle.split('/')[0]} may not override sync windows")
        assert f"bundle {bundle}" in why
        assert "rights.overrideWindows" in why
        assert "\n" not in why


@pytest.mark.parametrize(
    ("pol", "bundle", "repository", "refused"),
    [
        pytest.param(GRANTED, "a/web", "acme/shop", False, id="glob"),
        pytest.param(GRANTED, "a/web", "ACME/Shop", False, id="case-insensitive"),
        pytest.param(GRANTED, "a/web", "acme/sub/project", False, id="star-matches-slash"),
        pytest.param(GRANTED, "a/web", "x/one", False, id="exact"),
        pytest.param(GRANTED, "a/web", "x/two", True, id="other-repository"),
        pytest.param(GRANTED, "a/web", "victim/prod", True, id="foreign"),
        pytest.param(GRANTED, "a/web", "acme/..%2Fvictim", True, id="percent-escape"),
        pytest.param(GRANTED, "a/web", "acme/../victim/x", True, id="dot-dot"),
        pytest.param(GRANTED, "a/web", "acme/a b", True, id="white-space"),
        pytest.param(NONE, "a/web", "acme/shop", True, id="none-granted"),
        pytest.param(NONE, "b/web", "acme/shop", True, id="unknown-tenant"),
        pytest.param(NONE, "web", "victim/prod", False, id="platform-bundle"),
        pytest.param(None, "a/web", "acme/shop", True, id="policy-not-known"),
        pytest.param(None, "web", "acme/shop", False, id="platform-bundle-policy-not-known"),
    ],
)
def test_commit_status_refusal(
    pol: TenantPolicy | None, bundle: str, repository: str, refused: bool
) -> None:
    why = commit_status_refusal(pol, bundle, repository)
    assert (why is not None) is refused, why
    if why is not None:
        assert bundle in why
        assert repository in why
        assert "\n" not in why


def event(bundle: str, repository: str = "victim/prod") -> Event:
    return Event(
        EventKind.READY,
        bundle,
        SHA,
        cluster="prod",
        source=f"https://github.com/{repository}.git@{SHA}",
    )


GITHUB = Provider(name="gh", type=ProviderType.GITHUB, token_file="/t")
FIXED = Provider(name="gh", type=ProviderType.GITHUB, token_file="/t", repository="acme/shop")
HOOK = Provider(name="hook", type=ProviderType.WEBHOOK, url="https://hooks.example/x")


@pytest.mark.parametrize(
    ("tenant", "provider", "e", "refused"),
    [
        pytest.param("", GITHUB, event("a/web"), True, id="platform-token-foreign-repository"),
        pytest.param("", GITHUB, event("a/web", "acme/shop"), False, id="granted-repository"),
        pytest.param("", FIXED, event("a/web"), False, id="provider-repository-granted"),
        pytest.param("", GITHUB, event("web"), False, id="platform-bundle"),
        pytest.param("a", GITHUB, event("a/web"), False, id="tenants-own-provider-own-token"),
        pytest.param("", HOOK, event("a/web"), False, id="not-a-commit-status"),
    ],
)
def test_platform_token_refusal(tenant: str, provider: Provider, e: Event, refused: bool) -> None:
    why = platform_token_refusal(tenant, provider, e, GRANTED)
    assert (why is not None) is refused, why


def test_a_fixed_repository_not_granted_is_refused_too() -> None:
    """The provider's own ``repository`` with the commit the tenant names: still its grant."""
    fixed = msgspec.structs.replace(FIXED, repository="platform/infra")
    assert platform_token_refusal("", fixed, event("a/web", "acme/shop"), GRANTED)


def test_rights_are_read_from_the_file_and_stored_policies_without_them_read_unchanged() -> None:
    text = (
        "tenants:\n  a:\n    serviceAccount: sys/a\n    rights:\n      overrideWindows: true\n"
        '      commitStatusRepositories: ["acme/*"]\n'
    )
    pol = tenancy.load_policy(text, "t.yaml")
    assert pol.tenants["a"].rights == Rights(True, ("acme/*",))
    stored = tenancy.dump_policy(pol)
    assert b'"rights":{"overrideWindows":true,"commitStatusRepositories":["acme/*"]}' in stored
    old = b'{"tenants":{"a":{"serviceAccount":"sys/a"}}}'
    assert tenancy.decode_stored(old).tenants["a"].rights == Rights()
    assert b"rights" not in tenancy.dump_policy(tenancy.decode_stored(old))


@pytest.mark.parametrize(
    ("rights", "error"),
    [
        pytest.param(
            "      overrideWindow: true\n",
            "t.yaml:5: tenant a: rights: unknown key 'overrideWindow'",
        ),
        pytest.param(
            '      commitStatusRepositories: ["acme/a b"]\n',
            "t.yaml:5: tenant a: rights.commitStatusRepositories[0] 'acme/a b': has characters",
        ),
        pytest.param(
            '      commitStatusRepositories: ["acme/[a-z"]\n',
            "t.yaml:5: tenant a: rights.commitStatusRepositories[0] 'acme/[a-z': has an unbalanced",
        ),
        pytest.param(
            '      commitStatusRepositories: [""]\n',
            "tenant a: rights.commitStatusRepositories[0] must not be empty",
        ),
    ],
)
def test_bad_rights_are_refused_naming_the_line(rights: str, error: str) -> None:
    text = f"tenants:\n  a:\n    serviceAccount: sys/a\n    rights:\n{rights}"
    with pytest.raises(tenancy.PolicyError) as info:
        tenancy.load_policy(text, "t.yaml")
    assert error in str(info.value), str(info.value)


async def test_the_service_refuses_posts_it_is_not_granted_and_logs_each_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``Notifier.handle``: a platform GitHub provider and a tenant's bundle naming a foreign
    repository: ``refused`` (counted every time, logged once); nothing queued. Granted, or a
    platform bundle: sent. Until the policy is known nothing of a tenant's is sent."""
    from services.notify import config
    from services.notify.gate import Verdict
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    token = tmp_path / "token"
    token.write_text("t\n")
    cfg = config.load(
        "providers:\n- name: gh\n  type: github\n  apiUrl: http://127.0.0.1:1\n"
        f"  tokenFile: {token}\nalerts:\n- providers: [gh]\n",
        "n.yaml",
    )
    caplog.set_level(logging.WARNING)
    async with aiohttp.ClientSession() as session:
        n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=1.0)
        n.configure("platform", cfg)
        foreign = event("a/web")
        assert n.handle(foreign) == [("platform/gh", Verdict.REFUSED)]  # policy not known
        n.tenants = GRANTED
        assert n.handle(foreign) == [("platform/gh", Verdict.REFUSED)]
        assert n.handle(foreign) == [("platform/gh", Verdict.REFUSED)]
        said = [r.getMessage() for r in caplog.records if "commit status refused" in r.getMessage()]
        assert len(said) == 2, said  # policy unknown, then not granted: each once
        assert "rights.commitStatusRepositories [acme/*, x/one]" in said[1], said
        assert n.configured["platform"].outboxes == {}
        assert n.handle(event("a/web", "acme/shop")) == [("platform/gh", Verdict.SEND)]
        assert n.handle(event("web")) == [("platform/gh", Verdict.SEND)]
        await n.close()
