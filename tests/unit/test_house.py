"""House rules of the code itself (issue 32, docs STYLE "Modules of one concept, 50–400 lines"):
no product module is over 400 lines. Import cycles are the import-linter contract's
(``acyclic_siblings`` in pyproject.toml, checked by ``lint-imports``)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


@pytest.mark.parametrize(
    ("package", "limit"),
    [
        pytest.param("services", MAX_LINES, id="services-modules-at-most-400-lines"),
        pytest.param("schemas", MAX_LINES, id="schemas-modules-at-most-400-lines"),
    ],
)
def test_no_module_is_over_the_limit(package: str, limit: int) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules found under {package}/"
    over = {p.relative_to(ROOT).as_posix(): n for p in modules if (n := lines(p)) > limit}
    assert not over, (
        f"{len(over)} module(s) of {package}/ over {limit} lines (split by concept): "
        + (", ".join(f"{path} ({n})" for path, n in sorted(over.items())))
    )
