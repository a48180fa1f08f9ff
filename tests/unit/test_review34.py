"""Review of issue 34 (hooks and waves, notifications, SOPS, sync windows, OCI): black-box tests
of the defects a review found, each failing before its mend (they were strict xfails until
then): OCI decompression bombs in tar headers (long-name, pax-hidden) and manifests of the
wrong shape, a window duration that overflowed out of the planner, a tenant's notifications
reading the platform's secret files, a rate-limited phase leaving a false Ready, a running Pod
hook taken as succeeded, kept and Namespace hooks deleted, a staged revision's quadratic cost."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import tarfile
import tracemalloc
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from services.inputs.limits import InputLimits
from services.inputs.oci.artifact import unpack
from services.inputs.oci.reference import OciError
from services.windows import document as windows_document
from services.windows import verdict as sync_windows

from ..loopback import serve_posts

# --- OCI: a decompression bomb in a tar header ------------------------------------------------


def _longname_bomb(header_bytes: int) -> bytes:
    """A .tar.gz whose first member is a GNU long-name header ``header_bytes`` long: a few
    hundred KB on the wire."""
    hdr = tarfile.TarInfo("././@LongLink")
    hdr.type = tarfile.GNUTYPE_LONGNAME
    hdr.size = header_bytes
    return _gzipped(hdr.tobuf(format=tarfile.GNU_FORMAT), header_bytes, 1024)


def _gzipped(headers: bytes, header_bytes: int, trailer: int) -> bytes:
    """``headers``, then ``header_bytes`` of one repeated byte (a header's body: it
    compresses to almost nothing), then ``trailer`` zero bytes, gzipped."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as z:
        z.write(headers)
        chunk = b"a" * (1024 * 1024)
        for _ in range(header_bytes // len(chunk)):
            z.write(chunk)
        z.write(b"\0" * trailer)
    return out.getvalue()


def _peak_refusing(data: bytes, tmp_path: Path) -> int:
    """The peak memory (bytes) of an ``unpack`` of ``data`` that must be refused."""
    tracemalloc.start()
    try:
        with pytest.raises(OciError):
            unpack(data, tmp_path, InputLimits(), "oci://r/a@sha256:x (layer)")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# found in review, mended in 602f3a5: oci_artifact.unpack lets tarfile read a GNU long-name (or
# pax) header of any size into memory before any limit is checked: a 300 KB layer allocates 300
# MB
def test_a_small_layer_cannot_make_unpack_allocate_hundreds_of_megabytes(tmp_path: Path) -> None:
    data = _longname_bomb(256 * 1024 * 1024)
    assert len(data) < 1024 * 1024
    peak = _peak_refusing(data, tmp_path)
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


# found in review, mended in a8d7070: core.windows.parse_duration accepts a duration whose
# datetime arithmetic overflows (OverflowError, not WindowsError): the planner's fold
# (ClusterState.window_block -> windows.block) or its _on_windows raises it out of the loop,
# which catches only WireError/ValueError
@pytest.mark.parametrize("duration", ["9999999999h", "99999999999999999h"])
def test_a_huge_duration_is_refused_or_answered_never_raised(duration: str) -> None:
    at = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    try:
        spec = windows_document.load_windows(_windows_file(duration), "w.yaml")
        # what `driftbus windows apply` accepted, the planner reads back and asks about
        windows = windows_document.compiled(
            windows_document.decode_stored(windows_document.dump(spec))
        )
    except windows_document.WindowsError:
        return  # refused with a message naming the file: fine
    sync_windows.block(windows, "team-a/web", "prod-1", at)
    sync_windows.next_change(windows, "team-a/web", "prod-1", at)
    sync_windows.rows(spec, at)


# --- notify: a tenant's configuration reads the platform's secret files ----------------------


# found in review, mended in a8d7070: a tenant's notifications file may name any file the notify
# service can read as tokenFile (or urlFile/secretFile), with an apiUrl of its choosing: the
# platform's GitHub token is sent to the tenant's server (notify.config.check,
# send.read_secrets)
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

    runner, port = await serve_posts(receive, "/{tail:.*}")
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


# --- OCI: a manifest of the wrong shape escapes as TypeError ------------------------------


# found in review, mended in 602f3a5: oci_artifact.pull iterates the manifest's layers and
# passes a layer's size unchecked: layers 5 or a size past 64 bits raise TypeError, not OciError
# (publish --oci prints a traceback; source logs one each poll)
@pytest.mark.parametrize(
    "layers",
    [5, [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "size": 10**30}]],
    ids=["layers-not-a-list", "size-past-64-bits"],
)
async def test_a_manifest_of_the_wrong_shape_is_an_oci_error(
    tmp_path: Path, layers: object
) -> None:
    from services.inputs.oci import artifact as oci_artifact
    from services.inputs.oci.client import Fetched
    from services.inputs.oci.reference import FLUX_CONFIG, OCI_MANIFEST, Reference

    for layer in layers if isinstance(layers, list) else ():
        layer["digest"] = "sha256:" + "b" * 64
    manifest = {"mediaType": OCI_MANIFEST, "config": {"mediaType": FLUX_CONFIG}, "layers": layers}

    class Registry:  # answers the manifest as a registry would; no blob is ever asked for
        async def manifest(self, ref: Reference) -> Fetched:
            return Fetched("sha256:" + "a" * 64, OCI_MANIFEST, json.dumps(manifest).encode())

        async def blob(self, *args: object, **kwargs: object) -> bytes:
            raise AssertionError("no blob is read for this manifest")

    with pytest.raises(OciError):
        await oci_artifact.pull(
            Registry(),  # type: ignore[arg-type]
            Reference("r.io", "a", "1"),
            tmp_path,
            InputLimits(),
        )


