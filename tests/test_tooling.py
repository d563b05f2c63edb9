"""The house tooling stays clean: ruff (lint and format) everywhere, mypy --strict on teamlead/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["teamlead", "tests", "examples", "bench"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_and_format() -> None:
    lint = _run("ruff", "check", *PATHS)
    assert lint.returncode == 0, lint.stdout[-3000:]
    fmt = _run("ruff", "format", "--check", *PATHS)
    assert fmt.returncode == 0, fmt.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mypy_strict() -> None:
    result = _run("mypy", "teamlead")
    assert result.returncode == 0, result.stdout[-3000:]
