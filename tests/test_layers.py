"""The package's shape holds: one-way layers, no test bed in production, documented modules.

``lint-imports`` checks the contracts in ``pyproject.toml`` (the layers of the package, the
ban on :mod:`teamlead.testing` outside the demo commands, no import cycles); the other tests
check what a contract cannot see: a module imported on its own in a fresh interpreter does
not load the test bed, and every module says what it is for. Module size follows the
concept: there is no line cap.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "teamlead"


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
    assert "0 broken" in result.stdout


@pytest.mark.slow  # a fresh interpreter imports every module: 1-3 s
def test_no_production_module_loads_the_test_bed() -> None:
    production = [
        name
        for name in _modules()
        if not name.startswith("teamlead.testing") and name != "teamlead.__main__"
    ]
    # Importing every production module into one fresh interpreter loads the union of what
    # each loads alone, so if the union holds no teamlead.testing module, none loads it;
    # the first module after which one appears is the one to blame.
    script = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith('teamlead.testing'))\n"
        "    if loaded:\n"
        "        print(name, 'loads', loaded[0])\n"
        "        break\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *production],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == ""


@pytest.mark.slow  # a fresh interpreter imports every module: 1-3 s
def test_every_front_door_hands_out_each_name_it_lists() -> None:
    # Every module of the package imported first: a door's name that is also one of its
    # wing's modules would then be that module, whatever the door imports under it.
    doors = sorted(f"teamlead.{init.parent.name}" for init in PACKAGE.glob("_*/__init__.py"))
    script = (
        "import importlib, sys, types\n"
        "for name in sys.argv[2:]:\n"
        "    importlib.import_module(name)\n"
        "for door in sys.argv[1].split(','):\n"
        "    package = importlib.import_module(door)\n"
        "    for export in getattr(package, '__all__', ()):\n"
        "        if isinstance(getattr(package, export), types.ModuleType):\n"
        "            print(door, export)\n"
    )
    production = [name for name in _modules() if name != "teamlead.__main__"]
    result = subprocess.run(
        [sys.executable, "-c", script, ",".join(doors), *production],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "teamlead._run" in doors and "teamlead._control" in doors
    assert result.stdout == ""


def test_every_module_opens_with_a_docstring() -> None:
    import ast

    undocumented = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not (ast.get_docstring(ast.parse(text)) or "").strip():
            undocumented.append(str(path.relative_to(ROOT)))
    assert undocumented == []
