"""README.md: the CLI reference is generated from --help and current; the commands are there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from teamlead._cli.reference import END, START, render

README = Path(__file__).resolve().parent.parent / "README.md"


def test_cli_reference_is_current() -> None:
    text = README.read_text()
    block = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert block == render(), (
        "README CLI reference is stale: python -m teamlead._cli.reference --write README.md"
    )


def test_readme_starts_with_install_and_test_commands() -> None:
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.DOTALL)
    assert "pip install" in blocks[0] and "teamlead demo" in blocks[0]
    assert "pytest" in blocks[1]
    assert text.index("<!-- test-command -->") < text.index(blocks[1])


def test_the_test_command_runs_the_pinned_dev_tools_first() -> None:
    # ruff, mypy and import-linter run once, by .ci/lint, at the versions pyproject pins;
    # the tests themselves never run a linter whose next release could break them
    text = README.read_text()
    command = re.findall(r"```bash\n(.*?)\n```", text, re.DOTALL)[1]
    assert command.index(".ci/lint") < command.index("pytest")
    lint = (README.parent / ".ci" / "lint").read_text()
    assert all(
        tool in lint for tool in ("ruff check", "ruff format --check", "mypy", "lint-imports")
    )
    pyproject = (README.parent / "pyproject.toml").read_text()
    for tool in ("ruff", "mypy", "import-linter"):
        assert re.search(rf'"{tool}==[0-9.]+"', pyproject), f"{tool} is not pinned"


def test_what_the_readmes_experiment_commands_write_is_ignored_by_git() -> None:
    """Run from a checkout as written, the experiment commands write trial dirs and HTML
    reports into it: none of them should show up as changes to commit."""
    commands = re.findall(r"^teamlead experiment \S+ .*$", README.read_text(), re.MULTILINE)
    written = {
        path
        for command in commands
        for path in re.findall(r"--(?:out|html) (\S+)", command.split("#")[0])
    }
    assert {"runs/ab", "runs/strategy-ab", "report.html", "strategy-ab.html"} <= written
    git = shutil.which("git")
    if git is None or not (README.parent / ".git").exists():
        pytest.skip("not a git checkout")
    for path in sorted(written):
        check = subprocess.run([git, "check-ignore", "-q", path], cwd=README.parent, check=False)
        assert check.returncode == 0, f"{path} (written by the README's commands) is not ignored"
