"""OCI references, semver over tags, credentials, and the artifact tarball: what is read, what is
refused (services/inputs/oci/reference.py, oci_artifact.py)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from services.inputs.limits import InputLimits
from services.inputs.oci.artifact import pack, unpack
from services.inputs.oci.auth import parse_challenge
from services.inputs.oci.reference import (
    Credentials,
    OciAccess,
    OciAuthError,
    OciError,
    Reference,
    loopback,
    newest_matching,
    parse_reference,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("url", "ref"),
    [
        ("oci://ghcr.io/org/app:1.0.0", Reference("ghcr.io", "org/app", "1.0.0")),
        ("oci://127.0.0.1:5000/charts/web:v2", Reference("127.0.0.1:5000", "charts/web", "v2")),
        (f"oci://r.io/a/b/c@{DIGEST}", Reference("r.io", "a/b/c", "", DIGEST)),
        (f"oci://r.io/app:1.2@{DIGEST}", Reference("r.io", "app", "1.2", DIGEST)),
        (
            "oci://localhost:5000/x__y-z.w/app:latest",
            Reference("localhost:5000", "x__y-z.w/app", "latest"),
        ),
    ],
    ids=["host-tag", "port-tag", "digest", "tag-and-digest", "separators"],
)  # fmt: skip
def test_a_reference_is_parsed_and_spelled_back(url: str, ref: Reference) -> None:
    assert parse_reference(url) == ref
    assert str(ref) == url


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("https://ghcr.io/app:1", "starts with oci://"),
        ("oci://user:secret@ghcr.io/app:1", "credentials do not go in the URL"),
        ("oci://ghcr.io/App:1", "not a repository name"),
        ("oci://ghcr.io/app:-x", "not a tag"),
        ("oci://ghcr.io/app@sha256:abc", "not a sha256:<64 hex> digest"),
        ("oci://ghcr.io/app@sha512:" + "a" * 128, "not a sha256"),
        ("oci://ghcr.io/app", "give a tag"),
        ("oci://ghcr.io", "expected oci://REGISTRY/REPOSITORY"),
        ("oci://ghcr.io/a/../b:1", "not a repository name"),
    ],
)
def test_a_bad_reference_is_refused_naming_why(url: str, error: str) -> None:
    with pytest.raises(OciError, match=error) as caught:
        parse_reference(url)
    assert "secret" not in str(caught.value)


def test_a_bare_reference_is_for_a_semver_range_and_a_push_needs_a_tag() -> None:
    assert parse_reference("oci://r.io/app", bare=True) == Reference("r.io", "app")
    with pytest.raises(OciError, match="give a tag to write"):
        parse_reference(f"oci://r.io/app@{DIGEST}", need_tag=True)


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("127.0.0.1:5000", True),
        ("localhost", True),
        ("[::1]:5000", True),
        ("ghcr.io", False),
        ("10.0.0.1:5000", False),
        ("127.0.0.1.example.com", False),
    ],
)
def test_only_a_loopback_registry_is_loopback(registry: str, expected: bool) -> None:
    assert loopback(registry) is expected


@pytest.mark.parametrize(
    ("tags", "semver", "newest"),
    [
        (["1.0.0", "1.4.0", "2.0.0", "1.3.0"], ">=1.0.0 <2.0.0", "1.4.0"),
        (["v1.0.0", "1.0.0"], "^1", "1.0.0"),
        (["latest", "main", "v1.2.0"], "^1", "v1.2.0"),
        (["1.0.0", "1.1.0-rc.1"], "^1", "1.0.0"),
        (["1.0.0", "1.1.0-rc.1"], ">=1.1.0-rc.0", "1.1.0-rc.1"),
        (["1.0.0_build.5", "1.0.1"], "~1.0", "1.0.1"),
        (["0.9.0"], "^1", None),
    ],
    ids=["range", "prefix-loses", "non-versions", "no-prerelease", "named-prerelease",
         "helm-build", "none"],
)  # fmt: skip
def test_the_newest_tag_in_a_range_is_followed(
    tags: list[str], semver: str, newest: str | None
) -> None:
    assert newest_matching(tags, semver) == newest


def test_a_helm_build_tag_reads_as_a_version() -> None:
    # helm push writes 1.0.0+build.5 as the tag 1.0.0_build.5 (a tag cannot hold +)
    assert newest_matching(["1.0.0_build.5"], ">=1.0.0") == "1.0.0_build.5"


# --- credentials ----------------------------------------------------------------------------


def test_credentials_come_from_the_flags_or_the_docker_config(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    assert OciAccess(username="u", password_file=str(password)).credentials("r.io") == (
        Credentials("u", "s3cret")
    )
    config = tmp_path / "config.json"
    auth = base64.b64encode(b"robot:tok:en").decode()
    config.write_text(
        json.dumps(
            {
                "auths": {
                    "https://ghcr.io": {"auth": auth},
                    "127.0.0.1:5000": {"username": "a", "password": "b"},
                },
                "credsStore": "desktop",
            }
        )
    )
    access = OciAccess(docker_config=str(config))
    assert access.credentials("ghcr.io") == Credentials("robot", "tok:en")
    assert access.credentials("127.0.0.1:5000") == Credentials("a", "b")
    assert access.credentials("quay.io") is None
    assert "tok:en" not in repr(access.credentials("ghcr.io"))


def test_unusable_credentials_are_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(OciAuthError, match="together"):
        OciAccess(username="u").credentials("r.io")
    with pytest.raises(OciAuthError, match="cannot read the registry password"):
        OciAccess(username="u", password_file=str(tmp_path / "nope")).credentials("r.io")
    config = tmp_path / "config.json"
    config.write_text('{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}')  # "nocolon"
    with pytest.raises(OciAuthError, match="not base64 of user:password"):
        OciAccess(docker_config=str(config)).credentials("r.io")
    config.write_text("{")
    with pytest.raises(OciAuthError, match="cannot read a docker config"):
        OciAccess(docker_config=str(config)).credentials("r.io")


def test_no_docker_config_means_anonymous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    assert OciAccess().credentials("r.io") is None


@pytest.mark.parametrize(
    ("header", "scheme", "params"),
    [
        ('Basic realm="registry"', "basic", {"realm": "registry"}),
        (
            'Bearer realm="https://auth.io/token",service="registry.io",'
            'scope="repository:a/b:pull"',
            "bearer",
            {"realm": "https://auth.io/token", "service": "registry.io",
             "scope": "repository:a/b:pull"},
        ),
    ],
)  # fmt: skip
def test_a_challenge_is_parsed(header: str, scheme: str, params: dict[str, str]) -> None:
    assert parse_challenge(header) == (scheme, params)


# --- the tarball ----------------------------------------------------------------------------


def tarball(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return gzip.compress(raw.getvalue())


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


LIMITS = InputLimits()


def test_a_packed_directory_unpacks_to_the_same_files_and_packs_reproducibly(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    (src / "deploy" / ".hidden").mkdir(parents=True)
    (src / "deploy" / "a.yaml").write_text("a: 1\n")
    (src / "deploy" / ".hidden" / "b.yaml").write_text("b: 2\n")
    (src / "link.yaml").symlink_to(src / "deploy" / "a.yaml")
    data = pack(src)
    assert data == pack(src), "the same directory packs to the same bytes"
    out = tmp_path / "out"
    out.mkdir()
    unpack(data, out, LIMITS, "artifact")
    assert (out / "deploy" / "a.yaml").read_text() == "a: 1\n"
    assert (out / "deploy" / ".hidden" / "b.yaml").read_text() == "b: 2\n"
    assert (out / "link.yaml").read_text() == "a: 1\n"  # the file a link inside names


def test_a_directory_with_a_link_out_of_it_is_not_packed(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.yaml").symlink_to(tmp_path / "secret")
    with pytest.raises(ValueError, match="a symbolic link out of"):
        pack(src)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ((member("/etc/cron.d/x"), b"x"), "'/etc/cron.d/x': an absolute path: refused"),
        ((member("../x.yaml"), b"x"), r"'\.\./x.yaml': a path with '\.\.': refused"),
        ((member("a/../../x.yaml"), b"x"), r"a path with '\.\.': refused"),
        ((member("l", tarfile.SYMTYPE, "/etc/passwd"), b""),
         r"'l': a symbolic link \(to '/etc/passwd'\): refused"),
        ((member("d/l", tarfile.SYMTYPE, "../../x"), b""), "'d/l': a symbolic link"),
        ((member("h", tarfile.LNKTYPE, "../x"), b""), "'h': a hard link"),
        ((member("dev", tarfile.CHRTYPE), b""), "'dev': a character device: refused"),
        ((member("fifo", tarfile.FIFOTYPE), b""), "'fifo': a FIFO: refused"),
    ],
    ids=["absolute", "dotdot", "nested-dotdot", "symlink-absolute", "symlink-up",
         "hardlink-up", "device", "fifo"],
)  # fmt: skip
def test_an_unsafe_member_is_refused_and_nothing_is_extracted(
    tmp_path: Path, entry: tuple[tarfile.TarInfo, bytes], error: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    data = tarball((member("ok.yaml"), b"a: 1\n"), entry)
    with pytest.raises(OciError, match=error):
        unpack(data, out, LIMITS, "artifact")
    assert list(out.iterdir()) == []
    assert not (tmp_path / "x.yaml").exists()


def test_a_link_inside_the_artifact_is_refused_too(tmp_path: Path) -> None:
    # issue 41: links are never written (driftbus, Flux and Helm push none); one inside today
    # is the first link of a chain that leads out tomorrow
    data = tarball(
        (member("d", tarfile.DIRTYPE), b""),
        (member("d/a.yaml"), b"a: 1\n"),
        (member("d/l.yaml", tarfile.SYMTYPE, "a.yaml"), b""),
    )
    with pytest.raises(OciError, match=r"'d/l.yaml': a symbolic link \(to 'a.yaml'\): refused"):
        unpack(data, tmp_path, LIMITS, "artifact")
    assert list(tmp_path.iterdir()) == []


def test_an_artifact_over_the_limits_is_refused(tmp_path: Path) -> None:
    small = InputLimits(max_file_bytes=10, max_files=1, bundle_max_bytes=15)
    with pytest.raises(OciError, match="over the 10-byte limit"):
        unpack(tarball((member("a.yaml"), b"x" * 11)), tmp_path, small, "artifact")
    with pytest.raises(OciError, match="unpacks to over 15 bytes"):
        unpack(
            tarball((member("a"), b"x" * 8), (member("b"), b"x" * 8)), tmp_path, small, "artifact"
        )
    many = tarball(*((member(f"f{i}"), b"") for i in range(5)))
    with pytest.raises(OciError, match="over 4 members"):
        unpack(many, tmp_path, small, "artifact")
    with pytest.raises(OciError, match=r"not a readable \.tar\.gz"):
        unpack(b"not gzip", tmp_path, LIMITS, "artifact")
