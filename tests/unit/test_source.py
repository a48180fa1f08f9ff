"""``driftbus source``'s pure parts: which commit a rule stands at, the sources file, webhook
secrets."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac
import re
from pathlib import Path

import pytest

from schemas.fleet import RolloutSpec
from services.cli.main import build_parser
from services.common.settings import add_arguments, load
from services.fleet.rollout_flags import RolloutSettings
from services.inputs.git import Repository, _in_repository, redacted
from services.source.refs import RefError, RefRule, Resolved, resolve
from services.source.service import Follower, _proven
from services.source.settings import SourceSettings
from services.source.specs import SpecError, specs
from tests.gitrepo import git

P = pytest.param

REFS = {
    "refs/heads/main": "m" * 40,
    "refs/heads/release-1": "r" * 40,
    "refs/tags/v1.2.0": "a" * 40,
    "refs/tags/v1.3.1": "b" * 40,
    "refs/tags/1.3.2-rc.1": "c" * 40,
    "refs/tags/v2.0.0": "d" * 40,
    "refs/tags/nightly": "e" * 40,
    "refs/tags/1.3.0": "f" * 40,
}


@pytest.mark.parametrize(
    ("rule", "ref"),
    [
        (RefRule(), "refs/heads/main"),
        (RefRule(branch="release-1"), "refs/heads/release-1"),
        (RefRule(tag="nightly"), "refs/tags/nightly"),
        (RefRule(semver="^1.2"), "refs/tags/v1.3.1"),  # newest 1.x; the rc is not taken
        (RefRule(semver="~1.2.0"), "refs/tags/v1.2.0"),
        (RefRule(semver=">=1.0.0 <2.0.0"), "refs/tags/v1.3.1"),
        (RefRule(semver="1.x || 2.x"), "refs/tags/v2.0.0"),
        (RefRule(semver="1.3.2-rc.1"), "refs/tags/1.3.2-rc.1"),  # named: a pre-release matches
        (RefRule(semver="*"), "refs/tags/v2.0.0"),
    ],
)
def test_a_rule_resolves_to_the_commit_of_its_ref(rule: RefRule, ref: str) -> None:
    at = resolve(REFS, rule, "refs/heads/main")
    assert (at.ref, at.commit) == (ref, REFS[ref])


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        (RefRule(branch="gone"), "no branch gone"),
        (RefRule(tag="v9"), "no tag v9"),
        (RefRule(semver="^3"), r"no tag matches semver \^3"),
    ],
)
def test_a_rule_that_names_nothing_says_what_is_missing(rule: RefRule, error: str) -> None:
    with pytest.raises(RefError, match=error):
        resolve(REFS, rule, "refs/heads/main")


def test_a_version_tagged_with_and_without_v_resolves_to_the_plain_one() -> None:
    refs = {"refs/tags/v1.0.0": "a" * 40, "refs/tags/1.0.0": "b" * 40}
    assert resolve(refs, RefRule(semver="1"), "").ref == "refs/tags/1.0.0"


def test_rules_are_checked_when_made() -> None:
    with pytest.raises(RefError, match="not several"):
        RefRule(branch="main", tag="v1")
    with pytest.raises(RefError, match="not a semver range"):
        RefRule(semver="!!")


def test_the_single_source_flags_make_one_spec() -> None:
    (spec,) = specs(
        SourceSettings(cluster="c", bundle="b", git="https://x/r.git", semver="^1", path="k")
    )
    assert (spec.cluster, spec.bundle, spec.git, spec.path) == ("c", "b", "https://x/r.git", "k")
    assert spec.rule == RefRule(semver="^1")
    assert spec.helm().release == "b", "a chart's release defaults to the bundle's name"


def test_a_sources_file_lists_several_and_every_mistake_is_named(tmp_path: Path) -> None:
    f = tmp_path / "sources.yaml"
    f.write_text(
        "- {cluster: c, bundle: app, git: /srv/app, branch: main, path: deploy}\n"
        "- {cluster: c, bundle: chart, git: /srv/chart, semver: ^2, values: [prod.yaml]}\n"
    )
    got = specs(SourceSettings(sources=str(f)))
    assert [s.bundle for s in got] == ["app", "chart"]
    assert got[1].values == ("prod.yaml",)
    for text, error in [
        ("- {cluster: c, bundle: b}\n", r"\[0\]: git is required"),
        ("- {cluster: c, bundle: b, git: g, brnach: x}\n", r"\[0\]: unknown field\(s\) brnach"),
        ("- {cluster: c, bundle: b, git: g, tag: a, branch: b}\n", r"\[0\]: follow one"),
        ("- {cluster: c, bundle: b, git: g}\n- {cluster: c, bundle: b, git: h}\n", "same bundle"),
        ("cluster: c\n", "a YAML list"),
        ("- {a: [\n", "sources.yaml"),
    ]:
        f.write_text(text)
        with pytest.raises(SpecError, match=error):
            specs(SourceSettings(sources=str(f)))


@pytest.mark.parametrize(
    ("headers", "proven"),
    [
        (
            {"X-Hub-Signature-256": "sha256=" + hmac.new(b"s3", b"{}", hashlib.sha256).hexdigest()},
            True,
        ),
        (
            {"X-Hub-Signature-256": "sha256=" + hmac.new(b"no", b"{}", hashlib.sha256).hexdigest()},
            False,
        ),
        ({"X-Gitlab-Token": "s3"}, True),
        ({"X-Gitlab-Token": "s4"}, False),
        ({"Authorization": "Bearer s3"}, True),
        ({}, False),
    ],
)
def test_a_webhook_proves_the_secret_as_github_gitlab_or_a_bearer_token(
    headers: dict[str, str], proven: bool
) -> None:
    assert _proven(headers, b"{}", "s3") is proven


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:t0ken@git.example.com/ops.git", "https://git.example.com/ops.git"),
        ("https://t0ken@git.example.com:8443/a/b", "https://git.example.com:8443/a/b"),
        ("https://git.example.com/ops.git", "https://git.example.com/ops.git"),
        ("ssh://git@host/ops.git", "ssh://host/ops.git"),
        ("git@host:ops.git", "git@host:ops.git"),  # scp-like: a user name, no secret
        ("u:t0ken@host:ops.git", "host:ops.git"),
        ("/srv/ops", "/srv/ops"),
        ("file:///srv/ops", "file:///srv/ops"),
    ],
)
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert redacted(url) == shown
    assert Repository("/nowhere", url).url == shown


def test_two_sources_of_one_repository_never_share_a_clone(tmp_path: Path) -> None:
    one, two = specs(
        SourceSettings(sources=str(write_sources(tmp_path))),
    )
    assert one.git == two.git
    a, b = Follower(one, None, tmp_path), Follower(two, None, tmp_path)  # type: ignore[arg-type]
    assert a._cache != b._cache


def write_sources(tmp_path: Path) -> Path:
    f = tmp_path / "two.yaml"
    f.write_text(
        "- {cluster: c, bundle: apps, git: https://u:p@h/r.git, path: apps}\n"
        "- {cluster: c, bundle: infra, git: https://u:p@h/r.git, path: infra}\n"
    )
    return f


def test_a_header_that_is_not_ascii_is_not_proof() -> None:
    assert _proven({"X-Gitlab-Token": "s\u00e9cret"}, b"{}", "secret") is False
    assert _proven({"X-Hub-Signature-256": "sha256=\u00e9"}, b"{}", "secret") is False


def test_a_clone_follows_tags_and_semver_as_the_remote_moves_them(tmp_path: Path) -> None:
    """Real git: annotated tags are peeled to their commit, a new tag in range is taken after
    a fetch, a moved tag is followed, a deleted branch is gone."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "a.yaml").write_text("a: 1\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "one")
    one = git(origin, "rev-parse", "HEAD")
    git(origin, "tag", "-a", "v1.0.0", "-m", "first")
    git(origin, "branch", "old")
    git(origin, "tag", "stable")
    clone = Repository.clone(f"file://{origin}", tmp_path / "copy")
    assert resolve(clone.refs(), RefRule(semver="^1"), "").commit == one
    assert resolve(clone.refs(), RefRule(tag="stable"), "").commit == one
    assert clone.default_branch() == "refs/heads/main"

    (origin / "a.yaml").write_text("a: 2\n")
    git(origin, "commit", "-qam", "two")
    two = git(origin, "rev-parse", "HEAD")
    git(origin, "tag", "v1.1.0")
    git(origin, "tag", "-f", "stable", two)
    git(origin, "branch", "-D", "old")
    git(origin, "branch", "-m", "main", "trunk")  # the default branch renamed
    clone.fetch(head=True)  # head: the default branch is followed, so HEAD is re-read
    refs = clone.refs()
    assert resolve(refs, RefRule(semver="^1"), "") == Resolved("refs/tags/v1.1.0", two)
    assert resolve(refs, RefRule(tag="stable"), "").commit == two
    assert "refs/heads/old" not in refs
    assert clone.default_branch() == "refs/heads/trunk"
    assert resolve(refs, RefRule(), clone.default_branch()).commit == two


