"""What ties a SOPS Secret to where it may be applied (issue 41): the namespace and name it was
encrypted with (``sops.bound``), the key of its bundle's tenant (``decrypt.Keys``), and no key
group the node's credentials would open unless enabled. Tables for the pure rules; the real
``sops`` for what is refused before it runs and what a tenant's key decrypts."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from services.applier.decrypt import Decryptor, Keys
from services.applier.service import check_key_file
from services.common.settings import SettingsError
from services.inputs import sops
from services.inputs.sops import SopsError

from ..agekeys import age_key
from .test_sops import MARKER, SECRET, as_planned, encrypt, loaded


def document(ns: str | None = "a", name: str = "db", **meta: Any) -> dict[str, Any]:
    """A carried SOPS Secret (as ``load`` publishes it) encrypted as ``ns``/``name``."""
    metadata = {"name": name, **({"namespace": ns} if ns is not None else {})}
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "data": {"k": "ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]"},
        "sops": {"mac": "ENC[x]", "age": [{"recipient": "age1x", "enc": "e"}], **meta},
    }
    return sops.carried(doc)


def applied_as(doc: dict[str, Any], ns: str | None, name: str = "db") -> dict[str, Any]:
    """``doc`` as the planner would send it to be applied as ``ns``/``name``."""
    out = copy.deepcopy(doc)
    out["metadata"] = {"name": name, **({"namespace": ns} if ns is not None else {})}
    out["metadata"]["labels"] = {"driftbus.io/bundle": "x"}
    return out


@pytest.mark.parametrize(
    ("encrypted_as", "applied", "refusal"),
    [
        pytest.param(("a", "db"), ("a", "db"), None, id="same-namespace-and-name-applied"),
        pytest.param(
            ("a", "db"),
            ("b", "db"),
            "it was encrypted as Secret/a/db and would be applied as Secret/b/db",
            id="another-namespace-refused-naming-both",
        ),
        pytest.param(
            ("a", "db"),
            ("a", "api"),
            "it was encrypted as Secret/a/db and would be applied as Secret/a/api",
            id="another-name-refused",
        ),
        pytest.param(
            (None, "db"),
            ("b", "db"),
            "it was encrypted as Secret/db (no namespace) and would be applied as Secret/b/db",
            id="no-namespace-recorded-given-one-by-the-planner-refused",
        ),
        pytest.param(
            (None, "db"),
            (None, "db"),
            "it was encrypted as Secret/db (no namespace)",
            id="no-namespace-at-all-refused",
        ),
    ],
)
def test_bound_to_the_namespace_and_name_it_was_encrypted_with(
    encrypted_as: tuple[str | None, str], applied: tuple[str | None, str], refusal: str | None
) -> None:
    manifest = applied_as(document(*encrypted_as), *applied)
    if refusal is None:
        sops.bound(manifest)
        return
    with pytest.raises(SopsError) as err:
        sops.bound(manifest)
    assert str(err.value).startswith(refusal), err.value
    assert "applied only under the namespace and name it was encrypted with" in str(err.value)


def test_the_record_is_a_copy_of_the_metadata() -> None:
    """What later changes the object's metadata (in the same process) is not recorded."""
    doc = document("a")
    doc["metadata"]["namespace"] = "b"
    assert doc["sops"][sops.RECORD]["metadata"] == {"name": "db", "namespace": "a"}
    with pytest.raises(SopsError, match="encrypted as Secret/a/db and would be applied as"):
        sops.bound(doc)


def test_a_manifest_without_a_record_is_its_own_document() -> None:
    """Not published by ``load``: the MAC checks its own metadata, so nothing to compare."""
    doc = document()
    bare = {**doc, "sops": {k: v for k, v in doc["sops"].items() if k != sops.RECORD}}
    sops.bound(applied_as(bare, "b"))


@pytest.mark.parametrize("where", [sops.check, sops.bound], ids=["publish", "apply"])
def test_a_mac_that_leaves_the_metadata_out_is_refused(where: Any) -> None:
    doc = document(mac_only_encrypted=True)
    with pytest.raises(SopsError, match="mac_only_encrypted: its MAC does not cover"):
        where(doc)


def test_a_publish_names_the_namespace() -> None:
    doc = document(None)
    with pytest.raises(SopsError, match=r"it names no metadata\.namespace: an encrypted Secret"):
        sops.check(doc)
    sops.check(document("a"))


@pytest.mark.parametrize(
    ("meta", "others"),
    [
        pytest.param({"age": [{"recipient": "age1x"}]}, [], id="age-only"),
        pytest.param({"age": [{}], "kms": [], "pgp": None}, [], id="empty-groups-are-none"),
        pytest.param(
            {"age": [{}], "azure_kv": [{}], "kms": [{}], "gcp_kms": [{}]},
            ["kms", "gcp_kms", "azure_kv"],
            id="each-cloud-named-in-order",
        ),
        pytest.param(
            {"key_groups": [{"age": [{}]}, {"hc_vault": [{}], "pgp": [{}], "hckms": [{}]}]},
            ["pgp", "hckms", "hc_vault"],
            id="shamir-key-groups-read-too",
        ),
    ],
)
def test_other_key_groups(meta: dict[str, Any], others: list[str]) -> None:
    assert sops.other_key_groups(meta) == others


