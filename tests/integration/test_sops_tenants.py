"""SOPS Secrets and tenants on the real stack (issue 41, item 1): an encrypted Secret is bound
to the namespace and name it was encrypted with, per-tenant keys decrypt only their tenant's
Secrets, and key groups other than age are refused unless the applier enables them.

Before: one applier key decrypted every tenant's Secrets, the MAC was checked against the
recorded metadata while the Secret was written with the manifest's, so team-b republishing
team-a's encrypted file under its own namespace got team-a's plaintext written there; and a
file naming cloud KMS keys made sops try them with the node's credentials."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import ObjectStatus
from services.inputs import load
from services.kube import KubeClient

from ..conftest import NAMESPACES_MADE, unique_name
from .test_cli import driftbus
from .test_sops import age_key, b64, encrypted, hits, live_secret, secret
from .test_tenancy import put_policy, team, tenant_namespace

pytestmark = pytest.mark.reliability


async def tenant_ns(kube: KubeClient, request: pytest.FixtureRequest, prefix: str) -> str:
    """A namespace whose ``deployer`` may manage Secrets, emptied after the test."""
    ns = unique_name(prefix)
    await tenant_namespace(kube, ns, ["secrets"])
    request.node.stash.setdefault(NAMESPACES_MADE, []).append(ns)
    return ns


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def ended(name: str) -> Any:
    """An object status of ``name`` that is an end: applied or failed."""
    return lambda o: o.key.name == name and str(o.phase) in ("Applied", "Failed")


async def test_another_tenant_republishing_an_encrypted_secret_fails_naming_both(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The issue's reproduction, with one key for every tenant (the applier's only one):
    team-b takes team-a's encrypted file and publishes it under its own namespace — with the
    CLI (a file without a namespace, ``-n b``) and over the bus (team-a's document as
    published, its manifest's namespace changed). Neither writes team-a's plaintext into b."""
    a_ns, b_ns = await tenant_ns(kube, request, "sa"), await tenant_ns(kube, request, "sb")
    ta, tb = unique_name("ta"), unique_name("tb")
    await put_policy(pnc, f"tenants:{team(ta, a_ns)}{team(tb, b_ns)}")
    key = tmp_path / "applier.agekey"
    recipient = age_key(key)
    marker = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
    mine = write(tmp_path / "a" / "db.yaml", encrypted(secret("db", a_ns, marker), recipient))
    bare = secret("legacy", a_ns, marker)
    del bare["metadata"]["namespace"]  # encrypted for -n: nothing in it says where
    legacy = write(tmp_path / "legacy" / "db.yaml", encrypted(bare, recipient))
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": str(key)}
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, f"{tb}/steal")
    pipeline.start_all()

    code, out, err = await driftbus(
        pipeline, "publish", str(mine.parent), "--cluster", c, "--bundle", f"{ta}/app",
        "--wait", "--timeout", "120",
    )  # fmt: skip
    assert code == 0, f"{out}{err}\n{pipeline.logs()}"
    own = await live_secret(kube, "db", a_ns)
    assert own is not None
    assert own["data"]["password"] == b64(marker + "-string")

    # with the CLI: a file that names no namespace, given team-b's
    code, out, err = await driftbus(
        pipeline, "publish", str(legacy.parent), "--cluster", c, "--bundle", f"{tb}/copy",
        "-n", b_ns, "--wait", "--timeout", "120",
    )  # fmt: skip
    assert await live_secret(kube, "legacy", b_ns) is None, (
        f"team-a's plaintext was written into team-b's namespace {b_ns}: {out}{err}"
    )
    assert code != 0, out + err
    assert f"{legacy}#0: Secret/legacy: SOPS-encrypted: it names no metadata.namespace" in err, err

    # over the bus: team-a's document exactly as published, the manifest's namespace team-b's
    (published,) = load.load_paths([str(mine)]).manifests
    stolen = orjson.loads(orjson.dumps(published.obj))  # as it travels on the bus
    stolen["metadata"]["namespace"] = b_ns
    assert stolen["sops"]["driftbus"]["metadata"]["namespace"] == a_ns
    await pipeline.publish(pnc.jetstream(), f"{tb}/steal", [stolen])
    o: ObjectStatus = await watch.object_status(ended("db"), 90, pipeline.logs)
    assert await live_secret(kube, "db", b_ns) is None, (
        f"team-a's plaintext was written into team-b's namespace {b_ns}: {o.message}"
    )
    assert str(o.phase) == "Failed", o
    assert o.message == (
        f"Secret/{b_ns}/db: not applied: its SOPS encryption: it was encrypted as "
        f"Secret/{a_ns}/db and would be applied as Secret/{b_ns}/db: an encrypted Secret is "
        "applied only under the namespace and name it was encrypted with"
    ), o.message
    assert not hits(pipeline.all_logs_text() + out + err, marker)


