"""SOPS documents (services/inputs/sops.py, load.py): accepted encrypted, refused when driftbus
could not key them, and decrypted by the real ``sops`` (built from its pinned module) only
from the manifest the applier receives — after the planner owned it. The binding to the namespace
and name, per-tenant keys and other key groups: ``test_sops_binding.py``."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.applier.decrypt import Decryptor, Keys
from services.common import binaries
from services.core.manifest import OWNER_LABEL, TENANT_LABEL, owned
from services.core.scope import Scopes, normalise
from services.inputs import load, sops

from ..agekeys import age_key

MARKER = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
SECRET = f"""\
apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: shop
  labels:
    app: shop
type: Opaque
stringData:
  password: {MARKER}
data:
  token: {"".join("QUJD" for _ in range(4))}
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two age keys (the right one and another) made by the real age-keygen."""
    d = tmp_path_factory.mktemp("age")
    out: dict[str, Any] = {}
    for name in ("right", "wrong"):
        path = d / f"{name}.txt"
        out[name] = (path, age_key(path))
    return out


def encrypt(text: str, recipient: str, *, kind: str = "yaml", regex: str = "") -> str:
    argv = [str(binaries.require("sops")), "encrypt", "--age", recipient]
    argv += ["--filename-override", f"secret.{kind}", "--input-type", kind, "--output-type", kind]
    argv += ["--encrypted-regex", regex or "^(data|stringData)$"]
    res = subprocess.run(argv, input=text, capture_output=True, text=True, cwd="/", check=True)
    return res.stdout


def loaded(tmp_path: Path, text: str, name: str = "secret.yaml") -> dict[str, Any]:
    (tmp_path / name).write_text(text)
    (m,) = load.load_paths([str(tmp_path / name)]).manifests
    return m.obj


def as_planned(obj: dict[str, Any], bundle: str = "team-a/shop") -> dict[str, Any]:
    """What the planner sends: the ownership labels added (a default namespace too, for a
    document without one), through JSON (the bus)."""
    planned = owned(normalise(obj, Scopes(), "shop"), bundle)
    return orjson.loads(orjson.dumps(planned))  # type: ignore[no-any-return]


def decrypt(key: Path | str, manifest: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(Decryptor(Keys(platform=str(key))).decrypt(manifest, "team-a/shop"))


def test_loaded_encrypted_and_decrypted_after_the_planner(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    key, recipient = keys["right"]
    obj = loaded(tmp_path, encrypt(SECRET, recipient))
    assert MARKER not in orjson.dumps(obj).decode()  # travels encrypted
    assert obj["stringData"]["password"].startswith("ENC[AES256_GCM,")
    assert obj["sops"][sops.RECORD]["metadata"] == {
        "name": "db",
        "namespace": "shop",
        "labels": {"app": "shop"},
    }
    planned = as_planned(obj)
    plain = decrypt(key, planned)
    assert plain["stringData"] == {"password": MARKER}
    assert plain["data"] == {"token": "QUJD" * 4}
    assert "sops" not in plain
    # the planner's metadata is what is applied: its ownership labels
    assert plain["metadata"] == {
        "name": "db",
        "namespace": "shop",
        "labels": {"app": "shop", OWNER_LABEL: "shop", TENANT_LABEL: "team-a"},
    }
    assert list(plain) == ["apiVersion", "kind", "metadata", "type", "stringData", "data"]


def test_without_the_record_the_planners_labels_break_the_mac(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    """Why the publisher records the original metadata: SOPS's MAC covers plaintext values."""
    key, recipient = keys["right"]
    obj = loaded(tmp_path, encrypt(SECRET, recipient))
    bare = {**obj, "sops": {k: v for k, v in obj["sops"].items() if k != sops.RECORD}}
    with pytest.raises(sops.SopsError, match="MAC mismatch") as err:
        decrypt(key, as_planned(bare))
    assert MARKER not in str(err.value)
    assert decrypt(key, bare)["stringData"] == {"password": MARKER}  # unchanged: it decrypts


def test_a_json_document(keys: dict[str, Any], tmp_path: Path) -> None:
    key, recipient = keys["right"]
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "j", "namespace": "shop"},
        "stringData": {"pin": MARKER, "n": 12},
    }
    text = encrypt(orjson.dumps(doc).decode(), recipient, kind="json")
    obj = loaded(tmp_path, text, "secret.json")
    assert decrypt(key, as_planned(obj))["stringData"] == {"pin": MARKER, "n": 12}


def test_wrong_key_missing_key_and_no_key(keys: dict[str, Any], tmp_path: Path) -> None:
    _, recipient = keys["right"]
    wrong, _ = keys["wrong"]
    planned = as_planned(loaded(tmp_path, encrypt(SECRET, recipient)))
    with pytest.raises(sops.SopsError) as err:
        decrypt(wrong, planned)
    assert "Failed to get the data key" in str(err.value), err.value
    assert recipient in str(err.value)  # names the recipient it could not decrypt for
    assert "\n" not in str(err.value)
    assert MARKER not in str(err.value)
    with pytest.raises(sops.SopsError, match="failed to open"):
        decrypt(tmp_path / "absent.txt", planned)
    with pytest.raises(sops.SopsError, match="no age key"):
        decrypt("", planned)


