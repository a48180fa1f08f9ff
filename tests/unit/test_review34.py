"""Review of issue 34 (hooks and waves, notifications, SOPS, sync windows, OCI): black-box tests
of defects found. Each is a strict xfail naming its defect: it passes once the defect is mended
(then drop the mark)."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import tarfile
import tracemalloc
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from services.common.limits import InputLimits
from services.common.oci import OciError
from services.common.oci_artifact import unpack
from services.core import windows as sync_windows

# --- OCI: a decompression bomb in a tar header ------------------------------------------------


def _longname_bomb(header_bytes: int) -> bytes:
    """A .tar.gz whose first member is a GNU long-name header ``header_bytes`` long: a few
    hundred KB on the wire."""
    hdr = tarfile.TarInfo("././@LongLink")
    hdr.type = tarfile.GNUTYPE_LONGNAME
    hdr.size = header_bytes
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as z:
        z.write(hdr.tobuf(format=tarfile.GNU_FORMAT))
        chunk = b"a" * (1024 * 1024)
        for _ in range(header_bytes // len(chunk)):
            z.write(chunk)
        z.write(b"\0" * 1024)
    return out.getvalue()


@pytest.mark.xfail(
    strict=True,
    reason="defect: oci_artifact.unpack lets tarfile read a GNU long-name (or pax) header of any "
    "size into memory before any limit is checked: a 300 KB layer allocates 300 MB",
)
def test_a_small_layer_cannot_make_unpack_allocate_hundreds_of_megabytes(tmp_path: Path) -> None:
    data = _longname_bomb(256 * 1024 * 1024)
    assert len(data) < 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(OciError):
            unpack(data, tmp_path, InputLimits(), "oci://r/a@sha256:x (layer)")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB for a {len(data):,}-byte layer"


# --- sync windows: a duration that overflows --------------------------------------------------


def _windows_file(duration: str) -> bytes:
    return orjson.dumps(
        {
            "windows": [
                {
                    "kind": "deny",
                    "schedule": "0 22 * * 5",
                    "duration": duration,
                    "timeZone": "Europe/Berlin",
                    "bundles": ["*"],
                    "clusters": ["*"],
                }
            ]
        }
    )


@pytest.mark.xfail(
    strict=True,
    reason="defect: core.windows.parse_duration accepts a duration whose datetime arithmetic "
    "overflows (OverflowError, not WindowsError): the planner's fold (ClusterState.window_block "
    "-> windows.block) or its _on_windows raises it out of the loop, which catches only "
    "WireError/ValueError",
)
@pytest.mark.parametrize("duration", ["9999999999h", "99999999999999999h"])
def test_a_huge_duration_is_refused_or_answered_never_raised(duration: str) -> None:
    at = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    try:
        spec = sync_windows.load_windows(_windows_file(duration), "w.yaml")
        # what `driftbus windows apply` accepted, the planner reads back and asks about
        windows = sync_windows.compiled(sync_windows.decode_stored(sync_windows.dump(spec)))
    except sync_windows.WindowsError:
        return  # refused with a message naming the file: fine
    sync_windows.block(windows, "team-a/web", "prod-1", at)
    sync_windows.next_change(windows, "team-a/web", "prod-1", at)
    sync_windows.rows(spec, at)


# --- notify: a tenant's configuration reads the platform's secret files ----------------------


@pytest.mark.xfail(
    strict=True,
    reason="defect: a tenant's notifications file may name any file the notify service can "
    "read as tokenFile (or urlFile/secretFile), with an apiUrl of its choosing: the platform's "
    "GitHub token is sent to the tenant's server (notify.config.check, send.read_secrets)",
)
async def test_a_tenants_configuration_cannot_send_the_platforms_token_to_its_server(
    tmp_path: Path,
) -> None:
    from schemas.notify import EventKind
    from services.notify import config
    from services.notify.events import Event
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    platform_token = tmp_path / "platform-github-token"
    platform_token.write_text("ghp_PLATFORMSECRET0123456789\n")
    got: list[str] = []

    async def receive(request: web.Request) -> web.Response:
        got.append(request.headers.get("Authorization", ""))
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_post("/{tail:.*}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        text = (
            "providers:\n- name: steal\n  type: github\n"
            f"  tokenFile: {platform_token}\n  apiUrl: http://127.0.0.1:{port}\n"
            "alerts:\n- providers: [steal]\n  bundles: ['team-a/*']\n"
        )
        try:
            cfg = config.load(text, "team-a.yaml", tenant="team-a")
        except config.ConfigError:
            return  # refused: a tenant may not name the platform's files
        commit = "a" * 40
        ready = Event(
            EventKind.READY,
            "team-a/web",
            commit,
            cluster="prod-1",
            source=f"https://github.com/team-a/web.git@{commit}",
        )
        async with aiohttp.ClientSession() as session:
            n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=5.0)
            n.configure(config.key_of("team-a"), cfg)
            n.handle(ready)
            await n.close()
    finally:
        await runner.cleanup()
    assert not any("PLATFORMSECRET" in h for h in got), got


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


@pytest.mark.xfail(
    strict=True,
    reason="defect: a Pod hook (restartPolicy Never) that is Running and Ready counts as "
    "succeeded (health READY): the next stage is written before it finished, HookSucceeded "
    "deletes it mid-run (Folder._delete_ended_hook) and its delete is taken as its end "
    "(health.retiring); Helm and Argo CD wait for a Pod hook to reach Succeeded",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="defect: every pre-install hook is deleted and re-created on each new revision "
    "(hooks.recreated, applier verbs.recreate_hook), whatever it is: a PVC Helm keeps "
    "(helm.sh/resource-policy: keep) loses its data, and a Namespace hook takes every object "
    "in it, other bundles' too, with it; Helm runs pre-install once and never deletes a kept "
    "resource",
)
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
