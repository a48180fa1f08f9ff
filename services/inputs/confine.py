"""Rendering confined to its input (issue 30, items 5 and 7): what a publish, plan or source
round reads is the directory, repository or chart it was given — no symbolic link out of it, no
kustomize remote base unless the caller allowed them, no option smuggled into git through a ref,
no cluster reachable from ``helm template`` — and credentials in URLs never reach a message.

* **Symbolic links** (to files or directories) that leave the published root are refused,
  naming the link; links inside it are fine. ``--git`` checks the checked-out tree the same way.
* **Remote bases**: kustomize fetches a ``resources``/``components``/… entry that is a URL
  (``https://…``, ``github.com/org/repo//dir?ref=v1``, ``git@host:…``) when it renders, from
  wherever the render runs and not pinned by the published commit. They are refused unless the
  caller allows them: ``publish``/``plan --allow-remote-bases``, or a source's
  ``allow_remote_bases`` in the operator's sources file — never anything in the repository, so a
  tenant whose repository ``driftbus source`` follows cannot turn them on.
* **Refs**: a ref that reaches git (ours, ``--ref``; kustomize's ``?ref=``/``?version=``) must
  look like a ref: no leading ``-`` (``--upload-pack=…`` is an option to ``git fetch``), no
  whitespace or control characters, no ``..``.
* **No cluster**: kubectl and helm run with an empty ``KUBECONFIG`` and none of Helm's
  ``HELM_KUBE*`` variables, so ``lookup`` in a chart answers nothing and no credential is read.
"""

from __future__ import annotations

import errno
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.core import kyaml


class ConfinementError(ValueError):
    """Input that reaches outside what was published; one line naming where and why."""


_REF = re.compile(r"[A-Za-z0-9._/@{}^~+-]{1,255}")


def check_ref(ref: str, what: str = "ref") -> str:
    """``ref`` if git can only read it as a ref (or commit), never as an option."""
    if not _REF.fullmatch(ref) or ref.startswith(("-", "/")) or ".." in ref:
        raise ConfinementError(
            f"{what} {ref!r}: not a valid Git ref (letters, digits and ._/@{{}}^~+-, not "
            "starting with - or /, no ..)"
        )
    return ref


def redacted(url: str) -> str:
    """``url`` as messages may show it: without the user and password of
    ``https://user:token@host/…`` (a token in a URL must not reach statuses, logs or bundles)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        # a path, or scp-like [user@]host:path: a user name is no secret, "user:pass@" is
        who, at, where = url.partition("@")
        return where if at and ":" in who and "/" not in who else url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]*@")


def redact_text(text: str, *urls: str) -> str:
    """``text`` (a tool's error output) with every ``scheme://user:pass@`` reduced to
    ``scheme://`` and each of ``urls`` shown redacted (git may quote them as given)."""
    for url in urls:
        if url and redacted(url) != url:
            text = text.replace(url, redacted(url))
    return _USERINFO.sub(r"\g<scheme>", text)


# --- symbolic links -----------------------------------------------------------------------------


def _loops(path: Path) -> bool:
    try:
        path.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def refuse_links_out(root: Path, shown: str = "", outside: str = "") -> None:
    """Refuse a symbolic link under ``root`` (to a file or a directory) whose target is not
    under ``root``, or that loops. Messages name the link as ``shown`` + its path below
    ``root`` (default: its real path) and the root as ``outside`` (default: ``root``)."""
    top = root.resolve()
    for path in _walk_links(root):
        rel = path.relative_to(root)
        where = f"{shown}{rel}" if shown else str(path)
        try:
            target = path.resolve(strict=False)  # 3.11, 3.12: RuntimeError on a loop
            if _loops(path):  # 3.13 resolves leniently: stat says ELOOP
                raise OSError(errno.ELOOP, "symbolic link loop")
        except (RuntimeError, OSError) as exc:
            raise ConfinementError(f"{where}: an unreadable symbolic link: {exc}") from None
        if not target.is_relative_to(top):
            raise ConfinementError(f"{where}: a symbolic link out of {outside or root}")


def _walk_links(root: Path) -> Iterator[Path]:
    """Every symbolic link under ``root``, not following linked directories."""
    for top, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(top, name)
            if path.is_symlink():
                yield path


# --- kustomize ----------------------------------------------------------------------------------

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_PATH_LISTS = (
    "resources",
    "bases",
    "components",
    "crds",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "patchesStrategicMerge",
)
_PATH_IN_ITEMS = ("patches", "patchesJson6902", "replacements")
_GENERATORS = ("configMapGenerator", "secretGenerator")
# a scheme (https:, ssh:, file:, and kustomize's gh: shorthand), scp-like git@, a dotted host
_REMOTE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:|git@|[^/\s]+\.[^/\s]+/)|//|\?(ref|version)=")


