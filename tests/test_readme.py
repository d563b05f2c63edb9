"""README.md starts with the commands; docs/cli.md's reference is generated from --help."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from teamlead._cli.reference import END, START, render

from .docs_pages import DOCS, README, prose_files

CLI_PAGE = DOCS / "cli.md"
DEVELOPMENT_PAGE = DOCS / "development.md"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", text, re.DOTALL)


def test_cli_reference_is_current() -> None:
    text = CLI_PAGE.read_text()
    block = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert block == render(), (
        "docs/cli.md is stale: python -m teamlead._cli.reference --write docs/cli.md"
    )


def test_the_cli_reference_lives_on_its_page_only() -> None:
    assert START not in README.read_text() and END not in README.read_text()
    assert "--write docs/cli.md" in START


def test_readme_starts_with_install_and_test_commands() -> None:
    text = README.read_text()
    blocks = _bash_blocks(text)
    assert "pip install" in blocks[0] and "teamlead demo" in blocks[0]
    assert "pytest" in blocks[1]
    assert text.index("<!-- test-command -->") < text.index(blocks[1])


def test_the_development_page_shows_the_readmes_test_command() -> None:
    command = _bash_blocks(README.read_text())[1]
    assert command in _bash_blocks(DEVELOPMENT_PAGE.read_text())


def test_the_test_command_runs_the_pinned_dev_tools_first() -> None:
    # ruff, mypy and import-linter run once, by .ci/lint, at the versions pyproject pins;
    # the tests themselves never run a linter whose next release could break them
    text = README.read_text()
    command = _bash_blocks(text)[1]
    assert command.index(".ci/lint") < command.index("pytest")
    lint = (README.parent / ".ci" / "lint").read_text()
    assert all(
        tool in lint for tool in ("ruff check", "ruff format --check", "mypy", "lint-imports")
    )
    pyproject = (README.parent / "pyproject.toml").read_text()
    for tool in ("ruff", "mypy", "import-linter"):
        assert re.search(rf'"{tool}==[0-9.]+"', pyproject), f"{tool} is not pinned"


def test_what_the_docs_experiment_commands_write_is_ignored_by_git() -> None:
    """Run from a checkout as written, the experiment commands (the README's and the docs
    pages') write trial dirs and HTML reports into it: none of them should show up as
    changes to commit."""
    text = "\n".join(path.read_text() for path in prose_files())
    commands = re.findall(r"^teamlead experiment \S+ .*$", text, re.MULTILINE)
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


def test_the_readme_fits_on_two_screens() -> None:
    # everything else lives on the docs site's pages (docs/), which the README links to
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines: move the detail to docs/"
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (README.parent / target).is_file(), target
