"""OCI sources: what an ``oci://`` reference names, the media types driftbus reads and writes,
and the credentials a registry is asked with (pure but for reading a credentials file).

``oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`` names a manifest in a registry speaking the
OCI distribution API: an artifact in Flux's format (``flux push artifact``, ``driftbus push``:
one ``application/vnd.cncf.flux.content.v1.tar+gzip`` layer, a tarball of manifest files) or a
Helm chart (``helm push``: one ``application/vnd.cncf.helm.chart.content.v1.tar+gzip`` layer),
or a generic artifact whose one layer is a tar+gzip of manifests (``oras push``; what Argo CD's
``oci://`` source reads: ``application/vnd.oci.image.layer.v1.tar+gzip`` or Argo CD's
``application/vnd.cncf.argoproj.argocd.content.v1.tar+gzip``), whatever its config.
A digest, when given, is what is read (the tag then only documents it); without one the tag is
resolved to a digest once, and everything after is read by that digest. The digest becomes the
bundle's revision.

The registry client is ``oci_client`` (the distribution API over aiohttp), reading and writing
artifacts ``oci_artifact``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import semantic_version

from services.inputs.documents import InputError

SCHEME = "oci://"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_CONTENT = "application/vnd.cncf.flux.content.v1.tar+gzip"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CONTENT = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ARGOCD_CONTENT = "application/vnd.cncf.argoproj.argocd.content.v1.tar+gzip"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_CREATED = "org.opencontainers.image.created"


class OciError(InputError):
    """An OCI reference, registry answer or artifact driftbus refuses; one line naming it."""


class OciAuthError(OciError):
    """The registry wants credentials driftbus does not have, or refused the ones it sent."""


# the distribution spec's grammar (github.com/distribution/reference)
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_REGISTRY = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?")


def check_digest(digest: str, what: str = "digest") -> str:
    """``digest`` if it is a sha256 digest (the only algorithm read or written here)."""
    if not _DIGEST.fullmatch(digest):
        raise OciError(f"{what} {digest[:80]!r}: not a sha256:<64 hex> digest")
    return digest


@dataclasses.dataclass(frozen=True)
class Reference:
    """A manifest in a registry: ``oci://registry/repository[:tag][@digest]``."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        at = f"@{self.digest}" if self.digest else ""
        return f"{SCHEME}{self.registry}/{self.repository}{tag}{at}"

    @property
    def base(self) -> str:
        """The repository, without a tag or digest (``oci://host/repo``)."""
        return f"{SCHEME}{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What the manifest is asked by: the digest if known, else the tag."""
        return self.digest or self.tag

    def at(self, *, tag: str | None = None, digest: str | None = None) -> Reference:
        return dataclasses.replace(
            self,
            tag=self.tag if tag is None else tag,
            digest=self.digest if digest is None else digest,
        )


def parse_reference(url: str, *, need_tag: bool = False, bare: bool = False) -> Reference:
    """The reference ``url`` spells. ``need_tag``: a tag is required (``push``); ``bare``: the
    tag or digest may be missing (a semver range picks the tag)."""
    if not url.startswith(SCHEME):
        raise OciError(f"{url[:120]!r}: an OCI reference starts with {SCHEME}")
    rest = url.removeprefix(SCHEME)
    host, slash, path = rest.partition("/")
    if "@" in host:
        raise OciError(
            f"{SCHEME}…@{host.rpartition('@')[2]}: credentials do not go in the URL; use "
            "--oci-username and --oci-password-file, or a docker config.json"
        )
    if not slash or not _REGISTRY.fullmatch(host):
        raise OciError(f"{url[:120]!r}: expected {SCHEME}REGISTRY/REPOSITORY[:TAG][@DIGEST]")
    path, _, digest = path.partition("@")
    name, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    if "/" in tag:  # a colon inside the path, not a tag
        name, colon, tag = path, "", ""
    where = f"{SCHEME}{host}/{path}"
    if not _REPOSITORY.fullmatch(name) or len(name) > 255:
        raise OciError(
            f"{where}: {name!r} is not a repository name (lowercase letters, digits, "
            "separators . _ __ -, components joined by /)"
        )
    if colon and not _TAG.fullmatch(tag):
        raise OciError(f"{where}: {tag!r} is not a tag (letters, digits, _ . -; at most 128)")
    if digest:
        check_digest(digest, f"{where}: digest")
    if need_tag and not tag:
        raise OciError(f"{where}: give a tag to write (…/{name}:TAG)")
    if not bare and not need_tag and not (tag or digest):
        raise OciError(f"{where}: give a tag (:TAG), a digest (@sha256:…) or --semver")
    return Reference(host, name, tag, digest)


