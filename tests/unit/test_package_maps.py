"""Every package's ``__init__`` docstring maps its modules to their roles (issue 32).

For each package under ``services/``, ``schemas/``, ``harness/`` and ``bench/`` (a directory with
an ``__init__.py``), every module (a ``.py`` file other than ``__init__``) must be named in the
package's docstring as ``name``, and every sub-package as ``name/`` (or ``name``). The docstring
is read with ``ast``, so no package is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("services", "schemas", "harness", "bench")


def packages() -> list[Path]:
    """Every package directory under the top-level packages, sorted."""
    found: list[Path] = []
    for top in TOP_LEVEL:
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.append(init.parent)
    return sorted(found)


def members(package: Path) -> tuple[list[str], list[str]]:
    """The package's modules and sub-packages, by name."""
    modules = sorted(p.stem for p in package.glob("*.py") if p.name != "__init__.py")
    subpackages = sorted(p.parent.name for p in package.glob("*/__init__.py"))
    return modules, subpackages


def docstring(package: Path) -> str:
    init = package / "__init__.py"
    return ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")), clean=False) or ""


def missing(package: Path) -> list[str]:
    """What the package's docstring does not name, ``name`` for modules, ``name/`` for
    sub-packages."""
    text = docstring(package)
    modules, subpackages = members(package)
    absent = [f"``{m}``" for m in modules if f"``{m}``" not in text]
    absent += [
        f"``{s}/``" for s in subpackages if f"``{s}/``" not in text and f"``{s}``" not in text
    ]
    return absent


PACKAGES = packages()


def test_packages_found() -> None:
    assert len(PACKAGES) > len(TOP_LEVEL), PACKAGES


@pytest.mark.parametrize(
    "package", PACKAGES, ids=[p.relative_to(ROOT).as_posix() for p in PACKAGES]
)
def test_package_docstring_maps_every_module(package: Path) -> None:
    absent = missing(package)
    name = package.relative_to(ROOT).as_posix()
    assert not absent, (
        f"{name}/__init__.py's docstring does not name: {', '.join(absent)} "
        "(map each module to its role, as services/applier/__init__.py does)"
    )