# --- planner: a staged revision's objects finishing one by one is quadratic -----------------


async def _finish_one_by_one(n: int) -> int:
    """How many entries the planner's Folder reads as ``n`` objects of a revision with a
    pre-sync hook become Ready one after the other (the hook done first): its work, counted
    rather than timed (a timing fails on a busy machine)."""
    from schemas.messages import Health
    from schemas.subjects import ObjectKey
    from services.core.hooks import BEFORE_CREATION, Hook, Phase
    from services.planner.memory.cluster import ClusterState
    from services.planner.memory.store import EntryStore
    from services.planner.rule.entry import Entry, Slot
    from services.planner.rule.revision import BundleView
    from services.planner.shell.folding import Folder

    class Board:
        def mark(self, ident: object) -> None:
            pass

        def continue_current_span(self, ident: object) -> None:
            pass

    class Decisions:
        async def publish(self, slot: object, d: object, **kw: object) -> None:
            pass

    class CountedEntries(EntryStore):
        reads = 0

        def _record(self, slot: Slot) -> bytes | None:
            self.reads += 1
            return super()._record(slot)

    entries = CountedEntries()
    st = ClusterState(cluster="c", entries=entries)
    st.live = True
    keys = [ObjectKey("", "ConfigMap", "ns", f"c{i}") for i in range(n)]
    hook = ObjectKey("batch", "Job", "ns", "migrate")
    stages = {hook: (int(Phase.PRE), 0), **{k: (int(Phase.SYNC), 0) for k in keys}}
    view = BundleView(
        "c", "shop", "r2", 1, True, False, False, set(stages), [], stages=stages,
        hooks={hook: Hook(Phase.PRE, 0, frozenset({BEFORE_CREATION}))},
    )  # fmt: skip
    st.bundles[("c", "shop")] = view
    folder = Folder(state=st, board=Board(), decisions=Decisions())  # type: ignore[arg-type]
    sha = b"\x01" * 32

    def done(k: ObjectKey) -> None:
        st.entries[("c", k)] = Entry(
            k, bundle="shop", revision="r2", manifest_sha=sha, applied_manifest_sha=sha,
            apply_sha=sha, applied_rv=1, server_sha=sha, server_rv=2, owner_bundle="shop",
            applied_bundle="shop",
        )  # fmt: skip
        st.details.set_health(("c", k), Health.READY, "")

    done(hook)
    await folder.advance(("c", hook), "shop")
    before = entries.reads
    for k in keys:
        done(k)
        await folder.advance(("c", k), "shop")
    return entries.reads - before