def loopback(registry: str) -> bool:
    """Whether the registry's host is this machine (plain HTTP may be used without asking)."""
    if registry.startswith("["):
        host = registry[1:].partition("]")[0]
    else:
        host = registry.partition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- semver over tags -----------------------------------------------------------------------


def newest_matching(names: Iterable[str], semver: str) -> str | None:
    """The name whose version is the highest in the npm-style range ``semver`` (``^1.2``,
    ``>=1.0.0 <2.0.0``), or None. Names may carry a leading ``v``; Helm's ``_`` for ``+`` (a
    tag cannot hold ``+``) is read as ``+``; names that are no version are skipped; of ``v1.2.0``
    and ``1.2.0`` the one without the prefix wins. Pre-releases match only a range naming one.
    A range that does not parse is a ``ValueError``."""
    spec = semantic_version.NpmSpec(semver)
    best: dict[semantic_version.Version, str] = {}
    for name in names:
        try:
            version = semantic_version.Version(name.removeprefix("v").replace("_", "+"))
        except ValueError:
            continue
        if version in spec and (version not in best or not name.startswith("v")):
            best[version] = name
    return best[max(best)] if best else None


# --- credentials ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Credentials:
    username: str
    password: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class OciAccess:
    """How a registry is reached: credentials (a user and a password file, else the registry's
    entry in a docker ``config.json``) and whether plain HTTP is allowed beyond loopback."""

    username: str = ""
    password_file: str = ""
    docker_config: str = ""
    """A docker ``config.json`` (default ``$DOCKER_CONFIG/config.json``, else
    ``~/.docker/config.json``, read when it exists)."""
    insecure: bool = False

    def credentials(self, registry: str) -> Credentials | None:
        """The credentials for ``registry``, or None (anonymous)."""
        if self.username or self.password_file:
            if not (self.username and self.password_file):
                raise OciAuthError("give --oci-username and --oci-password-file together")
            try:
                password = Path(self.password_file).read_text().rstrip("\r\n")
            except OSError as exc:
                raise OciAuthError(
                    f"{self.password_file}: cannot read the registry password: {exc.strerror}"
                ) from None
            return Credentials(self.username, password)
        path = Path(self.docker_config) if self.docker_config else default_docker_config()
        if not self.docker_config and not path.is_file():
            return None
        return from_docker_config(path, registry)


def default_docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base, "config.json") if base else Path.home() / ".docker" / "config.json"


def from_docker_config(path: Path, registry: str) -> Credentials | None:
    """The ``auths`` entry of ``registry`` in a docker ``config.json`` (keys as ``docker
    login`` writes them: ``host:port`` or ``https://host:port/…``), or None. Credential
    helpers (``credsStore``, ``credHelpers``) are not run."""
    try:
        doc: Any = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OciAuthError(f"{path}: cannot read a docker config: {exc}") from None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        host = str(key).removeprefix("https://").removeprefix("http://").partition("/")[0]
        if host != registry or not isinstance(entry, dict):
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise OciAuthError(f"{path}: auths.{key}.auth is not base64 of user:password")
            return Credentials(user, password)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Credentials(entry["username"], entry["password"])
    return None
