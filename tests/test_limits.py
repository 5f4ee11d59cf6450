"""The house's size limits, so they hold without anyone checking by hand: no module of the package over 500 lines,
and no folder of it (a package with its subpackages; the top level, whose folders are the packages, aside) over
3,000 lines or 15 modules. A module or folder that grows past them is split by idea."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mission_gym"
MODULE_LINES = 500
FOLDER_LINES = 3_000
FOLDER_MODULES = 15


def lines(path: Path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_no_module_is_over_500_lines() -> None:
    over = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := lines(p)) > MODULE_LINES}
    assert over == {}, f"split these modules by idea (over {MODULE_LINES} lines): {over}"


def test_no_folder_is_over_3000_lines_or_15_modules() -> None:
    folders = [d for d in PACKAGE.iterdir() if d.is_dir() and (d / "__init__.py").is_file()]
    assert len(folders) > 10  # the package's folders were found
    over = {}
    for folder in folders:
        for d in [folder, *(s for s in folder.rglob("*") if s.is_dir() and (s / "__init__.py").is_file())]:
            modules = list(d.rglob("*.py"))  # with its subpackages
            size = sum(lines(p) for p in modules)
            if size > FOLDER_LINES or len(modules) > FOLDER_MODULES:
                over[str(d.relative_to(PACKAGE))] = (len(modules), size)
    assert over == {}, f"split these folders by idea (modules, lines) over ({FOLDER_MODULES}, {FOLDER_LINES}): {over}"
