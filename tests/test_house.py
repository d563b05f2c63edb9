"""The tests' own house: tiers in folders, helpers in helper modules, never in a test file.

- A test that drives the real CLI (the ``cli`` mark) lives in ``tests/cli/``, the real-CLI
  tier, whose conftest holds what its modules share (the scripted server, ``teamlead ask``).
- No module imports a test module (``test_*.py``): what two test files share lives in a
  helper module (``tests/polling.py``, ``tests/cli/scripted.py``...) or a conftest, so a
  test file can be moved, split or run alone without breaking another.

Both are read from the source, so they hold whichever tests a run selects; tests/conftest.py
also fails a ``cli`` test that runs from outside ``tests/cli/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLI_TIER = TESTS / "cli"


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts)


def _module_name(path: Path) -> str:
    """``tests/cli/test_ask.py`` is ``tests.cli.test_ask``; a package's ``__init__.py`` is
    named as a module inside it, so that its relative imports resolve against it."""
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def _imported(source: str, module: str) -> list[tuple[int, str]]:
    """Every module ``source`` (the text of module ``module``) imports, with its line:
    ``from X import a`` counts ``X`` and ``X.a``, and a relative import is resolved against
    ``module``'s package."""
    package = module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def test_no_module_imports_a_test_module() -> None:
    offending = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {name}"
        for path in _sources()
        for line, name in _imported(path.read_text(encoding="utf-8"), _module_name(path))
        if _is_test_module(name)
    ]
    assert not offending, "share through a helper module or a conftest:\n" + "\n".join(offending)


def _names_the_cli_mark(tree: ast.AST) -> list[int]:
    """The lines of ``pytest.mark.cli`` (or ``mark.cli``) in ``tree``: a decorator, a
    ``pytestmark`` or a ``pytest.param(..., marks=...)``."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "cli"
        and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "mark")
            or (isinstance(node.value, ast.Name) and node.value.id == "mark")
        )
    )


def test_every_test_with_the_cli_mark_lives_in_the_cli_tier() -> None:
    outside = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in _sources()
        if not path.is_relative_to(CLI_TIER) and path.name != "conftest.py"
        for line in _names_the_cli_mark(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not outside, "a test that drives the real CLI belongs in tests/cli/:\n" + "\n".join(
        outside
    )


def test_the_checks_see_what_they_look_for() -> None:
    """The readers above on sources made for them: the cli mark in each place a module can
    put it, and an import of a test module in each form."""
    marks = (
        "import pytest\n"
        "from pytest import mark\n"
        "pytestmark = [pytest.mark.cli]\n"
        "@pytest.mark.cli\n"
        "def test_a(): ...\n"
        "@mark.cli\n"
        "def test_b(): ...\n"
        "P = pytest.param('x', marks=pytest.mark.cli)\n"
        "S = pytest.mark.slow\n"
    )
    assert _names_the_cli_mark(ast.parse(marks)) == [3, 4, 6, 8]
    imports = (
        "from .test_gate import StepClock\n"
        "from ..polling import poll\n"
        "from . import test_focus\n"
        "import tests.test_cli\n"
        "from .conftest import ask\n"
    )
    named = [n for _, n in _imported(imports, "tests.cli.test_sample") if _is_test_module(n)]
    assert named == ["tests.cli.test_gate", "tests.cli.test_focus", "tests.test_cli"]
