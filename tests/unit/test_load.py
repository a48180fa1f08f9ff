"""Reading manifests for publish: every bad input names where and why."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from schemas.messages import BundleOptions
from services.cli import main as cli
from services.cli import publish
from services.inputs import load
from services.inputs.git import load_git
from services.inputs.load import InputError, load_paths
from tests.gitrepo import git

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: ns\n"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_directories_are_read_recursively_with_multi_document_yaml_and_json(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", CM.format(name="a") + "---\n" + CM.format(name="b"))
    write(tmp_path, "sub/deeper/c.yml", CM.format(name="c"))
    write(
        tmp_path, "d.json", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}}'
    )
    write(
        tmp_path,
        "list.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- "
        + CM.format(name="e").replace("\n", "\n  ").rstrip()
        + "\n",
    )
    write(tmp_path, "README.md", "not a manifest")
    write(tmp_path, ".hidden/x.yaml", "broken: [")
    names = sorted(m.obj["metadata"]["name"] for m in load_paths([str(tmp_path)]).manifests)
    assert names == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [oops\n",
            r"bad\.yaml:\d+: invalid YAML",
        ),
        (
            "kind: ConfigMap\nmetadata:\n  name: a\n",
            r"bad\.yaml#0: ConfigMap/a: apiVersion is missing",
        ),
        (
            CM.format(name="ok") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
            r"bad\.yaml#1: ConfigMap/\?: metadata.name is missing",
        ),
        ("- just\n- a list\n", r"bad\.yaml#0: a manifest must be an object, not list"),
        ("apiVersion: v1\nmetadata:\n  name: a\n", r"bad\.yaml#0: \?/a: kind is missing"),
    ],
    ids=[
        "yaml-syntax-names-line",
        "no-apiVersion",
        "no-name-names-document-index",
        "not-an-object",
        "no-kind",
    ],
)
def test_bad_documents_name_the_file_and_position(
    tmp_path: Path, content: str, message: str
) -> None:
    write(tmp_path, "bad.yaml", content)
    with pytest.raises(InputError, match=message):
        load_paths([str(tmp_path)])


def test_yaml_syntax_error_reports_the_right_line(tmp_path: Path) -> None:
    write(tmp_path, "bad.yaml", CM.format(name="a") + "data:\n  k: v\n  broken: [\n")
    with pytest.raises(InputError, match=r"bad\.yaml:9:"):
        load_paths([str(tmp_path / "bad.yaml")])


def test_duplicates_name_both_places(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", CM.format(name="same"))
    write(tmp_path, "two/two.yaml", CM.format(name="x") + "---\n" + CM.format(name="same"))
    with pytest.raises(
        InputError,
        match=r"ConfigMap/ns/same is defined twice: .*one\.yaml#0 "
        r"and .*two\.yaml#1",
    ):
        load_paths([str(tmp_path)])


def test_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope: no such file or directory"):
        load_paths([str(tmp_path / "nope")])


def test_tarballs(tmp_path: Path) -> None:
    tgz = tmp_path / "bundle.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name in ("x", "z"):
            data = CM.format(name=name).encode()
            info = tarfile.TarInfo(f"manifests/{name}.yaml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names = [m.obj["metadata"]["name"] for m in load_paths([str(tgz)]).manifests]
    assert names == ["x", "z"]
    (tmp_path / "broken.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match=r"broken\.tar\.gz: not a readable \.tar\.gz"):
        load_paths([str(tmp_path / "broken.tar.gz")])


def test_git_reads_the_tree_at_the_ref_and_records_the_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    git(repo, "init", "-q")
    write(repo, "deploy/a.yaml", CM.format(name="first"))
    write(repo, "other/ignored.yaml", CM.format(name="elsewhere"))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    write(repo, "deploy/a.yaml", CM.format(name="second"))
    git(repo, "commit", "-qam", "two")
    loaded = load_git(str(repo), first, "deploy")
    assert loaded.revision == first
    assert [m.obj["metadata"]["name"] for m in loaded.manifests] == ["first"]
    with pytest.raises(InputError, match="git rev-parse"):
        load_git(str(repo), "no-such-ref")


def test_git_clones_a_url_and_names_files_as_in_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, "deploy/a.yaml", CM.format(name="cloned"))
    write(repo, "deploy/.ci/skip.yaml", CM.format(name="hidden"))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD")
    loaded = load_git(f"file://{repo}", "HEAD", "deploy")
    assert loaded.revision == head
    assert [m.obj["metadata"]["name"] for m in loaded.manifests] == ["cloned"]
    assert loaded.manifests[0].where == f"file://{repo}@{head[:12]}:deploy/a.yaml#0"
    assert loaded.source == f"file://{repo}@{head}"
    with pytest.raises(InputError, match=r"git clone file:///no/such/repo: "):
        load_git("file:///no/such/repo", "HEAD")


def test_a_symlink_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text(CM.format(name="outside"))
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "link.yaml").symlink_to(secret)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    with pytest.raises(InputError, match=r"link\.yaml: a symbolic link out of the repository"):
        load_git(f"file://{repo}", "HEAD")


def test_a_symlink_loop_in_the_repository_is_an_input_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.yaml").symlink_to("a.yaml")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "loop")
    with pytest.raises(InputError, match=r"a\.yaml: an unreadable symbolic link"):
        load_git(f"file://{repo}", "HEAD")


BILLION_LAUGHS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: lol}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_yaml_alias_bombs_are_refused_before_anything_expands(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(BILLION_LAUGHS)  # ~10^9 values once expanded
    with pytest.raises(InputError, match=r"bomb.yaml#0: ConfigMap/lol expands to over 1,000,000"):
        load_paths([str(tmp_path / "bomb.yaml")])


def test_harmless_aliases_are_fine(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, labels: &l {app: x}}\n"
        "data: {a: '1'}\nextra: *l\n"
    )
    (m,) = load_paths([str(tmp_path / "ok.yaml")]).manifests
    assert m.obj["extra"] == {"app": "x"}


def test_an_object_too_big_for_one_message_is_refused(tmp_path: Path) -> None:
    big = "x" * 1_100_000
    (tmp_path / "big.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big}}\ndata: {{blob: {big}}}\n"
    )
    with pytest.raises(InputError, match=r"big.yaml#0: ConfigMap/big: 1,100,0\d\d bytes as JSON"):
        load_paths([str(tmp_path / "big.yaml")])


# --- which files a path loads (kubectl -f semantics; hidden judged below the root only) -------


def names(loaded: object) -> list[str]:
    return sorted(m.obj["metadata"]["name"] for m in loaded.manifests)  # type: ignore[attr-defined]


def test_a_parent_relative_directory_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "mydir/a.yaml", CM.format(name="a"))
    write(tmp_path, "mydir/sub/b.yaml", CM.format(name="b"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert names(load_paths(["../mydir"])) == ["a", "b"]
    assert names(load_paths(["../mydir/sub/../a.yaml"])) == ["a"]
    monkeypatch.chdir(tmp_path / "mydir" / "sub")
    assert names(load_paths([".."])) == ["a", "b"]
    assert names(load_paths(["."])) == ["b"]


def test_an_absolute_path_below_a_hidden_directory_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / ".config" / "team" / "deploy"
    write(root, "a.yaml", CM.format(name="a"))
    write(root, "nested/b.yml", CM.format(name="b"))
    assert names(load_paths([str(root)])) == ["a", "b"]
    assert names(load_paths([str(root.resolve())])) == ["a", "b"]
    monkeypatch.chdir(tmp_path)
    assert names(load_paths([".config/team/deploy"])) == ["a", "b"]
    assert names(load_paths(["./.config/team/deploy/"])) == ["a", "b"]


def test_hidden_files_and_directories_below_the_root_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", CM.format(name="a"))
    write(tmp_path, ".hidden.yaml", CM.format(name="hidden-file"))
    write(tmp_path, "sub/.also-hidden.yaml", CM.format(name="hidden-nested-file"))
    write(tmp_path, ".github/workflows/ci.yml", "on: push\njobs: {}\n")
    write(tmp_path, "sub/.git/config.json", "not json at all")
    write(tmp_path, "sub/c.yaml", CM.format(name="c"))
    assert names(load_paths([str(tmp_path)])) == ["a", "c"]
    # a hidden file or directory named on the command line is read, like any named path
    assert names(load_paths([str(tmp_path / ".hidden.yaml")])) == ["hidden-file"]
    assert names(load_paths([str(tmp_path / "sub" / ".also-hidden.yaml")])) == [
        "hidden-nested-file"
    ]


def test_a_tarball_skips_hidden_members_like_a_directory(tmp_path: Path) -> None:
    tgz = tmp_path / "bundle.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, text in (
            ("./deploy/a.yaml", CM.format(name="a")),
            ("./deploy/._a.yaml", "\x00\x05\x16\x07 AppleDouble"),
            ("./.github/ci.yaml", "on: push\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert names(load_paths([str(tgz)])) == ["a"]


def test_git_skips_hidden_paths_below_the_directory_like_a_checkout(tmp_path: Path) -> None:
    repo = tmp_path / ".repos" / "repo"  # hidden above the root: fine
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    write(repo, "deploy/a.yaml", CM.format(name="a"))
    write(repo, "deploy/.hidden.yaml", CM.format(name="hidden"))
    write(repo, ".github/workflows/ci.yaml", "on: push\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    assert names(load_git(str(repo), "HEAD", "deploy")) == ["a"]
    assert names(load_git(str(repo), "HEAD", "")) == ["a"]


def test_an_empty_directory_loads_nothing_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write(tmp_path, "docs-only/README.md", "nothing here")
    write(tmp_path, "hidden-only/.x.yaml", CM.format(name="x"))
    for d in ("empty", "docs-only", "hidden-only"):
        loaded = load_paths([str(tmp_path / d)])
        assert loaded.manifests == []
        with pytest.raises(InputError) as err:
            load.require_objects(loaded, "b", "publish")
        assert str(tmp_path / d) in str(err.value)
        assert "prune" in str(err.value)
        assert "--allow-empty" in str(err.value)


def test_a_mistyped_git_path_is_named(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, "deploy/a.yaml", CM.format(name="a"))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    with pytest.raises(InputError, match=r"deploi: no such directory .*repo@[0-9a-f]{12}"):
        load_git(str(repo), "HEAD", "deploi")


# --- the CLI refuses to publish (or plan) nothing unless told; black box, no servers ---------


@pytest.fixture
def no_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NATS URL nothing listens on: a command that got as far as connecting fails loudly."""
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:9")


