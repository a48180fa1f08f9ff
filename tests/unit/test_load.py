"""Reading manifests for publish: every bad input names where and why."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from services.cli.load import InputError, load_git, load_paths
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
        for name in ("x", "y"):
            data = CM.format(name=name).encode()
            info = tarfile.TarInfo(f"manifests/{name}.yaml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names = [m.obj["metadata"]["name"] for m in load_paths([str(tgz)]).manifests]
    assert names == ["x", "y"]
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