# found in review, mended in a8d7070: Folder.advance walks every object of the revision whenever
# the gate differs, and it differs on nearly every fold (Gate.waiting_on names the next object
# not done): quadratic, ~200 s of the planner's loop for a 20,000-object revision with a hook
async def test_a_staged_revision_finishing_costs_the_planner_linear_time() -> None:
    small = await _finish_one_by_one(600)
    large = await _finish_one_by_one(2400)
    # 4x the objects: linear work reads about 4x the entries; quadratic 16x
    assert large <= 5 * small, f"entries read: 600 objects {small:,}; 2,400 objects {large:,}"


# --- notify: a rate-limited phase is never sent: the last message says Ready ----------------


async def test_a_rate_limited_failure_still_reaches_the_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from schemas.notify import EventKind
    from services.notify import config
    from services.notify import gate as notify_gate
    from services.notify.events import Event
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    monkeypatch.setattr(notify_gate, "RATE_WINDOW", 0.5)  # a minute, shortened
    got: list[str] = []

    async def receive(request: web.Request) -> web.Response:
        got.append((await request.json())["kind"])
        return web.json_response({})

    runner, port = await serve_posts(receive, "/hook")
    try:
        cfg = config.load(
            f"providers:\n- name: hook\n  type: webhook\n  url: http://127.0.0.1:{port}/hook\n"
            "alerts:\n- providers: [hook]\n  events: [Ready, Failed]\n"
            "limits:\n  perMinute: 1\n",
            "n.yaml",
        )
        async with aiohttp.ClientSession() as session:
            n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=5.0)
            n.configure("platform", cfg)
            n.handle(Event(EventKind.READY, "web", "r1", cluster="prod-1"))
            n.handle(Event(EventKind.FAILED, "web", "r1", cluster="prod-1", detail="Failed"))
            # the bundle stays Failed; its status is not published again while nothing changes
            await asyncio.sleep(2.0)
            await n.close()
    finally:
        await runner.cleanup()
    assert got, "nothing was delivered"
    assert got[-1] == "Failed", got


# --- OCI: the header walk of 602f3a5 is bypassed by a pax size override ---------------------


def _pax(records: dict[str, str]) -> bytes:
    """A pax extended header (type x) with ``records``, padded to blocks."""
    body = b""
    for k, v in records.items():
        rec = f" {k}={v}\n".encode()
        width = next(w for w in range(1, 20) if len(str(len(rec) + w)) == w)
        body += str(len(rec) + width).encode() + rec
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = len(body)
    return header.tobuf(format=tarfile.USTAR_FORMAT) + body + b"\0" * (-len(body) % 512)


def _pax_hidden_bomb(header_bytes: int) -> bytes:
    """A member whose ustar size covers a GNU long-name header ``header_bytes`` long, while its
    pax record says size=0: tarfile reads the long-name header next, whole; a walk that skips
    by the ustar size never looks at it."""
    bomb = tarfile.TarInfo("././@LongLink")
    bomb.type = tarfile.GNUTYPE_LONGNAME
    bomb.size = header_bytes
    member = tarfile.TarInfo("a.yaml")
    member.size = 512 + (header_bytes + 511) // 512 * 512
    headers = (
        _pax({"size": "0"})
        + member.tobuf(format=tarfile.USTAR_FORMAT)
        + bomb.tobuf(format=tarfile.GNU_FORMAT)
    )
    return _gzipped(headers, header_bytes, 2048)


def test_a_pax_size_record_does_not_hide_a_huge_header(tmp_path: Path) -> None:
    data = _pax_hidden_bomb(150 * 1024 * 1024)
    assert len(data) < 1024 * 1024
    peak = _peak_refusing(data, tmp_path)
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB for a {len(data):,}-byte layer"