def test_errors_name_files_as_in_the_repository_even_at_its_root(tmp_path: Path) -> None:
    tree = tmp_path / "driftbus-tree-x"
    label = "https://h/r.git@0123456789ab:"
    assert (
        _in_repository(f"{tree}/deploy/a.yaml:3: bad", tree, label)
        == f"{label}deploy/a.yaml:3: bad"
    )
    assert _in_repository(f"{tree}: kustomize failed", tree, label) == f"{label}.: kustomize failed"


def test_a_fleet_source_needs_no_cluster_and_carries_its_rollout() -> None:
    [spec] = specs(
        SourceSettings(bundle="web", git="/r", selector="env=prod", rollout=("10%",), bake=30.0)
    )
    assert spec.fleet
    assert spec.selector == "env=prod"
    assert spec.rollout.steps == ["10%"]
    assert spec.rollout.bake == 30.0
    assert spec.where == "_fleet"
    [every] = specs(SourceSettings(bundle="web", git="/r", selector="*"))
    assert every.selector == ""


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"selector": "env in (a"}, "missing"),
        ({"selector": "env=prod", "rollout": ("0%",)}, "rollout step"),
        ({"selector": "env=prod", "on_failure": "explode"}, "on_failure"),
    ],
)
def test_a_fleet_source_is_checked_when_read(settings: dict[str, object], error: str) -> None:
    with pytest.raises(SpecError, match=error):
        specs(SourceSettings(bundle="web", git="/r", **settings))  # type: ignore[arg-type]