def test_tampered_ciphertext_and_metadata(keys: dict[str, Any], tmp_path: Path) -> None:
    key, recipient = keys["right"]
    obj = loaded(tmp_path, encrypt(SECRET, recipient))
    enc = obj["stringData"]["password"]
    i = enc.index("data:") + 5
    flipped = enc[:i] + ("A" if enc[i] != "A" else "B") + enc[i + 1 :]
    bad_value = {**obj, "stringData": {"password": flipped}}
    with pytest.raises(sops.SopsError, match="message authentication failed") as err:
        decrypt(key, as_planned(bad_value))
    assert MARKER not in str(err.value)
    record = obj["sops"][sops.RECORD]
    changed = {**record, "metadata": {**record["metadata"], "labels": {"app": "other"}}}
    bad_meta = {**obj, "sops": {**obj["sops"], sops.RECORD: changed}}
    with pytest.raises(sops.SopsError, match="MAC mismatch") as err:
        decrypt(key, as_planned(bad_meta))
    assert "File has …, computed …" in str(err.value), err.value  # no digest of the values


def test_a_field_left_out_is_refused(keys: dict[str, Any], tmp_path: Path) -> None:
    _, recipient = keys["right"]
    obj = loaded(tmp_path, encrypt(SECRET, recipient))
    with pytest.raises(sops.SopsError, match="field data of the encrypted document was left out"):
        sops.as_encrypted({k: v for k, v in obj.items() if k != "data"})


@pytest.mark.parametrize(
    ("regex", "named"),
    [
        ("^(apiVersion|data)$", "apiVersion is encrypted"),
        ("^(kind|data)$", "kind is encrypted"),
        ("^(name|data)$", "metadata.name is encrypted"),
        ("^(labels|data)$", "metadata.labels.app is encrypted"),
        ("^(metadata)$", "metadata.name is encrypted"),
    ],
)
def test_identifying_fields_must_stay_plaintext(
    keys: dict[str, Any], tmp_path: Path, regex: str, named: str
) -> None:
    _, recipient = keys["right"]
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + encrypt(
        SECRET, recipient, regex=regex
    )
    with pytest.raises(load.InputError) as err:
        loaded(tmp_path, text)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'secret.yaml'}#1: "), message  # file and document
    assert named in message, message
    assert "--encrypted-regex '^(data|stringData)$'" in message, message
    assert "ENC[" not in message, message


def test_every_value_encrypted_is_refused(keys: dict[str, Any], tmp_path: Path) -> None:
    _, recipient = keys["right"]
    argv = [str(binaries.require("sops")), "encrypt", "--age", recipient]
    argv += ["--filename-override", "secret.yaml"]
    text = subprocess.run(argv, input=SECRET, capture_output=True, text=True, check=True).stdout
    with pytest.raises(load.InputError, match=r"#0: a document: SOPS-encrypted: apiVersion is"):
        loaded(tmp_path, text)


def test_only_secrets(keys: dict[str, Any], tmp_path: Path) -> None:
    _, recipient = keys["right"]
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\ndata: {a: b}\n"
    with pytest.raises(load.InputError, match=r"ConfigMap/x/c: SOPS-encrypted: a SOPS-encrypted"):
        loaded(tmp_path, encrypt(cm, recipient))


@pytest.mark.parametrize(
    ("sops_field", "why"),
    [
        ("oops", "not SOPS metadata"),
        ({"age": [{"recipient": "age1x", "enc": "x"}]}, "not SOPS metadata"),
        ({"mac": "ENC[x]", "pgp": [{"fp": "ABC"}]}, r"no age recipient \(only pgp\)"),
        ({"mac": "ENC[x]"}, "no age recipient: "),
    ],
)
def test_sops_metadata_checked(sops_field: Any, why: str) -> None:
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "sops": sops_field}
    assert sops.is_encrypted(doc)
    with pytest.raises(sops.SopsError, match=why):
        sops.check(doc)


def test_plain_documents_untouched(tmp_path: Path) -> None:
    obj = loaded(tmp_path, SECRET)
    assert not sops.is_encrypted(obj)
    assert obj["stringData"] == {"password": MARKER}


def test_reason_is_one_short_line_without_digests() -> None:
    digest = "D744F24E9F9A20BFD30AD57B70E6A622F0A7945CED331461585351AD5D595106"
    text = f"MAC mismatch. File has {digest}, computed {digest.lower()}\n"
    assert sops.reason(text, 51) == "MAC mismatch. File has …, computed …"
    tree = "Failed to get the data key.\n\nGroup 0: FAILED\n  age1abc: FAILED\n    - | no key\n"
    assert (
        sops.reason(tree, 128)
        == "Failed to get the data key. Group 0: FAILED age1abc: FAILED - no key"
    )
    assert sops.reason("", 3) == "sops exited with status 3"
    assert len(sops.reason("x" * 1000, 1)) == sops.MAX_REASON


def test_comparable_part(keys: dict[str, Any], tmp_path: Path) -> None:
    _, recipient = keys["right"]
    obj = as_planned(loaded(tmp_path, encrypt(SECRET, recipient)))
    kept, left_out = sops.comparable(obj)
    assert left_out == ["stringData", "data"]
    assert list(kept) == ["apiVersion", "kind", "metadata", "type"]
    assert sops.comparable({"kind": "ConfigMap", "data": {"a": "b"}}) == (
        {"kind": "ConfigMap", "data": {"a": "b"}},
        [],
    )