def check_kustomization(directory: Path, *, allow_remote: bool) -> None:
    """Refuse remote bases in the kustomization at ``directory`` and in every local base,
    component or resource directory it names (unless ``allow_remote``), and any remote URL
    whose ref git could read as an option (always)."""
    seen: set[Path] = set()
    todo = [directory.resolve()]
    while todo:
        here = todo.pop()
        if here in seen:
            continue
        seen.add(here)
        file = next((here / n for n in KUSTOMIZATION_FILES if (here / n).is_file()), None)
        if file is None:
            continue
        for field, entry in _entries(file):
            local = here / entry
            if _exists(local):
                if local.is_dir():
                    todo.append(local.resolve())
                continue
            if not _REMOTE.search(entry) and not entry.startswith("-"):
                continue  # a missing local file: kustomize says so
            _check_remote(file, field, entry)
            if not allow_remote:
                raise ConfinementError(
                    f"{file}: {field}: {entry!r} is a remote base, fetched when rendering and "
                    "not pinned by what is published: refused (--allow-remote-bases allows it)"
                )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _entries(file: Path) -> Iterator[tuple[str, str]]:
    """(field, path or URL) of every entry of a kustomization that names something to load."""
    try:
        docs = [doc for _, doc in kyaml.documents(file.read_text())]
    except (OSError, UnicodeDecodeError, kyaml.DecodeError) as exc:
        raise ConfinementError(f"{file}: cannot read: {exc}") from None
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        for field in _PATH_LISTS:
            for item in _list(doc.get(field)):
                if isinstance(item, str) and "\n" not in item:  # not an inline document
                    yield field, item.strip()
        for field in _PATH_IN_ITEMS:
            for item in _list(doc.get(field)):
                if isinstance(item, dict) and isinstance(item.get("path"), str):
                    yield f"{field}.path", item["path"]
        for field in _GENERATORS:
            for gen in _list(doc.get(field)):
                if not isinstance(gen, dict):
                    continue
                for sub in ("files", "envs"):
                    for item in _list(gen.get(sub)):
                        if isinstance(item, str):
                            yield f"{field}.{sub}", item.rpartition("=")[2]
        openapi = doc.get("openapi")
        if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
            yield "openapi.path", openapi["path"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check_remote(file: Path, field: str, url: str) -> None:
    bad = ConfinementError(
        f"{file}: {field}: {url!r} is not a valid remote base (a URL with no spaces or control "
        "characters, not starting with -, whose ?ref= or ?version= is a Git ref)"
    )
    if url.startswith("-") or any(c.isspace() or ord(c) < 32 for c in url):
        raise bad
    query = urllib.parse.urlsplit(url if "://" in url else f"x://{url}").query
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name in ("ref", "version"):
            try:
                check_ref(value)
            except ConfinementError:
                raise bad from None


# --- no cluster for renderers -------------------------------------------------------------------


def renderer_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment kubectl kustomize and helm template run in: this one without anything
    that names a cluster or its credentials (``lookup`` then finds nothing)."""
    env = dict(os.environ if environ is None else environ)
    for name in list(env):
        if name.startswith(("HELM_KUBE", "KUBERNETES_")) or name in ("KUBECONFIG",):
            del env[name]
    env["KUBECONFIG"] = os.devnull
    return env
