"""Hooks as Helm's and Argo CD's annotations ask (``core.hooks``), how a finished hook's end is
told from drift (``health.retiring``), and how a revision's hooks and stages are taken in
(``rule.revision.checked_revision``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from schemas.messages import Bundle, BundleOptions, Health
from schemas.subjects import ObjectKey
from services.core import hooks
from services.core.health import ended, health, retiring
from services.core.hooks import (
    BEFORE_CREATION,
    FAILED,
    HOOK_REVISION,
    SKIP,
    SUCCEEDED,
    Hook,
    HookError,
    Phase,
    deleted_by_policy,
    hook_of,
    is_hook,
    recreated,
    stage_of,
    stamped,
)
from services.core.manifest import ManifestError
from services.core.scope import Scopes
from services.planner.memory.object_details import Details
from services.planner.memory.store import EntryStore
from services.planner.rule.entry import Entry
from services.planner.rule.revision import BundleView, Plan, checked_revision
from services.planner.status.tally import FAILED as FAILED_MARK
from services.planner.status.tally import NOT_READY, UNHEALTHY, Known, Mark, mark
from services.planner.status.tally import SKIP as SKIP_MARK

HELM = hooks.HELM_HOOK
WEIGHT = hooks.HELM_WEIGHT
HELM_POLICY = hooks.HELM_DELETE_POLICY
ARGO = hooks.ARGO_HOOK
ARGO_POLICY = hooks.ARGO_DELETE_POLICY
WAVE = hooks.ARGO_WAVE

DEFAULT = frozenset([BEFORE_CREATION])


def annotated(
    annotations: dict[str, Any], kind: str = "ConfigMap", name: str = "x"
) -> dict[str, Any]:
    """A manifest of ``kind`` named ``name`` carrying ``annotations``."""
    api = "batch/v1" if kind == "Job" else "v1"
    meta = {"name": name, "annotations": dict(annotations)}
    return {"apiVersion": api, "kind": kind, "metadata": meta}


# --- hook_of --------------------------------------------------------------------------------

HOOK_OF: list[tuple[str, dict[str, Any], Hook | str | None]] = [
    # ordinary objects
    ("no-annotations", {}, None),
    ("other-annotations-only", {"a": "b"}, None),
    ("a-sync-wave-alone-is-no-hook", {WAVE: "3"}, None),
    ("a-hook-weight-alone-is-no-hook", {WEIGHT: "3"}, None),
    ("a-delete-policy-alone-is-no-hook", {HELM_POLICY: SUCCEEDED}, None),
    ("helm-crd-install-is-an-ordinary-object", {HELM: "crd-install"}, None),
    # Helm's phases
    ("helm-pre-install", {HELM: "pre-install"}, Hook(Phase.PRE, 0, DEFAULT)),
    ("helm-pre-upgrade", {HELM: "pre-upgrade"}, Hook(Phase.PRE, 0, DEFAULT)),
    ("helm-post-install", {HELM: "post-install"}, Hook(Phase.POST, 0, DEFAULT)),
    ("helm-post-upgrade", {HELM: "post-upgrade"}, Hook(Phase.POST, 0, DEFAULT)),
    (
        "helm-install-and-upgrade-of-one-phase-is-that-phase",
        {HELM: "pre-install,pre-upgrade"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    (
        "helm-spaces-around-names",
        {HELM: " pre-install , post-upgrade "},
        Hook(Phase.PRE, 0, DEFAULT, Phase.POST),
    ),
    (
        "helm-pre-and-post-is-created-first-kept-through-last",
        {HELM: "post-install,pre-install"},
        Hook(Phase.PRE, 0, DEFAULT, Phase.POST),
    ),
    (
        "helm-crd-install-with-a-phase-is-that-phase",
        {HELM: "crd-install,pre-install"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    (
        "helm-a-skipped-hook-beside-a-run-one",
        {HELM: "pre-install,test"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    # Helm's hooks driftbus does not run
    ("helm-pre-delete", {HELM: "pre-delete"}, SKIP),
    ("helm-post-delete", {HELM: "post-delete"}, SKIP),
    ("helm-pre-rollback", {HELM: "pre-rollback"}, SKIP),
    ("helm-post-rollback", {HELM: "post-rollback"}, SKIP),
    ("helm-test", {HELM: "test"}, SKIP),
    ("helm-test-success", {HELM: "test-success"}, SKIP),
    ("helm-test-failure", {HELM: "test-failure"}, SKIP),
    ("helm-delete-and-rollback", {HELM: "pre-delete,post-rollback"}, SKIP),
    ("helm-empty", {HELM: ""}, SKIP),
    # Argo CD's phases
    ("argo-presync", {ARGO: "PreSync"}, Hook(Phase.PRE, 0, DEFAULT)),
    ("argo-sync", {ARGO: "Sync"}, Hook(Phase.SYNC, 0, DEFAULT)),
    ("argo-postsync", {ARGO: "PostSync"}, Hook(Phase.POST, 0, DEFAULT)),
    ("argo-syncfail", {ARGO: "SyncFail"}, Hook(Phase.FAIL, 0, DEFAULT)),
    ("argo-pre-and-post", {ARGO: "PreSync,PostSync"}, Hook(Phase.PRE, 0, DEFAULT, Phase.POST)),
    ("argo-post-and-fail", {ARGO: "PostSync,SyncFail"}, Hook(Phase.POST, 0, DEFAULT, Phase.FAIL)),
    # Argo CD's hooks driftbus does not run
    ("argo-skip", {ARGO: "Skip"}, SKIP),
    ("argo-predelete", {ARGO: "PreDelete"}, SKIP),
    ("argo-postdelete", {ARGO: "PostDelete"}, SKIP),
    # as in Argo CD, Skip skips only when it is the only type named
    (
        "argo-skip-beside-a-phase-runs-the-phase",
        {ARGO: "Skip,PreSync"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    # Argo CD's annotation wins over Helm's
    ("argo-wins-over-helm", {ARGO: "PostSync", HELM: "pre-install"}, Hook(Phase.POST, 0, DEFAULT)),
    ("argo-skip-wins-over-a-helm-hook", {ARGO: "Skip", HELM: "pre-install"}, SKIP),
    (
        "argo-wins-over-a-skipped-helm-hook",
        {ARGO: "Sync", HELM: "test"},
        Hook(Phase.SYNC, 0, DEFAULT),
    ),
    (
        "argo-wins-over-helm-crd-install",
        {ARGO: "PreSync", HELM: "crd-install"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    # waves: sync-wave, else hook-weight, else 0
    ("helm-weight", {HELM: "pre-install", WEIGHT: "5"}, Hook(Phase.PRE, 5, DEFAULT)),
    ("helm-negative-weight", {HELM: "pre-install", WEIGHT: "-5"}, Hook(Phase.PRE, -5, DEFAULT)),
    ("helm-weight-with-spaces", {HELM: "pre-install", WEIGHT: " 7 "}, Hook(Phase.PRE, 7, DEFAULT)),
    ("helm-weight-as-a-yaml-int", {HELM: "pre-install", WEIGHT: 4}, Hook(Phase.PRE, 4, DEFAULT)),
    ("argo-wave", {ARGO: "PreSync", WAVE: "-2"}, Hook(Phase.PRE, -2, DEFAULT)),
    ("helm-hook-with-argo-wave", {HELM: "post-install", WAVE: "3"}, Hook(Phase.POST, 3, DEFAULT)),
    ("argo-hook-with-helm-weight", {ARGO: "PostSync", WEIGHT: "3"}, Hook(Phase.POST, 3, DEFAULT)),
    (
        "sync-wave-wins-over-weight",
        {HELM: "pre-install", WAVE: "1", WEIGHT: "9"},
        Hook(Phase.PRE, 1, DEFAULT),
    ),
    (
        "sync-wave-zero-wins-over-weight",
        {HELM: "pre-install", WAVE: "0", WEIGHT: "9"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    (
        "a-bad-weight-under-a-sync-wave-is-not-read",
        {HELM: "pre-install", WAVE: "1", WEIGHT: "heavy"},
        Hook(Phase.PRE, 1, DEFAULT),
    ),
    # delete policies: before-hook-creation by default; Helm's and Argo CD's names; both read
    (
        "helm-hook-succeeded",
        {HELM: "pre-install", HELM_POLICY: SUCCEEDED},
        Hook(Phase.PRE, 0, frozenset([SUCCEEDED])),
    ),
    (
        "helm-hook-failed",
        {HELM: "pre-install", HELM_POLICY: FAILED},
        Hook(Phase.PRE, 0, frozenset([FAILED])),
    ),
    (
        "helm-before-creation-and-succeeded",
        {HELM: "pre-install", HELM_POLICY: "before-hook-creation, hook-succeeded"},
        Hook(Phase.PRE, 0, frozenset([BEFORE_CREATION, SUCCEEDED])),
    ),
    (
        "helm-empty-policy-is-the-default",
        {HELM: "pre-install", HELM_POLICY: ""},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    (
        "argo-hook-succeeded",
        {ARGO: "PreSync", ARGO_POLICY: "HookSucceeded"},
        Hook(Phase.PRE, 0, frozenset([SUCCEEDED])),
    ),
    (
        "argo-hook-failed",
        {ARGO: "PreSync", ARGO_POLICY: "HookFailed"},
        Hook(Phase.PRE, 0, frozenset([FAILED])),
    ),
    (
        "argo-before-creation",
        {ARGO: "PreSync", ARGO_POLICY: "BeforeHookCreation"},
        Hook(Phase.PRE, 0, DEFAULT),
    ),
    (
        "argo-and-helm-policies-are-both-read",
        {ARGO: "PreSync", ARGO_POLICY: "HookSucceeded", HELM_POLICY: FAILED},
        Hook(Phase.PRE, 0, frozenset([SUCCEEDED, FAILED])),
    ),
    (
        "helm-policy-on-an-argo-hook",
        {ARGO: "PostSync", HELM_POLICY: SUCCEEDED},
        Hook(Phase.POST, 0, frozenset([SUCCEEDED])),
    ),
]


@pytest.mark.parametrize(
    ("annotations", "expected"), [pytest.param(a, e, id=i) for i, a, e in HOOK_OF]
)
def test_hook_of(annotations: dict[str, Any], expected: Hook | str | None) -> None:
    assert hook_of(annotated(annotations)) == expected


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param({"apiVersion": "v1", "kind": "ConfigMap"}, id="no-metadata"),
        pytest.param({"metadata": "x"}, id="metadata-not-a-mapping"),
        pytest.param({"metadata": {"annotations": None}}, id="annotations-null"),
        pytest.param({"metadata": {"annotations": ["a"]}}, id="annotations-not-a-mapping"),
    ],
)
def test_an_object_without_readable_annotations_is_no_hook(manifest: dict[str, Any]) -> None:
    assert hook_of(manifest) is None
    assert stage_of(manifest) == (Phase.SYNC, 0)
    assert not is_hook(manifest)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {HELM: "pre-instal"}, r"helm\.sh/hook: unknown hook 'pre-instal'", id="helm-typo"
        ),
        pytest.param(
            {HELM: "pre-install,later"}, "unknown hook 'later'", id="helm-one-unknown-of-two"
        ),
        pytest.param({HELM: "PreSync"}, "unknown hook 'PreSync'", id="argo-name-under-helm"),
        pytest.param(
            {ARGO: "presync"},
            r"argocd\.argoproj\.io/hook: unknown hook 'presync'",
            id="argo-lowercase",
        ),
        pytest.param(
            {ARGO: "pre-install"}, "unknown hook 'pre-install'", id="helm-name-under-argo"
        ),
        pytest.param({ARGO: "PreSync,Later"}, "unknown hook 'Later'", id="argo-one-unknown-of-two"),
        pytest.param({ARGO: "Skip,Later"}, "unknown hook 'Later'", id="argo-unknown-beside-skip"),
        pytest.param(
            {HELM: "pre-install", WEIGHT: "1.5"},
            r"helm\.sh/hook-weight: '1\.5' is not an integer",
            id="fractional-weight",
        ),
        pytest.param({HELM: "pre-install", WEIGHT: "heavy"}, "is not an integer", id="word-weight"),
        pytest.param(
            {ARGO: "PreSync", WAVE: "first"},
            r"sync-wave: 'first' is not an integer",
            id="word-wave",
        ),
        pytest.param(
            {HELM: "pre-install", WAVE: ""}, "sync-wave: '' is not an integer", id="empty-wave"
        ),
        pytest.param(
            {HELM: "pre-install", HELM_POLICY: "HookSucceeded"},
            r"helm\.sh/hook-delete-policy: unknown policy 'HookSucceeded'",
            id="argo-policy-under-helm",
        ),
        pytest.param(
            {ARGO: "PreSync", ARGO_POLICY: SUCCEEDED},
            r"argocd\.argoproj\.io/hook-delete-policy: unknown policy 'hook-succeeded'",
            id="helm-policy-under-argo",
        ),
        pytest.param(
            {HELM: "pre-install", HELM_POLICY: "always"},
            "unknown policy 'always'",
            id="made-up-policy",
        ),
    ],
)
def test_unreadable_hook_annotations_raise_naming_them(
    annotations: dict[str, Any], message: str
) -> None:
    with pytest.raises(HookError, match=message):
        hook_of(annotated(annotations))


def test_a_skipped_hooks_policies_are_not_read() -> None:
    # a skipped hook's policies are not read: nothing is run or deleted for it
    assert hook_of(annotated({HELM: "test", HELM_POLICY: "always"})) == SKIP


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({HELM: "Pre-Install"}, Hook(Phase.PRE, 0, DEFAULT), id="hook"),
        pytest.param(
            {HELM: "POST-UPGRADE,pre-install"}, Hook(Phase.PRE, 0, DEFAULT, Phase.POST), id="two"
        ),
        pytest.param({HELM: "Test"}, SKIP, id="skipped"),
        pytest.param({HELM: "CRD-Install"}, None, id="crd-install"),
        pytest.param(
            {HELM: "pre-install", HELM_POLICY: "Hook-Succeeded"},
            Hook(Phase.PRE, 0, frozenset([SUCCEEDED])),
            id="policy",
        ),
    ],
)
def test_helm_names_are_read_lower_cased_as_helm_reads_them(
    annotations: dict[str, Any], expected: Hook | str | None
) -> None:
    assert hook_of(annotated(annotations)) == expected


def test_an_unknown_helm_name_is_named_as_written() -> None:
    with pytest.raises(HookError, match="unknown hook 'Pre-Instal'"):
        hook_of(annotated({HELM: "Pre-Instal"}))
    with pytest.raises(HookError, match="unknown policy 'Hook-Succeded'"):
        hook_of(annotated({HELM: "pre-install", HELM_POLICY: "Hook-Succeded"}))


def test_hook_until_and_stage() -> None:
    one = Hook(Phase.PRE, -3, DEFAULT)
    assert (one.until, one.stage) == (Phase.PRE, (0, -3))
    two = Hook(Phase.PRE, 2, DEFAULT, Phase.POST)
    assert (two.until, two.stage) == (Phase.POST, (0, 2))


# --- stage_of -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "stage"),
    [
        pytest.param({}, (Phase.SYNC, 0), id="ordinary"),
        pytest.param({WAVE: "-1"}, (Phase.SYNC, -1), id="ordinary-wave"),
        pytest.param({WAVE: "12"}, (Phase.SYNC, 12), id="ordinary-high-wave"),
        pytest.param({HELM: "crd-install", WAVE: "2"}, (Phase.SYNC, 2), id="crd-install-wave"),
        pytest.param({HELM: "pre-install"}, (Phase.PRE, 0), id="pre-hook"),
        pytest.param({HELM: "post-install", WEIGHT: "-4"}, (Phase.POST, -4), id="post-hook-weight"),
        pytest.param({ARGO: "Sync", WAVE: "2"}, (Phase.SYNC, 2), id="argo-sync-hook"),
        pytest.param({ARGO: "SyncFail"}, (Phase.FAIL, 0), id="sync-fail-hook"),
        pytest.param({ARGO: "PreSync,PostSync", WAVE: "1"}, (Phase.PRE, 1), id="two-phases-first"),
    ],
)
def test_stage_of(annotations: dict[str, Any], stage: tuple[int, int]) -> None:
    assert stage_of(annotated(annotations)) == stage


@pytest.mark.parametrize(
    ("kind", "annotations", "stage"),
    [
        pytest.param("Namespace", {}, (Phase.NAMESPACES, 0), id="namespace"),
        pytest.param("Namespace", {WAVE: "3"}, (Phase.NAMESPACES, 3), id="namespace-wave"),
        pytest.param("CustomResourceDefinition", {}, (Phase.NAMESPACES, 0), id="crd"),
        pytest.param(
            "CustomResourceDefinition",
            {HELM: "crd-install"},
            (Phase.NAMESPACES, 0),
            id="crd-install",
        ),
        pytest.param("Namespace", {HELM: "pre-install"}, (Phase.PRE, 0), id="namespace-as-a-hook"),
        pytest.param(
            "Namespace", {HELM: "test"}, (Phase.NAMESPACES, 0), id="namespace-skipped-hook"
        ),
    ],
)
def test_namespaces_and_crds_come_first(
    kind: str, annotations: dict[str, Any], stage: tuple[int, int]
) -> None:
    assert stage_of(annotated(annotations, kind=kind)) == stage


def test_stages_order_phases_before_waves() -> None:
    namespace_late = stage_of(annotated({WAVE: "100"}, kind="Namespace"))
    pre_late = stage_of(annotated({HELM: "pre-install", WEIGHT: "100"}))
    sync_early = stage_of(annotated({WAVE: "-100"}))
    post_early = stage_of(annotated({HELM: "post-install", WEIGHT: "-100"}))
    fail = stage_of(annotated({ARGO: "SyncFail", WAVE: "-100"}))
    assert namespace_late < pre_late < sync_early < post_early < fail


def test_an_ordinary_objects_bad_sync_wave_raises() -> None:
    with pytest.raises(HookError, match="sync-wave: 'soon' is not an integer"):
        stage_of(annotated({WAVE: "soon"}))


# --- stamped, is_hook -----------------------------------------------------------------------


def test_stamped_adds_the_revision_to_a_hook_only() -> None:
    hook = annotated({HELM: "pre-install", "keep": "me"}, kind="Job")
    out = stamped(hook, "r7")
    assert out["metadata"]["annotations"] == {
        HELM: "pre-install",
        "keep": "me",
        HOOK_REVISION: "r7",
    }
    assert HOOK_REVISION not in hook["metadata"]["annotations"]  # the input is not changed
    assert is_hook(out)
    assert not is_hook(hook)
    assert stamped(out, "r8")["metadata"]["annotations"][HOOK_REVISION] == "r8"
    assert hook_of(out) == hook_of(hook)


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="ordinary"),
        pytest.param({WAVE: "2"}, id="ordinary-wave"),
        pytest.param({HELM: "crd-install"}, id="crd-install"),
        pytest.param({HELM: "test"}, id="skipped-helm"),
        pytest.param({ARGO: "Skip"}, id="skipped-argo"),
    ],
)
def test_stamped_leaves_what_is_not_a_hook_alone(annotations: dict[str, Any]) -> None:
    manifest = annotated(annotations)
    assert stamped(manifest, "r1") is manifest
    assert not is_hook(manifest)


# --- deleted_by_policy, recreated -----------------------------------------------------------


def hook(policy: str | None = None, revision: str | None = "r1", **more: Any) -> dict[str, Any]:
    a: dict[str, Any] = {HELM: "pre-install", **more}
    if policy is not None:
        a[HELM_POLICY] = policy
    if revision is not None:
        a[HOOK_REVISION] = revision
    return annotated(a, kind="Job", name="migrate")


@pytest.mark.parametrize(
    ("manifest", "ready", "failed", "expected"),
    [
        pytest.param(hook(SUCCEEDED), True, False, SUCCEEDED, id="succeeded-deletes-on-success"),
        pytest.param(hook(SUCCEEDED), False, True, "", id="succeeded-keeps-a-failure"),
        pytest.param(hook(SUCCEEDED), False, False, "", id="succeeded-not-ended"),
        pytest.param(hook(FAILED), False, True, FAILED, id="failed-deletes-on-failure"),
        pytest.param(hook(FAILED), True, False, "", id="failed-keeps-a-success"),
        pytest.param(hook(f"{SUCCEEDED},{FAILED}"), True, False, SUCCEEDED, id="both-success"),
        pytest.param(hook(f"{SUCCEEDED},{FAILED}"), False, True, FAILED, id="both-failure"),
        pytest.param(
            hook(f"{SUCCEEDED},{FAILED}"), True, True, SUCCEEDED, id="both-flags-success-first"
        ),
        pytest.param(hook(), True, False, "", id="default-policy-keeps-it"),
        pytest.param(hook(BEFORE_CREATION), False, True, "", id="before-creation-keeps-it"),
        pytest.param(hook(SUCCEEDED, revision=None), True, False, "", id="not-stamped-not-ours"),
        pytest.param(
            annotated({HELM: "test", HOOK_REVISION: "r1", HELM_POLICY: SUCCEEDED}),
            True,
            False,
            "",
            id="stamped-but-skipped",
        ),
        pytest.param(
            annotated({HOOK_REVISION: "r1", HELM_POLICY: SUCCEEDED}),
            True,
            False,
            "",
            id="stamped-but-no-hook",
        ),
        pytest.param(hook("always"), True, False, "", id="unreadable-policy-never-raises"),
        pytest.param(
            annotated({ARGO: "PostSync", ARGO_POLICY: "HookSucceeded", HOOK_REVISION: "r1"}),
            True,
            False,
            SUCCEEDED,
            id="argo-policy",
        ),
    ],
)
def test_deleted_by_policy(
    manifest: dict[str, Any], ready: bool, failed: bool, expected: str
) -> None:
    assert deleted_by_policy(manifest, ready=ready, failed=failed) == expected


@pytest.mark.parametrize(
    ("live", "manifest", "expected"),
    [
        pytest.param(
            hook(revision="r1"), hook(revision="r2"), True, id="earlier-revision-default-policy"
        ),
        pytest.param(hook(revision="r2"), hook(revision="r2"), False, id="same-revision"),
        pytest.param(hook(revision=None), hook(revision="r2"), True, id="live-not-stamped"),
        pytest.param(
            hook(BEFORE_CREATION, "r1"),
            hook(BEFORE_CREATION, "r2"),
            True,
            id="before-creation-named",
        ),
        pytest.param(
            hook(f"{BEFORE_CREATION},{SUCCEEDED}", "r1"),
            hook(f"{BEFORE_CREATION},{SUCCEEDED}", "r2"),
            True,
            id="before-creation-and-succeeded",
        ),
        # an earlier copy left live (it failed, or was kept) is re-created whatever the policy:
        # patching a Job does not run it again
        pytest.param(hook(SUCCEEDED, "r1"), hook(SUCCEEDED, "r2"), True, id="succeeded-only"),
        pytest.param(hook(FAILED, "r1"), hook(FAILED, "r2"), True, id="failed-only"),
        pytest.param(hook(revision="r1"), hook(revision=None), False, id="manifest-not-stamped"),
        pytest.param(hook(revision="r1"), hook("always", "r2"), False, id="unreadable-manifest"),
        pytest.param(
            hook(revision="r1"),
            annotated({HELM: "test", HOOK_REVISION: "r2"}),
            False,
            id="skipped-manifest",
        ),
    ],
)
def test_recreated(live: dict[str, Any], manifest: dict[str, Any], expected: bool) -> None:
    assert recreated(live, manifest) is expected


# --- health.retiring and ended for hooks ----------------------------------------------------

COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}]}
JOB_FAILED = {
    "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]
}
RUNNING = {"active": 1}


def job(
    status: dict[str, Any] | None,
    policy: str | None = None,
    *,
    revision: str | None = "r1",
    deleting: bool = False,
    ttl: int | None = None,
) -> dict[str, Any]:
    o = hook(policy, revision)
    if status is not None:
        o["status"] = status
    if deleting:
        o["metadata"]["deletionTimestamp"] = "2026-11-26T12:00:00Z"
    if ttl is not None:
        o["spec"] = {"ttlSecondsAfterFinished": ttl}
    return o


def pod(phase: str, policy: str) -> dict[str, Any]:
    o = annotated({ARGO: "PreSync", ARGO_POLICY: policy, HOOK_REVISION: "r1"}, kind="Pod")
    o["status"] = {"phase": phase}
    return o


RETIRING: list[tuple[str, dict[str, Any], bool]] = [
    ("job-complete-succeeded-policy", job(COMPLETE, SUCCEEDED), True),
    ("job-complete-succeeded-policy-being-deleted", job(COMPLETE, SUCCEEDED, deleting=True), True),
    ("job-failed-failed-policy", job(JOB_FAILED, FAILED), True),
    ("job-failed-failed-policy-being-deleted", job(JOB_FAILED, FAILED, deleting=True), True),
    ("job-failed-both-policies", job(JOB_FAILED, f"{SUCCEEDED},{FAILED}"), True),
    ("job-failed-succeeded-policy", job(JOB_FAILED, SUCCEEDED, deleting=True), False),
    ("job-complete-failed-policy", job(COMPLETE, FAILED, deleting=True), False),
    ("job-complete-default-policy", job(COMPLETE, deleting=True), False),
    ("job-running-succeeded-policy-being-deleted", job(RUNNING, SUCCEEDED, deleting=True), False),
    ("job-without-status-succeeded-policy", job(None, SUCCEEDED), False),
    ("job-complete-not-stamped-not-ours", job(COMPLETE, SUCCEEDED, revision=None), False),
    # a Job's TTL still retires it, hook or not
    ("job-complete-ttl-not-a-hook", job(COMPLETE, revision=None, ttl=30), True),
    ("job-complete-ttl-default-policy", job(COMPLETE, ttl=0), True),
    ("job-failed-ttl", job(JOB_FAILED, revision=None, ttl=30), False),
    # other kinds end as their health says: no status is Ready
    (
        "configmap-hook-succeeded-policy",
        annotated({HELM: "pre-install", HELM_POLICY: SUCCEEDED, HOOK_REVISION: "r1"}),
        True,
    ),
    (
        "configmap-hook-failed-policy",
        annotated({HELM: "pre-install", HELM_POLICY: FAILED, HOOK_REVISION: "r1"}),
        False,
    ),
    ("pod-succeeded-succeeded-policy", pod("Succeeded", "HookSucceeded"), True),
    ("pod-failed-failed-policy", pod("Failed", "HookFailed"), True),
    ("pod-running-failed-policy", pod("Running", "HookFailed"), False),
]


@pytest.mark.parametrize(
    ("manifest", "expected"), [pytest.param(m, e, id=i) for i, m, e in RETIRING]
)
def test_retiring(manifest: dict[str, Any], expected: bool) -> None:
    assert retiring(manifest) is expected


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(job(COMPLETE, deleting=True), Health.READY, id="complete"),
        pytest.param(job(JOB_FAILED, deleting=True), Health.FAILED, id="failed"),
        pytest.param(job(RUNNING, deleting=True), Health.IN_PROGRESS, id="running"),
    ],
)
def test_ended_is_the_health_before_the_delete_began(
    manifest: dict[str, Any], expected: Health
) -> None:
    assert health(manifest) == (Health.IN_PROGRESS, "terminating")
    assert ended(manifest)[0] is expected
    assert "deletionTimestamp" in manifest["metadata"]  # not changed


def test_ended_keeps_the_failure_message() -> None:
    assert ended(job(JOB_FAILED, FAILED, deleting=True)) == (Health.FAILED, "BackoffLimitExceeded")


# --- checked_revision: stages, hooks, skipped hooks, stamping -------------------------------

NS = "apps"


def bundle(revision: str = "r1", **options: Any) -> Bundle:
    return Bundle(
        cluster="c",
        bundle="team-a/web",
        revision=revision,
        options=BundleOptions(namespace=NS, **options),
    )


def key(kind: str, name: str) -> ObjectKey:
    group = "batch" if kind == "Job" else "apps" if kind == "Deployment" else ""
    return ObjectKey(group, kind, NS, name)


def deployment(name: str, **annotations: Any) -> dict[str, Any]:
    o = annotated(annotations, name=name)
    o.update(apiVersion="apps/v1", kind="Deployment", spec={"replicas": 1})
    return o


CHART: list[dict[str, Any]] = [
    annotated({}, name="config"),
    deployment("web", **{WAVE: "2"}),
    annotated(
        {HELM: "pre-install,pre-upgrade", WEIGHT: "-1", HELM_POLICY: SUCCEEDED},
        kind="Job",
        name="migrate",
    ),
    annotated({HELM: "pre-install,post-install", WEIGHT: "-5"}, name="hook-sa"),
    annotated({HELM: "post-install"}, kind="Job", name="smoke"),
    annotated({ARGO: "SyncFail"}, kind="Job", name="page"),
    annotated({HELM: "test"}, kind="Pod", name="test-connection"),
    annotated({ARGO: "PostDelete"}, kind="Job", name="cleanup"),
]


def taken(
    b: Bundle, manifests: list[Any]
) -> tuple[dict[ObjectKey, dict[str, Any]], dict[ObjectKey, bytes], Plan]:
    plan = Plan()
    out = checked_revision(b, manifests, Scopes(), plan)
    manifests_by_key = {slot[1]: msgspec.json.decode(encoded) for slot, encoded, _ in out}
    shas = {slot[1]: sha for slot, _, sha in out}
    return manifests_by_key, shas, plan


def test_a_revision_takes_its_hooks_and_stages_in() -> None:
    manifests, _, plan = taken(bundle(), CHART)
    assert set(manifests) == {
        key("ConfigMap", "config"),
        key("Deployment", "web"),
        key("Job", "migrate"),
        key("ConfigMap", "hook-sa"),
        key("Job", "smoke"),
        key("Job", "page"),
    }
    assert plan.skipped == 2
    assert plan.stages == {
        key("ConfigMap", "config"): (Phase.SYNC, 0),
        key("Deployment", "web"): (Phase.SYNC, 2),
        key("Job", "migrate"): (Phase.PRE, -1),
        key("ConfigMap", "hook-sa"): (Phase.PRE, -5),
        key("Job", "smoke"): (Phase.POST, 0),
        key("Job", "page"): (Phase.FAIL, 0),
    }
    assert plan.hooks == {
        key("Job", "migrate"): Hook(Phase.PRE, -1, frozenset([SUCCEEDED])),
        key("ConfigMap", "hook-sa"): Hook(Phase.PRE, -5, DEFAULT, Phase.POST),
        key("Job", "smoke"): Hook(Phase.POST, 0, DEFAULT),
        key("Job", "page"): Hook(Phase.FAIL, 0, DEFAULT),
    }
    for k, m in manifests.items():
        stamp = m["metadata"].get("annotations", {}).get(HOOK_REVISION)
        assert stamp == ("r1" if k in plan.hooks else None), k


@pytest.mark.parametrize(
    ("manifests", "stages"),
    [
        pytest.param(
            [annotated({}, name="a"), annotated({}, name="b")], {}, id="one-stage-no-hooks-cleared"
        ),
        pytest.param(
            [annotated({WAVE: "3"}, name="a"), annotated({WAVE: "3"}, name="b")],
            {},
            id="one-higher-wave-no-hooks-cleared",
        ),
        pytest.param(
            [annotated({}, name="a"), annotated({WAVE: "1"}, name="b")],
            {("a",): (Phase.SYNC, 0), ("b",): (Phase.SYNC, 1)},
            id="two-waves-kept",
        ),
        pytest.param(
            [annotated({}, name="a"), annotated({ARGO: "Sync"}, name="b")],
            {("a",): (Phase.SYNC, 0), ("b",): (Phase.SYNC, 0)},
            id="one-stage-with-a-hook-kept",
        ),
        pytest.param(
            [annotated({}, name="a"), annotated({HELM: "crd-install", WAVE: "0"}, name="b")],
            {},
            id="crd-install-is-ordinary",
        ),
        pytest.param(
            [annotated({}, name="a"), annotated({HELM: "test", WAVE: "5"}, name="b")],
            {},
            id="a-skipped-hooks-wave-does-not-count",
        ),
    ],
)
def test_stages_are_kept_only_when_something_waits(
    manifests: list[dict[str, Any]], stages: dict[tuple[str], tuple[int, int]]
) -> None:
    _, _, plan = taken(bundle(), manifests)
    assert plan.stages == {key("ConfigMap", name): s for (name,), s in stages.items()}


def test_a_revision_with_a_namespace_and_no_hook_is_not_staged() -> None:
    # Namespaces and CRDs go first only for the hooks that live in them: a plain revision with a
    # Namespace is written all at once, as before (staging it made its intake quadratic)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    _, _, plan = taken(bundle(), [namespace, annotated({}, name="a")])
    assert plan.hooks == {}
    assert plan.stages == {}


def test_a_revision_with_a_namespace_and_a_hook_creates_the_namespace_first() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    pre = annotated({"helm.sh/hook": "pre-install"}, name="h")
    _, _, plan = taken(bundle(), [namespace, pre, annotated({}, name="a")])
    assert plan.stages[ObjectKey("", "Namespace", "", NS)] == (Phase.NAMESPACES, 0)
    assert plan.stages[key("ConfigMap", "h")] == (Phase.PRE, 0)
    assert plan.stages[key("ConfigMap", "a")] == (Phase.SYNC, 0)


def test_the_hook_revision_changes_a_hooks_sha_between_revisions_only() -> None:
    _, r1, _ = taken(bundle("r1"), CHART)
    _, r1_again, _ = taken(bundle("r1"), CHART)
    _, r2, plan = taken(bundle("r2"), CHART)
    assert r1 == r1_again  # a restart or a republish of the same revision runs nothing again
    for k in r1:
        if k in plan.hooks:
            assert r1[k] != r2[k], k  # a new revision runs its hooks again
        else:
            assert r1[k] == r2[k], k  # and leaves its ordinary objects alone


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        pytest.param(
            annotated({HELM: "pre-instal"}, name="a"),
            r"manifests\[1\]: annotation helm\.sh/hook: unknown hook 'pre-instal'",
            id="unknown-hook",
        ),
        pytest.param(
            annotated({HELM: "pre-install", WEIGHT: "x"}, name="a"),
            r"manifests\[1\]: annotation helm\.sh/hook-weight: 'x' is not an integer",
            id="bad-weight",
        ),
        pytest.param(
            annotated({ARGO: "PreSync", ARGO_POLICY: "Never"}, name="a"),
            r"manifests\[1\]: annotation argocd\.argoproj\.io/hook-delete-policy: unknown policy",
            id="bad-policy",
        ),
    ],
)
def test_an_unreadable_hook_refuses_the_revision_naming_it(
    manifest: dict[str, Any], message: str
) -> None:
    with pytest.raises(ManifestError, match=r"^1 of 2 objects are invalid: " + message):
        checked_revision(bundle(), [annotated({}, name="ok"), manifest], Scopes())


def test_an_ordinary_objects_bad_sync_wave_refuses_the_revision_naming_it() -> None:
    with pytest.raises(
        ManifestError,
        match=r"^1 of 2 objects are invalid: ConfigMap/apps/a: annotation "
        r"argocd\.argoproj\.io/sync-wave: 'soon' is not an integer$",
    ):
        checked_revision(
            bundle(), [annotated({}, name="ok"), annotated({WAVE: "soon"}, name="a")], Scopes()
        )


def test_a_hook_with_only_generate_name_is_refused_naming_it() -> None:
    # Argo CD's docs name hooks with generateName; driftbus keys every object by its name
    job = annotated({ARGO: "PreSync"}, kind="Job")
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "migrate-"
    with pytest.raises(ManifestError, match=r"manifests\[0\]: Job/\?: metadata\.name is missing"):
        checked_revision(bundle(), [job], Scopes())


def test_a_revision_of_only_skipped_hooks_is_refused_as_empty() -> None:
    with pytest.raises(ManifestError, match="empty revision"):
        checked_revision(bundle(), [annotated({HELM: "test"}, kind="Pod", name="t")], Scopes())


def test_a_revision_of_only_skipped_hooks_may_be_empty_when_allowed() -> None:
    manifests, _, plan = taken(
        bundle(allow_empty=True), [annotated({HELM: "test"}, kind="Pod", name="t")]
    )
    assert manifests == {}
    assert plan.skipped == 1


# --- the tally: a failed hook fails the revision, naming it; sync-fail hooks not run ----------

M1, A1 = b"\x01" * 32, b"\x0a" * 32
MIGRATE, PAGE, WORKER = key("Job", "migrate"), key("Job", "page"), key("Job", "worker")


def mark_of(
    k: ObjectKey,
    *,
    applied: bool = True,
    retired: bool = False,
    h: Health = Health.READY,
    why: str = "",
) -> Mark | None:
    view = BundleView.of(bundle(), 1)
    view.keys.update([MIGRATE, PAGE, WORKER])
    view.hooks.update({MIGRATE: Hook(Phase.PRE, 0, DEFAULT), PAGE: Hook(Phase.FAIL, 0, DEFAULT)})
    view.stages.update({MIGRATE: (Phase.PRE, 0), PAGE: (Phase.FAIL, 0), WORKER: (Phase.SYNC, 0)})
    entries, details = EntryStore(), Details()
    slot = ("c", k)
    entries[slot] = Entry(
        k,
        bundle="team-a/web",
        revision="r1",
        manifest_sha=M1,
        applied_manifest_sha=M1 if applied else None,
        apply_sha=A1 if applied else None,
        applied_rv=3 if applied else 0,
        server_sha=None if retired else A1 if applied else None,
        server_rv=4 if applied else 0,
        server_deleted=retired,
        server_retired=retired,
    )
    details.set_health(slot, h, why)
    return mark(slot, Known(entries, details, [], True, lambda _s, _v: ""), view)


MIGRATE_FAILED = f"{MIGRATE}: hook failed"
F, R, IP = Health.FAILED, Health.READY, Health.IN_PROGRESS

MARKS: list[tuple[str, ObjectKey, dict[str, Any], Mark | None]] = [
    ("a-ready-hook-is-ready", MIGRATE, {}, None),
    (
        "a-running-hook-is-not-ready",
        MIGRATE,
        {"h": IP, "why": "active: 1"},
        (NOT_READY, f"{MIGRATE}: not ready (InProgress): active: 1"),
    ),
    (
        "a-failed-hook-fails-naming-it",
        MIGRATE,
        {"h": F, "why": "BackoffLimitExceeded"},
        (FAILED_MARK, f"{MIGRATE_FAILED}: BackoffLimitExceeded"),
    ),
    ("a-failed-hook-without-a-message", MIGRATE, {"h": F}, (FAILED_MARK, MIGRATE_FAILED)),
    (
        "a-failed-hook-deleted-by-its-policy-still-fails",
        MIGRATE,
        {"retired": True, "h": F, "why": "BackoffLimitExceeded"},
        (FAILED_MARK, f"{MIGRATE_FAILED}: BackoffLimitExceeded"),
    ),
    ("a-hook-deleted-after-success-is-ready", MIGRATE, {"retired": True}, None),
    (
        "a-failed-ordinary-job-is-unhealthy",
        WORKER,
        {"h": F, "why": "x"},
        (UNHEALTHY, f"{WORKER}: unhealthy: x"),
    ),
    ("a-hook-held-by-its-wave-counts-as-not-applied", MIGRATE, {"applied": False}, (SKIP_MARK, "")),
    ("a-sync-fail-hook-not-run-is-not-waited-for", PAGE, {"applied": False}, None),
    (
        "a-sync-fail-hook-that-ran-and-runs",
        PAGE,
        {"h": IP},
        (NOT_READY, f"{PAGE}: not ready (InProgress)"),
    ),
    ("a-sync-fail-hook-that-failed-fails", PAGE, {"h": F}, (FAILED_MARK, f"{PAGE}: hook failed")),
]


@pytest.mark.parametrize(
    ("k", "how", "expected"), [pytest.param(k, h, x, id=i) for i, k, h, x in MARKS]
)
def test_mark_of_a_hook(k: ObjectKey, how: dict[str, Any], expected: Mark | None) -> None:
    assert mark_of(k, **how) == expected


# --- hooks: a Pod hook still running counts as done ----------------------------------------


def _stamped(obj: dict[str, object], revision: str = "r2") -> dict[str, object]:
    from services.core import hooks

    return hooks.stamped(obj, revision)


def _running_pod_hook() -> dict[str, object]:
    return _stamped(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "migrate",
                "namespace": "shop",
                "annotations": {
                    "argocd.argoproj.io/hook": "PreSync",
                    "argocd.argoproj.io/hook-delete-policy": "HookSucceeded",
                },
            },
            "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


# found in review, mended in a8d7070: a Pod hook (restartPolicy Never) that is Running and Ready
# counts as succeeded (health READY): the next stage is written before it finished,
# HookSucceeded deletes it mid-run (Folder._delete_ended_hook) and its delete is taken as its
# end (health.retiring); Helm and Argo CD wait for a Pod hook to reach Succeeded
def test_a_running_pod_hook_has_not_succeeded() -> None:
    from schemas.messages import Health
    from services.core import health, hooks

    pod = _running_pod_hook()
    h, _ = health.health(pod)
    assert not hooks.deleted_by_policy(pod, ready=h is Health.READY, failed=h is Health.FAILED)
    assert not health.retiring(pod)


# --- hooks: before-hook-creation deletes what must not be re-created -------------------------


def _hook(kind: str, api_version: str, extra: dict[str, str], namespace: str = "") -> dict:
    meta: dict[str, object] = {
        "name": "data",
        "annotations": {"helm.sh/hook": "pre-install", **extra},
        "labels": {"driftbus.dev/bundle": "shop"},
    }
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


# found in review, mended in a8d7070: every pre-install hook is deleted and re-created on each
# new revision (hooks.recreated, applier verbs.recreate_hook), whatever it is: a PVC Helm keeps
# (helm.sh/resource-policy: keep) loses its data, and a Namespace hook takes every object in it,
# other bundles' too, with it; Helm runs pre-install once and never deletes a kept resource
@pytest.mark.parametrize(
    "manifest",
    [
        _hook("PersistentVolumeClaim", "v1", {"helm.sh/resource-policy": "keep"}, "shop"),
        _hook("Namespace", "v1", {}),
    ],
    ids=["pvc-kept", "namespace"],
)
def test_a_new_revision_does_not_delete_a_kept_or_namespace_hook(manifest: dict) -> None:
    from services.core import hooks

    live = _stamped(manifest, "r1")
    assert not hooks.recreated(live, _stamped(manifest, "r2"))
