"""``--oci`` on the command line and in ``driftbus source``'s settings: what is refused before any
registry is asked (services/cli/inputs.py, services/cli/push.py, services/source/specs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli import push
from services.cli.inputs import load_manifests
from services.cli.main import build_parser
from services.inputs.documents import InputError
from services.inputs.oci.reference import OciAccess, OciError
from services.source.origins import OciOrigin, short
from services.source.settings import SourceSettings
from services.source.specs import SpecError, specs

URL = "oci://127.0.0.1:1/apps/shop"


def publish_args(*argv: str) -> object:
    return build_parser().parse_args(["publish", "--cluster", "c", "--bundle", "b", *argv])


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (("--oci", f"{URL}:1.0.0", "--git", "/repo"), "give one source"),
        (("--oci", f"{URL}:1.0.0", "dir/"), "give one source"),
        (("--semver", "^1", "dir/"), "--semver picks an OCI tag: give --oci too"),
        (("--oci", f"{URL}:1.0.0", "--semver", "^1"), "give a tag, a digest or --semver"),
        (("--oci", URL), "give a tag"),
        (("--oci", "oci://u:p@127.0.0.1:1/apps/shop:1"), "credentials do not go in the URL"),
        (("--oci", f"{URL}:1", "--oci-username", "u"), "together"),
    ],
    ids=["oci-and-git", "oci-and-path", "semver-alone", "tag-and-semver", "bare", "userinfo",
         "user-without-password"],
)  # fmt: skip
def test_a_publish_that_cannot_be_right_is_refused_before_the_registry_is_asked(
    argv: tuple[str, ...], error: str
) -> None:
    # port 1 on loopback: nothing listens, so getting past the checks would fail differently
    with pytest.raises(InputError, match=error):
        load_manifests(publish_args(*argv))


def test_an_unreachable_registry_is_a_transient_error_naming_it() -> None:
    with pytest.raises(
        InputError, match=r"127\.0\.0\.1:1: GET /v2/apps/shop/manifests/1\.0\.0 failed"
    ):
        load_manifests(publish_args("--oci", f"{URL}:1.0.0"))


def test_push_needs_a_tag_and_no_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert push.main([str(tmp_path), URL]) == 1
    assert "give a tag to write" in capsys.readouterr().err
    assert push.main([str(tmp_path), f"{URL}:1@sha256:{'a' * 64}"]) == 1
    assert "a digest is what a push makes" in capsys.readouterr().err
    assert push.main([str(tmp_path / "missing"), f"{URL}:1"]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_an_oci_source_from_the_flags(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    (spec,) = specs(
        SourceSettings(
            cluster="c",
            bundle="b",
            oci=URL,
            semver="^1",
            oci_username="u",
            oci_password_file=str(password),
            insecure=True,
        )
    )
    assert (spec.oci, spec.git, spec.rule.semver) == (URL, "", "^1")
    assert spec.access == OciAccess(username="u", password_file=str(password), insecure=True)
    origin = OciOrigin(spec, None)
    assert (origin.url, origin.following, origin.noun) == (URL, "semver ^1", "artifact")


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{cluster: c, bundle: b}", r"git is required \(or oci"),
        ("{cluster: c, bundle: b, git: /r, oci: 'oci://r.io/a:1'}", "not both"),
        ("{cluster: c, bundle: b, oci: 'oci://r.io/a', branch: main}", "tags, not branches"),
        ("{cluster: c, bundle: b, oci: 'oci://r.io/a:1', semver: '^1'}", "follow one of"),
        ("{cluster: c, bundle: b, oci: 'oci://r.io/a'}", "follow one of"),
        ("{cluster: c, bundle: b, oci: 'https://r.io/a'}", "starts with oci://"),
        ("{cluster: c, bundle: b, oci: 'oci://r.io/a:1', oci_token: x}", "unknown field"),
    ],
)
def test_an_oci_entry_of_a_sources_file_is_checked(tmp_path: Path, entry: str, error: str) -> None:
    f = tmp_path / "sources.yaml"
    f.write_text(f"- {entry}\n")
    with pytest.raises(SpecError, match=error):
        specs(SourceSettings(sources=str(f)))


def test_a_sources_file_lists_oci_and_git_sources_side_by_side(tmp_path: Path) -> None:
    f = tmp_path / "sources.yaml"
    f.write_text(
        "- {cluster: c, bundle: a, git: /repo}\n"
        "- {cluster: c, bundle: b, oci: 'oci://r.io/charts/web', tag: '1.2.0',"
        " oci_config: /etc/docker.json, release: web, values: [prod.yaml]}\n"
    )
    git, oci = specs(SourceSettings(sources=str(f)))
    assert git.git == "/repo"
    assert not git.oci
    assert (oci.oci, oci.rule.tag, oci.values) == ("oci://r.io/charts/web", "1.2.0", ("prod.yaml",))
    assert oci.access == OciAccess(docker_config="/etc/docker.json")
    origin = OciOrigin(oci, None)
    assert str(origin.ref) == "oci://r.io/charts/web:1.2.0"
    assert origin.following == "tag 1.2.0"


def test_a_revision_is_shown_short() -> None:
    assert short("sha256:" + "ab" * 32) == "sha256:abababababab"
    assert short("c" * 40) == "c" * 12


def test_an_oci_error_is_an_input_error() -> None:
    # publish, plan and source report InputErrors in one line; OCI refusals are among them
    assert issubclass(OciError, InputError)
