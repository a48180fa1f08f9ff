"""A real validating admission webhook, served from the test or bench process, that the real API
server calls.

An aiohttp HTTPS server on 127.0.0.1 (random port) with its own CA and a serving certificate for
IP 127.0.0.1, minted here with ``cryptography``. It answers ``AdmissionReview`` v1 according to
``mode``, which a test switches at any time:

* ``"allow"``: ``allowed: true``;
* ``"error"``: HTTP 500 — the webhook is broken or overloaded (with ``failurePolicy: Fail`` the API
  server refuses the write);
* ``"deny"``: ``allowed: false`` with ``deny_message`` — the webhook's policy says no.

Each answer is sent ``delay`` seconds after the request arrived (0 by default): what a policy
engine such as Gatekeeper or Kyverno adds to every write (the ``webhook`` benchmark scenario).

Every request it received is kept in ``reviews`` (``requests`` counts them). ``register``
installs it as a ``ValidatingWebhookConfiguration`` for CREATE/UPDATE of v1 ConfigMaps in one
namespace only (optionally only objects with given labels), so other tests sharing the session's
API server never meet it; ``configuration`` also takes other ``rules`` and several namespaces.
``unregister`` removes it. The API server loads webhook configurations through an informer:
``register`` waits until a dry-run probe is seen here, so the webhook is really in force when it
returns.

    async with AdmissionWebhook() as hook:
        await hook.register(kube, namespace)
        hook.mode = "error"
        ...
        # unregistered and stopped on exit
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import ipaddress
import ssl
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.kube import KubeClient, KubeError, NotFound

Mode = Literal["allow", "error", "deny"]
LOOPBACK = "127.0.0.1"
PATH = "/validate"
PROBE_PREFIX = "webhook-probe-"
WEBHOOK_CONFIGS = "admissionregistration.k8s.io/v1"


@dataclasses.dataclass(frozen=True)
class TLSMaterial:
    """PEM bytes: the CA the API server trusts (``caBundle``) and the serving pair."""

    ca_cert: bytes
    cert: bytes
    key: bytes


def mint_tls(ip: str = LOOPBACK, *, days: int = 1) -> TLSMaterial:
    """A fresh CA and a serving certificate for ``ip`` signed by it (Go's TLS client, which the
    API server uses, wants the address in the subjectAltName: the CN is not looked at)."""
    now = dt.datetime.now(dt.UTC)
    not_before, not_after = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "driftbus-test-webhook-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return TLSMaterial(
        ca_cert=ca.public_bytes(serialization.Encoding.PEM),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _server_context(tls: TLSMaterial) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # load_cert_chain reads files only; they are needed for that call alone
    with tempfile.TemporaryDirectory(prefix="driftbus-webhook-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(tls.cert + tls.ca_cert)
        key.write_bytes(tls.key)
        key.chmod(0o600)
        ctx.load_cert_chain(cert, key)
    return ctx


@dataclasses.dataclass(frozen=True)
class Review:
    """One AdmissionReview request the webhook received, and what it answered."""

    uid: str
    operation: str
    kind: str
    namespace: str
    name: str
    dry_run: bool
    answered: Mode
    at: float  # time.monotonic()


class AdmissionWebhook:
    """See the module documentation."""

    def __init__(
        self,
        *,
        mode: Mode = "allow",
        deny_message: str = "denied by the test webhook",
        delay: float = 0.0,
    ):
        self.mode: Mode = mode
        self.delay = delay
        self.deny_message = deny_message
        self.reviews: list[Review] = []
        self.tls = mint_tls()
        self.port = 0
        self.config_name = ""
        self._kube: KubeClient | None = None
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()

    # --- serving --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}{PATH}"

    @property
    def ca_bundle(self) -> str:
        """``caBundle`` of the webhook configuration: the CA's PEM, base64."""
        return base64.b64encode(self.tls.ca_cert).decode()

    @property
    def requests(self) -> int:
        return len(self.reviews)

    def calls(self, name: str | None = None, *, dry_run: bool | None = False) -> list[Review]:
        """Reviews for object ``name`` (any when None); only real writes unless ``dry_run``
        is None (all) or True (the probes and other dry runs)."""
        return [
            r
            for r in self.reviews
            if (name is None or r.name == name) and (dry_run is None or r.dry_run == dry_run)
        ]

    async def until_called(
        self, name: str | None = None, *, count: int = 1, within: float = 30.0
    ) -> list[Review]:
        """Until at least ``count`` real (not dry-run) reviews of ``name`` arrived."""
        deadline = time.monotonic() + within
        while len(seen := self.calls(name)) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"webhook saw {len(seen)} of {count} expected requests for "
                    f"{name or 'any object'} within {within}s ({self.requests} in all)"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
        return seen

    async def _review(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        req: dict[str, Any] = body.get("request") or {}
        mode = self.mode  # one answer per request even if a test switches meanwhile
        self.reviews.append(
            Review(
                uid=str(req.get("uid", "")),
                operation=str(req.get("operation", "")),
                kind=str((req.get("kind") or {}).get("kind", "")),
                namespace=str(req.get("namespace", "")),
                name=str(req.get("name", "")),
                dry_run=bool(req.get("dryRun")),
                answered=mode,
                at=time.monotonic(),
            )
        )
        self._changed.set()
        if self.delay:
            await asyncio.sleep(self.delay)
        if mode == "error":
            return web.Response(status=500, text="test webhook is failing on purpose (mode=error)")
        response: dict[str, Any] = {"uid": req.get("uid", ""), "allowed": mode == "allow"}
        if mode == "deny":
            response["status"] = {"code": 403, "reason": "Forbidden", "message": self.deny_message}
        review = {
            "apiVersion": body.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": response,
        }
        return web.json_response(review)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(PATH, self._review)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, 0, ssl_context=_server_context(self.tls))
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        await self.unregister()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> AdmissionWebhook:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- registration with the API server ---------------------------------------------------

    def configuration(
        self,
        name: str,
        namespace: str | list[str],
        *,
        object_labels: dict[str, str] | None = None,
        timeout_seconds: int = 3,
        rules: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The ``ValidatingWebhookConfiguration``: CREATE/UPDATE of v1 ConfigMaps (or what
        ``rules`` name) in ``namespace`` only, or in each of a list (and, with
        ``object_labels``, only objects carrying them)."""
        names = [namespace] if isinstance(namespace, str) else list(namespace)
        webhook: dict[str, Any] = {
            "name": f"{name}.driftbus.test",
            "clientConfig": {"url": self.url, "caBundle": self.ca_bundle},
            "rules": rules
            or [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps"],
                    "scope": "Namespaced",
                }
            ],
            # the API server labels every namespace with its own name
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}
                ]
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",  # also lets dry-run requests (the probe) reach it
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
            "matchPolicy": "Equivalent",
        }
        if object_labels:
            webhook["objectSelector"] = {"matchLabels": dict(object_labels)}
        return {
            "apiVersion": WEBHOOK_CONFIGS,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [webhook],
        }

    async def register(
        self,
        kube: KubeClient,
        namespace: str | list[str],
        *,
        object_labels: dict[str, str] | None = None,
        timeout_seconds: int = 3,
        rules: list[dict[str, Any]] | None = None,
        within: float = 30.0,
    ) -> str:
        """Install the webhook for ConfigMaps (or what ``rules`` name, ConfigMaps among them)
        in ``namespace`` (or each of a list) and wait until the API server calls it (a dry-run
        ConfigMap probe in the first namespace reaches it, whatever the mode); returns the
        configuration's name. Must be started first."""
        if not self.port:
            raise RuntimeError("start the webhook before registering it")
        name = f"driftbus-test-{uuid.uuid4().hex[:8]}"
        await kube.apply(
            self.configuration(
                name,
                namespace,
                object_labels=object_labels,
                timeout_seconds=timeout_seconds,
                rules=rules,
            ),
            field_manager="driftbus-tests",
            force=True,
        )
        self.config_name, self._kube = name, kube
        first = namespace if isinstance(namespace, str) else namespace[0]
        await self._until_in_force(kube, first, object_labels or {}, within)
        return name

    async def _until_in_force(
        self, kube: KubeClient, namespace: str, labels: dict[str, str], within: float
    ) -> None:
        probe = PROBE_PREFIX + self.config_name
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": probe, "namespace": namespace, "labels": labels},
        }
        deadline = time.monotonic() + within
        while not self.calls(probe, dry_run=True):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the API server never called webhook {self.config_name} at {self.url} "
                    f"within {within}s"
                )
            # a dry run: nothing is stored, no watch event; "error" and "deny" refuse it, but
            # it reached us all the same
            with contextlib.suppress(KubeError):
                await kube.apply(obj, field_manager="driftbus-tests", dry_run=True)
            await asyncio.sleep(0.1)

    async def unregister(self, kube: KubeClient | None = None) -> None:
        """Remove the configuration (idempotent). The API server's informer drops it moments
        later: until then, writes in the namespace still call this webhook."""
        kube = kube or self._kube
        if not self.config_name or kube is None:
            return
        res = await kube.discovery.resource(WEBHOOK_CONFIGS, "ValidatingWebhookConfiguration")
        with contextlib.suppress(NotFound):
            await kube.delete(res, self.config_name)
        self.config_name = ""


__all__ = ["AdmissionWebhook", "Mode", "Review", "TLSMaterial", "mint_tls"]