async def test_per_tenant_keys_decrypt_only_their_tenants_secrets(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """``--sops-key-dir`` with ``TENANT.agekey`` per tenant: a tenant's Secret encrypted for
    its own key is applied; one encrypted for another tenant's key, or for the platform's, is
    Failed; a tenant without a key file decrypts nothing; the platform's key still decrypts
    platform bundles, and only it."""
    ns = await tenant_ns(kube, request, "keys")
    ta, tc = unique_name("ta"), unique_name("tc")
    await put_policy(pnc, f"tenants:{team(ta, ns)}{team(tc, ns)}")
    keys = tmp_path / "keys"
    keys.mkdir()
    own = age_key(keys / f"{ta}.agekey")
    other = age_key(keys / f"{unique_name('tb')}.agekey")  # another tenant's key
    platform_key = tmp_path / "platform.agekey"
    platform = age_key(platform_key)
    marker = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
    for name, recipient in (("own", own), ("foreign", other), ("platforms", platform)):
        write(tmp_path / "a" / f"{name}.yaml", encrypted(secret(name, ns, marker), recipient))
    write(tmp_path / "c" / "s.yaml", encrypted(secret("keyless", ns, marker), platform))
    for name, recipient in (("infra", platform), ("tenants", own)):
        write(
            tmp_path / "p" / f"{name}.yaml", encrypted(secret(name, namespace, marker), recipient)
        )
    pipeline.role_env["applier"] = {
        "SOPS_AGE_KEY_FILE": str(platform_key),
        "DRIFTBUS_SOPS_KEY_DIR": str(keys),
    }
    c = pipeline.cluster
    watches = {}
    for bundle in (f"{ta}/app", f"{tc}/app", "infra"):
        watches[bundle] = StatusWatch()
        await watches[bundle].start(pnc, c, bundle)
    pipeline.start_all()
    for src, bundle in (("a", f"{ta}/app"), ("c", f"{tc}/app"), ("p", "infra")):
        code, out, err = await driftbus(
            pipeline, "publish", str(tmp_path / src), "--cluster", c, "--bundle", bundle
        )
        assert code == 0, out + err

    async def outcome(bundle: str, name: str) -> tuple[str, str]:
        o = await watches[bundle].object_status(ended(name), 90, pipeline.logs)
        return str(o.phase), o.message

    got = {
        name: await outcome(bundle, name)
        for bundle, names in (
            (f"{ta}/app", ("own", "foreign", "platforms")),
            (f"{tc}/app", ("keyless",)),
            ("infra", ("infra", "tenants")),
        )
        for name in names
    }
    phases = {name: phase for name, (phase, _) in got.items()}
    assert phases == {
        "own": "Applied",
        "foreign": "Failed",
        "platforms": "Failed",
        "keyless": "Failed",
        "infra": "Applied",
        "tenants": "Failed",
    }, got
    assert "Failed to get the data key" in got["foreign"][1], got
    assert other in got["foreign"][1], got
    assert "Failed to get the data key" in got["platforms"][1], got
    assert platform in got["platforms"][1], got  # the platform's key was not tried
    assert got["keyless"][1] == (
        f"Secret/{ns}/keyless: not applied: its SOPS encryption: this applier has no age key "
        f"for tenant {tc} ({tc}.agekey in --sops-key-dir); its Secrets are decrypted with its "
        "own key only"
    ), got
    assert own in got["tenants"][1], got  # a platform bundle: the platform's key only
    for name, where in (("own", ns), ("infra", namespace)):
        live = await live_secret(kube, name, where)
        assert live is not None, name
        assert live["data"]["password"] == b64(marker + "-string")
    for name in ("foreign", "platforms", "keyless"):
        assert await live_secret(kube, name, ns) is None, name
    assert await live_secret(kube, "tenants", namespace) is None


def with_cloud_keys(text: str) -> str:
    """An age-encrypted file that also names a key of each cloud KMS, as a file encrypted for
    several recipients does (the key groups are not under the MAC)."""
    doc = yaml.safe_load(text)
    when = doc["sops"]["lastmodified"]
    doc["sops"]["kms"] = [
        {
            "arn": "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "created_at": when,
            "enc": "AQICAHh" + "A" * 200,
            "aws_profile": "",
        }
    ]
    doc["sops"]["gcp_kms"] = [
        {
            "resource_id": "projects/p/locations/global/keyRings/r/cryptoKeys/k",
            "created_at": when,
            "enc": "CiQA" + "A" * 100,
        }
    ]
    doc["sops"]["azure_kv"] = [
        {
            "vault_url": "https://example.vault.azure.net",
            "name": "sops-key",
            "version": "0123456789abcdef0123456789abcdef",
            "created_at": when,
            "enc": "A" * 100,
        }
    ]
    return yaml.safe_dump(doc, sort_keys=False)


async def test_non_age_key_groups_are_refused_unless_enabled(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    key = tmp_path / "applier.agekey"
    recipient = age_key(key)
    marker = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
    src = write(
        tmp_path / "src" / "cloud.yaml",
        with_cloud_keys(encrypted(secret("cloud", namespace, marker), recipient)),
    ).parent
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": str(key)}
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, "cloud")
    pipeline.start_all()
    publish = ["publish", str(src), "--cluster", c, "--bundle", "cloud"]
    code, out, err = await driftbus(pipeline, *publish, "--revision", "r1")
    assert code == 0, out + err
    o = await watch.object_status(ended("cloud"), 90, pipeline.logs)
    assert await live_secret(kube, "cloud", namespace) is None, (
        f"a file naming kms, gcp_kms and azure_kv keys was decrypted, not refused: {o.message}"
    )
    assert o.message == (
        f"Secret/{namespace}/cloud: not applied: its SOPS encryption: it names kms, gcp_kms, "
        "azure_kv keys, which sops would try with this node's credentials: refused (enable "
        "them with --sops-non-age-keys); encrypt it for age only (sops updatekeys)"
    ), o.message

    # enabled: sops tries them (with no cloud credentials here, in vain) and the age key
    pipeline.kill("applier-0")
    pipeline.role_env["applier"] |= {"DRIFTBUS_SOPS_NON_AGE_KEYS": "true"}
    pipeline.start("applier", "applier-1")
    code, out, err = await driftbus(pipeline, *publish, "--revision", "r2", "--wait")
    assert code == 0, f"{out}{err}\n{pipeline.logs()}"
    live = await live_secret(kube, "cloud", namespace)
    assert live is not None
    assert live["data"]["password"] == b64(marker + "-string")