def test_a_sources_file_may_name_a_fleet(tmp_path: Path) -> None:
    f = tmp_path / "sources.yaml"
    f.write_text(
        "- bundle: web\n  git: /r\n  selector: env=prod\n"
        "  rollout: {steps: [env=canary], bake: 60, on_failure: rollback}\n"
        "- bundle: api\n  git: /r\n  cluster: c1\n"
    )
    web, api = specs(SourceSettings(sources=str(f)))
    assert web.rollout.on_failure == "rollback"
    assert web.rollout.steps == ["env=canary"]
    assert not api.fleet
    f.write_text("- bundle: web\n  git: /r\n  cluster: c1\n  rollout: {bake: 1}\n")
    with pytest.raises(SpecError, match="rollout needs a selector"):
        specs(SourceSettings(sources=str(f)))
    f.write_text(
        "- bundle: web\n  git: /r\n  selector: env=prod\n  on_leave: orphan\n"
        "  substitute: true\n  rollout: {max_unavailable: 2}\n"
    )
    [web] = specs(SourceSettings(sources=str(f)))
    assert (web.on_leave, web.substitute, web.rollout.max_unavailable) == ("orphan", True, 2)


def test_a_fleet_source_takes_every_rollout_flag_publish_takes() -> None:
    """Issue 41: ``--max-unavailable``, ``--on-leave``, ``--substitute`` as ``publish`` has them
    (one declaration: ``RolloutSettings``), read from the flags as a service reads them."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, SourceSettings)
    argv = ["--bundle", "web", "--git", "/r", "--selector", "env=prod", "--rollout", "10%"]
    argv += ["--max-unavailable", "2", "--on-leave", "orphan", "--substitute", "true"]
    argv += ["--on-failure", "rollback", "--bake", "5", "--step-timeout", "30"]
    [spec] = specs(load(SourceSettings, parser.parse_args(argv), environ={}))
    assert spec.rollout == RolloutSpec(
        steps=["10%"], bake=5.0, max_unavailable=2, step_timeout=30.0, on_failure="rollback"
    )
    assert (spec.on_leave, spec.substitute) == ("orphan", True)
    publish = build_parser().parse_args(["publish", "d", "--bundle", "web", *argv[6:8]])
    source_flags = {f.name for f in dataclasses.fields(SourceSettings)}
    publish_flags = set(vars(publish))
    assert {f.name for f in dataclasses.fields(RolloutSettings)} <= source_flags & publish_flags


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        P({"selector": "env=prod", "on_leave": "keep"}, "--on-leave 'keep'", id="on-leave"),
        P({"selector": "env=prod", "max_unavailable": -1}, "max_unavailable", id="negative"),
        P({"substitute": True}, "--substitute roll out a fleet: give --selector", id="no-fleet"),
        P({"max_unavailable": 3, "on_leave": "orphan"}, "--max-unavailable, --on-leave", id="two"),
    ],
)
def test_a_fleet_flag_is_checked_and_never_dropped(settings: dict[str, object], error: str) -> None:
    with pytest.raises(SpecError, match=re.escape(error)):
        specs(SourceSettings(bundle="web", git="/r", cluster="c1", **settings))  # type: ignore[arg-type]
