"""``driftbus source``: follow Git and OCI repositories and publish what they render as bundles.

Each followed source is a repository (any URL ``git clone`` takes, or a local path), a rule for
which commit to take (a branch, a tag, or the newest tag in a semver range) and a path in it,
published to one bundle of one cluster. Every ``interval`` seconds, or when a push webhook
arrives, the source fetches, resolves the rule to a commit and, when that commit is new, reads
it exactly as ``publish --git`` does (plain manifests, a kustomization rendered, a chart at the
path rendered with Helm). A new revision — the commit id — is published only when the rendered
objects differ from what it published last: a commit that touches only the README publishes
nothing.

An OCI source (``--oci``, ``origins.OciOrigin``) is followed the same way: a tag, the newest tag
in a semver range, or a digest; the manifest's digest is the revision; a Flux artifact is read as
a directory is, a Helm chart rendered (docs/oci.md).

A commit that cannot be fetched, read or rendered publishes nothing: the bundle keeps its last
good revision, and the failure is reported as a ``SourceStatus`` on
``driftbus.status.<cluster>.<bundle>.source`` (``driftbus status --bundle`` shows it). The
source tries that commit again only when the ref moves (a broken commit stays broken); a fetch
error is retried every interval. A repository is read within the input limits
(``services.inputs.limits``, ``DRIFTBUS_MAX_*``) and confined (``services.inputs.confine``: no
symbolic link out of it, kustomize remote bases only for a source the operator allowed them), so
no repository can take the process — and every other source it follows — down with it.

The webhook (``services.source.webhook``) answers other hosts only when it has a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import shutil
import tempfile
import time
from pathlib import Path

from aiohttp import web

from schemas.codec import encode
from schemas.messages import BundleOptions, SourcePhase, SourceStatus
from schemas.subjects import source_status_subject
from services.common import bus
from services.common.settings import SettingsError
from services.core.manifest import ManifestError
from services.fleet.publish import publish_fleet
from services.inputs import load
from services.inputs.limits import InputLimits
from services.revisions.publish import publish_bundle
from services.source.origins import Origin, origin_of, short
from services.source.refs import RefError
from services.source.settings import SourceSettings
from services.source.specs import SourceSpec, SpecError, specs
from services.source.webhook import _proven as _proven
from services.source.webhook import loopback, webhook_app

log = logging.getLogger(__name__)

RESTATE = 24 * 3600.0
"""An unchanged status is published again after this long: STATUS keeps messages 7 days, and
a quiet source must not vanish from ``driftbus status``."""


class Follower:
    """Follows one source: polls, renders new revisions, publishes changed output."""

    def __init__(
        self,
        spec: SourceSpec,
        js: bus.JetStream,
        cache: Path,
        limits: InputLimits | None = None,
    ) -> None:
        self.spec = spec
        self.js = js
        # one copy per followed source: two sources of one repository never share a clone
        ident = f"{spec.git or spec.oci}\n{spec.cluster}\n{spec.bundle}".encode()
        self._cache = cache / hashlib.sha256(ident).hexdigest()[:16]
        self.origin: Origin = origin_of(spec, self._cache, limits)
        self.url = self.origin.url
        """The repository as statuses and logs name it: without credentials."""
        self.trigger = asyncio.Event()
        self.published = ""
        """The last revision (commit or digest) this follower published."""
        self._content = ""
        """``Loaded.content_revision`` of what it published: unchanged output is not republished."""
        self._tried = ""
        """The last revision read (published, unchanged or broken): not read again."""
        self._last_status: tuple[SourcePhase, str, str] | None = None
        self._reported_at = 0.0

    async def poll(self) -> SourceStatus | None:
        """One round; the status it ends in (None when nothing changed since the last)."""
        spec, noun = self.spec, self.origin.noun
        try:
            at = await self.origin.locate()
        except (load.InputError, RefError, OSError, ValueError) as exc:
            if not isinstance(exc, RefError):
                self.origin.forget()
            # read the revision again once fetching works: its status replaces this one
            self._tried = ""
            why = str(exc) if isinstance(exc, RefError) else f"fetch failed: {exc}"
            return await self._report(SourcePhase.FAILED, "", why)
        if at.revision == self._tried:
            if self._last_status and time.monotonic() - self._reported_at >= RESTATE:
                return await self._report(*self._last_status)  # a quiet source stays shown
            return None
        self._tried = at.revision
        kept = f"revision {short(self.published)} stays" if self.published else "none published"
        try:
            loaded = await self.origin.load(at)
            load.require_objects(loaded, spec.bundle)
            load.require_namespaces(loaded, spec.namespace)
            content = loaded.content_revision()  # bounded by the limits the read kept
        except (load.InputError, ManifestError) as exc:
            if isinstance(exc, load.TransientInputError):
                self._tried = ""  # a timeout, the disk: the same revision may read next time
            # otherwise the revision is broken: not read again until the ref moves
            why = f"{noun} {short(at.revision)} not published: {exc}; {kept}"
            return await self._report(SourcePhase.FAILED, at.revision, why)
        except Exception as exc:
            self._tried = ""
            log.exception("reading %s at %s failed", self.url, at.revision)
            why = f"{noun} {short(at.revision)} not read: {type(exc).__name__}: {exc}; {kept}"
            return await self._report(SourcePhase.FAILED, at.revision, why)
        if content == self._content:
            why = (
                f"{noun} {short(at.revision)} is the revision in force"
                if at.revision == self.published
                else f"{noun} {short(at.revision)} renders what {short(self.published)} did: "
                "not republished"
            )
            return await self._report(SourcePhase.PUBLISHED, at.revision, why)
        options = BundleOptions(prune=spec.prune, namespace=spec.namespace)
        try:
            if spec.selector is not None:
                await publish_fleet(
                    self.js,
                    bundle=spec.bundle,
                    revision=at.revision,
                    manifests=[m.obj for m in loaded.manifests],
                    options=options,
                    selector=spec.selector,
                    rollout=spec.rollout,
                    on_leave=spec.on_leave,
                    substitute=spec.substitute,
                    source=loaded.source,
                )
            else:
                await publish_bundle(
                    self.js,
                    cluster=spec.cluster,
                    bundle=spec.bundle,
                    revision=at.revision,
                    manifests=[m.obj for m in loaded.manifests],
                    options=options,
                    source=loaded.source,
                )
        except Exception as exc:  # noqa: BLE001 - the bus, an oversized bundle: try again
            self._tried = ""
            log.warning("publishing %s failed: %s", spec.bundle, exc)
            return await self._report(SourcePhase.FAILED, at.revision, f"publish failed: {exc}")
        self.published, self._content = at.revision, content
        log.info(
            "published",
            extra={
                "bundle": spec.bundle,
                "revision": at.revision,
                "objects": len(loaded.manifests),
            },
        )
        return await self._report(
            SourcePhase.PUBLISHED,
            at.revision,
            f"published {at.ref} at {short(at.revision)}: {len(loaded.manifests)} objects "
            f"from {loaded.source}",
        )

    async def _report(self, phase: SourcePhase, commit: str, message: str) -> SourceStatus | None:
        """Publish the source's status, unless it is the one published last less than
        ``RESTATE`` ago (every poll of a broken repository would otherwise add one)."""
        spec = self.spec
        now = time.monotonic()
        if (phase, commit, message) == self._last_status and now - self._reported_at < RESTATE:
            return None
        status = SourceStatus(
            cluster=spec.where,
            bundle=spec.bundle,
            url=self.url,
            ref=self.origin.following,
            phase=phase,
            commit=commit,
            revision=self.published,
            message=message,
            at=dt.datetime.now(dt.UTC),
        )
        if phase is SourcePhase.FAILED:
            log.error("source %s: %s", spec.bundle, message)
        try:
            await bus.publish(
                self.js, source_status_subject(spec.where, spec.bundle), encode(status)
            )
        except (bus.NatsError, OSError) as exc:  # best effort: the next change reports
            log.warning("status of %s not published: %s", spec.bundle, exc)
            return status
        self._last_status, self._reported_at = (phase, commit, message), now
        return status

    async def run(self, interval: float) -> None:
        while True:
            self.trigger.clear()
            try:
                await self.poll()
            except Exception:  # one broken round never ends following
                log.exception("polling %s failed", self.url)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.trigger.wait(), timeout=interval)


async def run(settings: SourceSettings) -> None:
    try:
        sources = specs(settings)
        limits = InputLimits.from_env()
        if settings.webhook and not settings.webhook.rpartition(":")[2].isdigit():
            raise SpecError(f"--webhook {settings.webhook!r}: expected HOST:PORT")
    except (SpecError, SettingsError) as exc:
        log.error("driftbus source: %s", exc)
        raise SystemExit(2) from None
    nc = await bus.connect(settings, name="driftbus-source")
    js = nc.jetstream()
    own_cache = not settings.cache_dir
    cache = Path(settings.cache_dir or tempfile.mkdtemp(prefix="driftbus-source-"))
    runner: web.AppRunner | None = None
    try:
        await bus.ensure_streams(js, manage=False)  # the planner creates them
        followers = [Follower(s, js, cache, limits) for s in sources]
        if settings.webhook:
            host, _, port = settings.webhook.rpartition(":")
            if not settings.webhook_secret and not loopback(host or "127.0.0.1"):
                log.warning(
                    "WEBHOOK WITHOUT A SECRET listening beyond loopback on %s: POSTs from other "
                    "hosts are refused (403) until --webhook-secret is set",
                    settings.webhook,
                )
            runner = web.AppRunner(webhook_app(followers, settings.webhook_secret))
            await runner.setup()
            await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
            log.info("webhook listening", extra={"address": settings.webhook})
        for f in followers:
            log.info(
                "following",
                extra={"source": f.url, "ref": f.origin.following, "bundle": f.spec.bundle},
            )
        await asyncio.gather(*(f.run(settings.interval) for f in followers))
    finally:
        if runner is not None:
            await runner.cleanup()
        await nc.drain()
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
