"""compose.yaml is a valid Compose file (checked against the Compose specification's schema),
gives each service only its own secret, and publishes nothing beyond the host's loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from services.controlplane import assets

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def validator() -> Any:
    path = assets.compose_schema_path()
    assert path.exists(), f"{path} is missing: run `make assets` (it fetches the schema once)"
    schema = json.loads(path.read_text())
    return jsonschema.Draft201909Validator(schema)


def test_compose_file_is_valid(validator: Any) -> None:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    errors = sorted(validator.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert {"nats", "watcher", "planner", "applier"} <= set(doc["services"])
    assert doc["services"]["applier"]["deploy"]["replicas"] >= 1
    assert doc["services"]["nats"]["healthcheck"]


def test_the_schema_check_rejects_a_broken_file(validator: Any) -> None:
    broken = {"services": {"x": {"image": 5, "no-such-key": True}}}
    assert list(validator.iter_errors(broken))


SERVICES = {"planner": "planner", "watcher": "watcher-local", "applier": "applier-local"}
"""Each driftbus service of compose.yaml and its NATS user (DRIFTBUS_CLUSTER unset: local)."""


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """target → source of a service's volumes (short syntax)."""
    out = {}
    for v in service.get("volumes", []):
        source, target = v.split(":")[:2]
        out[target] = source
    return out


def test_each_service_mounts_only_its_own_credentials_and_no_one_the_ca_key() -> None:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = doc["services"]
    etc = {name: _mounts(services[name]).get("/etc/nats") for name in [*SERVICES, "nats"]}
    assert None not in etc.values(), etc
    assert len(set(etc.values())) == len(etc), f"services share a credentials volume: {etc}"
    everything = _mounts(services["nats-init"])["/etc/nats"]
    users = [n for n, s in services.items() if everything in _mounts(s).values()]
    assert users == ["nats-init"], f"the volume with every password and the CA key: {users}"
    for name, user in SERVICES.items():
        env = services[name]["environment"]
        assert env["DRIFTBUS_NATS_PASSWORD_FILE"].endswith(
            f"/passwords/{user}".replace("-local", "-${DRIFTBUS_CLUSTER:-local}")
        ), env
        assert env["DRIFTBUS_NATS_CERT"] == f"/etc/nats/tls/{name}.crt", env
        assert env["DRIFTBUS_NATS_KEY"] == f"/etc/nats/tls/{name}.key", env


def test_published_ports_are_on_the_host_s_loopback() -> None:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name, service in doc["services"].items():
        for port in service.get("ports", []):
            host = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(port)).split(":")[0]
            assert host == "127.0.0.1", f"{name} publishes {port} beyond loopback"
    assert "127.0.0.1:8222:8222" in doc["services"]["nats"]["ports"]  # monitoring: no auth


def test_the_init_step_hands_each_service_its_own_secret_only(tmp_path: Path) -> None:
    """nats-init's own command, run here (as tests/integration/test_security.py does): each
    service's volume holds its password, its client pair and the CA certificate — no other
    password, no CA key; NATS's holds its configuration and server pair."""
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    etc = tmp_path / "etc-nats"
    script = doc["services"]["nats-init"]["command"][0].replace("$$", "$")
    script = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", script).replace("chown -R 10001", "true")
    run = subprocess.run(
        ["sh", "-c", script.replace("/etc/nats", str(etc))],
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "DRIFTBUS_CLUSTER": "local"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    def files(d: Path) -> set[str]:
        return {str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()}

    for name, user in SERVICES.items():
        got = files(etc / "for" / name)
        assert got == {
            "tls/ca.crt",
            f"tls/{name}.crt",
            f"tls/{name}.key",
            f"passwords/{user}",
        }, (name, got)
    assert files(etc / "for" / "nats") == {
        "nats.conf",
        "auth.conf",
        "tls/ca.crt",
        "tls/tls.crt",
        "tls/tls.key",
    }
    assert (etc / "tls" / "ca.key").exists()  # kept by nats-init, in its own volume