@pytest.mark.parametrize("command", ["publish", "plan"])
def test_the_cli_refuses_an_empty_revision_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_nats: None, command: str
) -> None:
    (tmp_path / "empty").mkdir()
    code = cli.main([command, str(tmp_path / "empty"), "--cluster", "c", "--bundle", "b"])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1, err
    assert str(tmp_path / "empty") in err
    assert "prune" in err
    assert "--allow-empty" in err


def test_the_cli_refuses_a_mistyped_git_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_nats: None
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, "deploy/a.yaml", CM.format(name="a"))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    argv = ["publish", "--git", str(repo), "--path", "deploi", "--cluster", "c", "--bundle", "b"]
    for extra in ([], ["--allow-empty"]):  # a path that is not there is never "empty"
        assert cli.main([*argv, *extra]) != 0
        err = capsys.readouterr().err
        assert "deploi" in err, err
        assert "Traceback" not in err


def test_publish_flags_reach_the_bundle_options() -> None:
    flags = ["--allow-empty", "--take-over", "--prune-propagation", "Foreground"]
    flags += ["--no-prune", "--force", "--allow-replace"]
    args = cli.build_parser().parse_args(
        ["publish", "d", "--cluster", "c", "--bundle", "b", *flags]
    )
    assert publish.bundle_options(args) == BundleOptions(
        prune=False,
        force=True,
        allow_replace=True,
        allow_empty=True,
        take_over=True,
        propagation="Foreground",
    )
    plain = cli.build_parser().parse_args(["publish", "d", "--cluster", "c", "--bundle", "b"])
    assert publish.bundle_options(plain) == BundleOptions()
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(
            ["publish", "d", "--cluster", "c", "--bundle", "b", "--prune-propagation", "Later"]
        )


@pytest.mark.parametrize(
    ("bundle", "release"),
    [("web", "web"), ("team-a/web", "web"), ("team-a/my-app", "my-app")],
)
def test_a_helm_release_is_named_after_the_bundle_without_its_tenant(
    bundle: str, release: str
) -> None:
    """helm refuses `team-a/web` as a release name (it is not a DNS label)."""
    assert load.release_name(bundle) == release
