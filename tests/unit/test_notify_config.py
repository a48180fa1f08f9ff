"""The notifications file: read, checked, a tenant's reach refused (services/notify/config.py)."""

from __future__ import annotations

import pytest

from schemas.notify import EventKind, NotifyConfig, ProviderType
from services.notify import config

GOOD = """
providers:
- name: ops
  type: webhook
  url: https://hooks.example.com/driftbus
  secretFile: /etc/driftbus/hook-key
- name: chat
  type: slack
  urlFile: /etc/driftbus/slack-url
- name: commits
  type: github
  tokenFile: /etc/driftbus/github-token
  repository: acme/shop
alerts:
- providers: [ops, chat]
  bundles: ["team-a/*"]
  clusters: ["prod-*"]
  events: [Ready, Failed, DriftCorrected]
- providers: [commits]
  clusterSelector: env=prod
limits:
  dedupeSeconds: 60
  perMinute: 5
"""


def test_a_good_file_is_read_with_its_keys() -> None:
    cfg = config.load(GOOD, "n.yaml")
    assert [p.type for p in cfg.providers] == [
        ProviderType.WEBHOOK,
        ProviderType.SLACK,
        ProviderType.GITHUB,
    ]
    assert cfg.providers[0].secret_file == "/etc/driftbus/hook-key"
    assert cfg.alerts[0].events == (EventKind.READY, EventKind.FAILED, EventKind.DRIFT_CORRECTED)
    assert cfg.alerts[1].cluster_selector == "env=prod"
    assert (cfg.limits.dedupe_seconds, cfg.limits.per_minute) == (60, 5)
    # what is stored is read back the same, and checked again
    assert config.decode_stored(config.dump(cfg), "platform") == cfg


def test_an_empty_file_is_the_empty_configuration() -> None:
    assert config.load("", "n.yaml") == NotifyConfig()


P = "providers:\n- name: p\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "must be a map"),
        ("a: 1\n---\nb: 2\n", "a second document"),
        ("providers: 3\n", "Expected `array`"),
        ("bogus: 1\n", "unknown field `bogus`"),
        (P + "  type: sms\n", "Invalid enum value 'sms'"),
        (P + "  type: webhook\n", "one of url or urlFile"),
        (P + "  type: webhook\n  url: ftp://x\n", "http:// or https://"),
        (P + "  type: slack\n  url: https://hooks.slack.com/services/T/B/x\n", "its credential"),
        (P + "  type: teams\n", "needs urlFile"),
        (P + "  type: github\n", "needs tokenFile"),
        (P + "  type: github\n  tokenFile: t\n  repository: shop\n", "OWNER/REPO"),
        (P + "  type: gitlab\n  tokenFile: t\n  urlFile: u\n", "apiUrl, not urlFile"),
        (P + "  type: slack\n  urlFile: u\n  secretFile: k\n", "secretFile (an HMAC key)"),
        (P + "  type: slack\n  urlFile: u\n  tokenFile: k\n", "tokenFile is for github"),
        (
            P + "  type: webhook\n  url: http://x\n- name: p\n  type: slack\n  urlFile: u\n",
            "second",
        ),
        (
            P + "  type: webhook\n  url: http://x\nalerts:\n- providers: [q]\n",
            "provider 'q' is not defined",
        ),
        (
            P + "  type: webhook\n  url: http://x\nalerts:\n- providers: [p]\n"
            "  clusterSelector: 'env in (a'\n",
            "clusterSelector",
        ),
        (
            P + "  type: webhook\n  url: http://x\nalerts:\n- providers: [p]\n  events: [Nope]\n",
            "Nope",
        ),
        ("limits:\n  perMinute: 0\n", "Expected `int` >= 1"),
        ("providers:\n- name: Bad_Name\n  type: webhook\n  url: http://x\n", "$.providers[0].name"),
    ],
)
def test_an_unusable_file_is_refused_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(config.ConfigError, match=r"^n\.yaml") as got:
        config.load(text, "n.yaml")
    assert message in str(got.value)


TENANT_FILE = """
providers:
- name: p
  type: webhook
  url: http://127.0.0.1:1/x
alerts:
- providers: [p]
{filters}
"""


@pytest.mark.parametrize(
    "filters",
    [
        "",
        '  bundles: ["team-a/*"]',
        '  bundles: ["team-a/web", "team-a/db-?"]',
        '  tenants: ["team-a"]',
        '  clusters: ["*"]',
    ],
)
def test_a_tenant_may_name_its_own_bundles(filters: str) -> None:
    config.load(TENANT_FILE.format(filters=filters), "t.yaml", "team-a")


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ('  bundles: ["*"]', "bundles '*' reaches beyond tenant team-a"),
        ('  bundles: ["team-b/*"]', "bundles 'team-b/*' reaches beyond"),
        ('  bundles: ["team-*/web"]', "reaches beyond"),
        ('  bundles: ["team-a*"]', "reaches beyond"),
        ('  bundles: ["web"]', "reaches beyond"),  # a platform bundle
        ('  bundles: ["*/web"]', "reaches beyond"),
        ('  tenants: ["*"]', "tenants '*' reaches beyond tenant team-a"),
        ('  tenants: ["team-b"]', "reaches beyond"),
    ],
)
def test_a_tenant_naming_another_tenants_bundles_is_refused(filters: str, message: str) -> None:
    text = TENANT_FILE.format(filters=filters)
    with pytest.raises(config.ConfigError, match=r"^t.yaml:7: alerts\[0\]") as got:
        config.load(text, "t.yaml", "team-a")
    assert message in str(got.value)
    config.load(text, "t.yaml")  # the platform may


def test_a_stored_tenant_configuration_reaching_further_is_refused_on_reading() -> None:
    """Written past ``apply`` (by hand with the admin's identity, under a tenant's key), it is
    still refused by the service."""
    broad = config.dump(config.load(TENANT_FILE.format(filters='  bundles: ["*"]'), "x"))
    with pytest.raises(config.ConfigError, match=r"stored notifications tenant\.team-a"):
        config.decode_stored(broad, "tenant.team-a")
    assert config.decode_stored(broad, "platform").alerts[0].bundles == ("*",)


@pytest.mark.parametrize(
    ("tenant", "key"), [("", "platform"), ("team-a", "tenant.team-a"), ("a1", "tenant.a1")]
)
def test_keys_name_the_configuration(tenant: str, key: str) -> None:
    assert config.key_of(tenant) == key
    assert config.tenant_of(key) == tenant


@pytest.mark.parametrize("key", ["policy", "tenant.", "tenant.Team_A", "tenant.a.b", "platformx"])
def test_other_keys_are_no_configuration(key: str) -> None:
    assert config.tenant_of(key) is None


def test_a_tenant_name_that_is_no_dns_label_is_refused() -> None:
    with pytest.raises(config.ConfigError, match="DNS label"):
        config.key_of("Team_A")
