"""The YAML vectors (``tests/vectors/yaml.json``) as the real kubectl and API server read them.

Every vector becomes one object of a CRD that stores anything; the real kubectl applies the
YAML text (server-side), and what the API server stores must be the vector's JSON — the same
JSON ``services/core/kyaml.py`` produces (``tests/unit/test_kyaml.py``). So the table is proven
against Kubernetes, not assumed. Where driftbus is stricter than kubectl on purpose (duplicate
keys), the test shows what kubectl does instead.
"""

from __future__ import annotations

import subprocess
from typing import Any

import orjson
import pytest

from services.controlplane import assets, servers
from services.core import kyaml

from ..conftest import unique_name
from ..unit.test_kyaml import VECTORS
from .manifests import crd as vector_crd

GROUP = "kyaml.driftbus.test"


def kubectl(
    stack: servers.Stack, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(assets.ensure("kubectl")), "--kubeconfig", str(stack.cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def document(name: str, namespace: str, spec_yaml: str) -> str:
    spec = "\n".join(f"  {line}" for line in spec_yaml.splitlines())
    return (
        f"apiVersion: {GROUP}/v1\nkind: Vector\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{spec}\n"
    )


@pytest.fixture(scope="module")
def vector_kind(stack: servers.Stack) -> str:
    crd = vector_crd(GROUP, "Vector")  # preserve-unknown-fields: stores anything
    applied = kubectl(stack, "apply", "--server-side", "-f", "-", stdin=orjson.dumps(crd).decode())
    assert applied.returncode == 0, applied.stderr
    ready = kubectl(stack, "wait", "--for=condition=Established", f"crd/vectors.{GROUP}")
    assert ready.returncode == 0, ready.stderr
    return f"vectors.{GROUP}"


def stored(stack: servers.Stack, kind: str, namespace: str) -> dict[str, Any]:
    got = kubectl(stack, "get", kind, "-n", namespace, "-o", "json")
    assert got.returncode == 0, got.stderr
    return {o["metadata"]["name"]: o["spec"] for o in orjson.loads(got.stdout)["items"]}


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text (1 and 1.0 and true differ on the wire, not in Python)."""
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        b, option=orjson.OPT_SORT_KEYS
    )


async def test_every_vector_is_what_kubectl_and_the_api_server_store(
    stack: servers.Stack, namespace: str, vector_kind: str, measured: Any
) -> None:
    names = [f"v{i}" for i in range(len(VECTORS))]
    text = "---\n".join(
        document(name, namespace, v["yaml"]) for name, v in zip(names, VECTORS, strict=True)
    )
    # empty and comment-only documents and a List around two more objects, as kubectl reads them
    text += "---\n# only a comment\n---\n---\n"
    text += "apiVersion: v1\nkind: List\nitems:\n" + "".join(
        f"- {{apiVersion: {GROUP}/v1, kind: Vector, metadata: {{name: in-list-{i}, "
        f"namespace: {namespace}}}, spec: {{value: on}}}}\n"
        for i in range(2)
    )
    applied = kubectl(
        stack, "apply", "--server-side", "--field-manager=vectors", "-f", "-", stdin=text
    )
    assert applied.returncode == 0, applied.stderr
    live = stored(stack, vector_kind, namespace)
    wrong = [
        f"{v['name']}: {v['yaml']!r} stored as {orjson.dumps(live.get(name)).decode()}, "
        f"table says {orjson.dumps(v['json']).decode()}"
        for name, v in zip(names, VECTORS, strict=True)
        if not same_json(live.get(name), v["json"])
    ]
    assert not wrong, "\n".join(wrong)
    assert live["in-list-0"] == live["in-list-1"] == {"value": True}

    ours = [doc for _, doc in kyaml.documents(text)]
    assert [d.get("metadata", {}).get("name") for d in ours[: len(names)]] == names
    for doc, name in zip(ours, names, strict=False):
        assert same_json(doc["spec"], live[name]), name
    assert len(ours) == len(names) + 1  # + the List, which the loader expands
    measured(f"YAML vectors: {len(VECTORS)} of {len(VECTORS)} stored by the API server as decoded")


async def test_where_driftbus_is_stricter_than_kubectl(
    stack: servers.Stack, namespace: str, vector_kind: str
) -> None:
    name = unique_name("dup")
    text = document(name, namespace, "value: 1\nvalue: 2")
    applied = kubectl(
        stack, "apply", "--server-side", "--field-manager=vectors", "-f", "-", stdin=text
    )
    assert applied.returncode == 0, applied.stderr
    assert stored(stack, vector_kind, namespace)[name] == {"value": 2}, "kubectl keeps the last"
    with pytest.raises(kyaml.DecodeError, match="duplicate key 'value'"):
        list(kyaml.documents(text))  # driftbus refuses: the first value would silently vanish

    infinite = document(unique_name("inf"), namespace, "value: .inf")
    refused = kubectl(stack, "apply", "--server-side", "-f", "-", stdin=infinite)
    assert refused.returncode != 0, "kubectl cannot send it either"
    with pytest.raises(kyaml.DecodeError, match="no JSON form"):
        list(kyaml.documents(infinite))