def test_age_in_shamir_key_groups_counts_as_a_recipient() -> None:
    doc = document()
    doc["sops"] = {"mac": "ENC[x]", "key_groups": [{"age": [{"recipient": "age1x"}]}]}
    sops.check(doc)


@pytest.mark.parametrize(
    ("keys", "bundle", "key", "refusal"),
    [
        pytest.param(Keys(platform="/p"), "web", "/p", None, id="one-key-platform-bundle"),
        pytest.param(Keys(platform="/p"), "team-a/web", "/p", None, id="one-key-every-tenant"),
        pytest.param(
            Keys(platform="/p", tenant_dir="/d"),
            "team-a/web",
            "/d/team-a.agekey",
            None,
            id="key-dir-a-tenant-its-own-key-only",
        ),
        pytest.param(
            Keys(platform="/p", tenant_dir="/d"), "web", "/p", None, id="key-dir-platform-key"
        ),
        pytest.param(
            Keys(tenant_dir="/d"),
            "web",
            "",
            "no age key to decrypt it (--sops-age-key-file, or SOPS_AGE_KEY_FILE in its "
            "environment) for platform bundles",
            id="key-dir-no-platform-key",
        ),
        pytest.param(Keys(), "team-a/web", "", "no age key", id="no-key-at-all"),
    ],
)
def test_the_key_of_a_bundle(keys: Keys, bundle: str, key: str, refusal: str | None) -> None:
    if refusal is None:
        assert keys.key_for(bundle) == key
        return
    with pytest.raises(SopsError) as err:
        keys.key_for(bundle)
    assert refusal in str(err.value)


@pytest.mark.parametrize(
    ("keys", "bundle", "refusal"),
    [
        pytest.param(Keys(), "web", "(enable them with --sops-non-age-keys)", id="off-refused"),
        pytest.param(Keys(non_age=True), "web", None, id="enabled"),
        pytest.param(Keys(non_age=True), "team-a/web", None, id="enabled-one-key-for-all"),
        pytest.param(
            Keys(non_age=True, tenant_dir="/d"),
            "team-a/web",
            "(a tenant's Secrets are decrypted with its own age key only)",
            id="enabled-never-for-a-tenant-with-keys-of-its-own",
        ),
        pytest.param(Keys(non_age=True, tenant_dir="/d"), "web", None, id="enabled-platform"),
    ],
)
def test_other_key_groups_refused_unless_enabled(
    keys: Keys, bundle: str, refusal: str | None
) -> None:
    meta = {"age": [{}], "kms": [{"arn": "arn:aws:kms:x"}]}
    keys.refuse_others(bundle, {"age": [{}]})  # age only: always
    if refusal is None:
        keys.refuse_others(bundle, meta)
        return
    with pytest.raises(SopsError) as err:
        keys.refuse_others(bundle, meta)
    assert str(err.value).startswith("it names kms keys, which sops would try with this node's")
    assert refusal in str(err.value)


# --- with the real sops ---------------------------------------------------------------------


def run(keys: Keys, manifest: dict[str, Any], bundle: str) -> dict[str, Any]:
    return asyncio.run(Decryptor(keys, binary=Path("/nonexistent")).decrypt(manifest, bundle))


def test_refused_before_sops_runs(tmp_path: Path) -> None:
    """A manifest not bound to its object, or naming other key groups, is refused without
    running sops (the binary here does not exist) even by the right key."""
    key = tmp_path / "k.agekey"
    obj = as_planned(loaded(tmp_path, encrypt(SECRET, age_key(key))))
    moved = {**obj, "metadata": {**obj["metadata"], "namespace": "elsewhere"}}
    with pytest.raises(SopsError, match="encrypted as Secret/shop/db and would be applied as"):
        run(Keys(platform=str(key)), moved, "team-b/x")
    cloud = copy.deepcopy(obj)
    cloud["sops"]["kms"] = [{"arn": "arn:aws:kms:x", "enc": "e"}]
    with pytest.raises(SopsError, match="it names kms keys"):
        run(Keys(platform=str(key)), cloud, "team-a/x")


def test_a_tenants_key_decrypts_its_own_secrets_only(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    mine = age_key(keys / "team-a.agekey")
    platform = tmp_path / "platform.agekey"
    age_key(platform)
    obj = as_planned(loaded(tmp_path, encrypt(SECRET, mine)))
    k = Keys(platform=str(platform), tenant_dir=str(keys))
    got = asyncio.run(Decryptor(k).decrypt(obj, "team-a/shop"))
    assert got["stringData"] == {"password": MARKER}
    for bundle, why in (
        ("team-b/shop", "no age key for tenant team-b (team-b.agekey in --sops-key-dir)"),
        ("shop", "Failed to get the data key"),  # a platform bundle: the platform's key
    ):
        with pytest.raises(SopsError) as err:
            asyncio.run(Decryptor(k).decrypt(obj, bundle))
        assert why in str(err.value), err.value
        assert MARKER not in str(err.value)


def test_a_key_dir_that_cannot_be_read_stops_the_applier(tmp_path: Path) -> None:
    check_key_file("", str(tmp_path))  # a directory: fine, even empty
    for bad in (tmp_path / "absent", tmp_path / "file"):
        (tmp_path / "file").write_text("x")
        with pytest.raises(
            SettingsError,
            match=r"--sops-key-dir / DRIFTBUS_SOPS_KEY_DIR=.*: not a readable directory",
        ):
            check_key_file("", str(bad))
