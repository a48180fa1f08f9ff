"""The tenancy parts of the CLI that need no bus: a bundle name of a tenant is checked before
anything is read or sent, and a tenants file is checked before it is applied (one line each,
exit 1, never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.main import main


@pytest.mark.parametrize(
    ("bundle", "says"),
    [
        ("Team_A/app", "the tenant 'Team_A' must be a DNS label"),
        ("team-a/", "the name '' must be a valid label value"),
        ("team-a/app!", "the name 'app!' must be a valid label value"),
    ],
)
@pytest.mark.parametrize("command", ["publish", "plan"])
def test_a_bad_bundle_name_is_one_line(
    command: str, bundle: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, "examples/hello", "--cluster", "c", "--bundle", bundle])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"driftbus {command}: bundle {bundle!r}: {says}"), err
    assert "Traceback" not in err


def test_an_invalid_tenants_file_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "tenants.yaml"
    f.write_text("tenants:\n  team-a:\n    serviceAccount: team-a/deployer\n    namespace: [x]\n")
    code = main(["tenants", "apply", str(f), "--nats-url", "nats://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"driftbus tenants apply: {f}:4: "), err
    assert "namespace" in err


def test_show_with_a_file_is_refused_and_never_applies_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tenants show FILE` looks like a preview: it must not put FILE in force (it did once)."""
    f = tmp_path / "tenants.yaml"
    f.write_text("tenants:\n  team-a:\n    serviceAccount: team-a/deployer\n")
    code = main(["tenants", "show", str(f), "--nats-url", "nats://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("driftbus tenants show: shows the policy in force and takes no file")


def test_rbac_of_no_tenants_prints_no_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl refuses an input with no objects: nothing on stdout, a note on stderr."""
    f = tmp_path / "tenants.yaml"
    f.write_text("tenants: {}\n")
    assert main(["tenants", "rbac", str(f)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "no tenants" in err


def test_the_policy_table_lists_namespaces_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    """The namespaces cell read `('team-a', 'team-a-*')` (a tuple's repr) on a new user's try."""
    from services.cli.tenants import show
    from services.tenancy import policy as tenancy

    text = "tenants:\n  team-a:\n    serviceAccount: team-a/d\n    namespaces: [team-a, team-a-*]\n"
    show(tenancy.load_policy(text, "t.yaml"), "table")
    out = capsys.readouterr().out
    assert "team-a,team-a-*" in out, out
    assert "(" not in out, out
