"""compose.yaml is a valid Compose file (checked against the Compose specification's schema)."""

from __future__ import annotations

import json
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
