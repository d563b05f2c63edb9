"""Every Python block in README.md and the docs pages runs as written, offline, and uses
only public names.

Each block is written to a file and run in a fresh interpreter whose environment points
the bundled CLI at a scripted model (what `teamlead serve-scripted` prints), so the
blocks that talk to "the API" talk to it. A block that prints a run's outcome must print
``completed``; one that prints the drop-in's results must end with the synthesis. A block
shown on two pages runs once.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import teamlead
import teamlead.events
import teamlead.governor
import teamlead.policy
from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..docs_pages import README, label, prose_files
from ..isolated import isolated_env, run_to_the_end, side_by_side

#: The public modules whose names a block may import (those listed in each one's
#: ``__all__``; the rest of teamlead is reached as `teamlead.X`).
LISTED_MODULES = {
    "teamlead": teamlead,
    "teamlead.events": teamlead.events,
    "teamlead.policy": teamlead.policy,
    "teamlead.governor": teamlead.governor,
}
#: Public subpackages a block may import from.
PUBLIC_MODULES = {*LISTED_MODULES, "teamlead.testing", "teamlead.testing.scripts"}


@dataclass(frozen=True)
class Block:
    """One ```python block of the prose, and where it is shown first."""

    where: str  #: ``README.md #0``, ``docs/library.md #1``
    code: str


def python_blocks() -> list[Block]:
    """Every ```python block of README.md and docs/**/*.md, each distinct block once."""
    blocks: dict[str, Block] = {}
    for path in prose_files():
        found = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
        for index, code in enumerate(found):
            blocks.setdefault(code, Block(f"{label(path)} #{index}", code))
    return list(blocks.values())


def private_names(code: str) -> list[str]:
    """The teamlead names ``code`` uses that are not public."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("teamlead"):
            if node.module not in PUBLIC_MODULES:
                bad.append(f"from {node.module} import ...")
            elif node.module in LISTED_MODULES:
                listed = LISTED_MODULES[node.module].__all__
                bad += [f"{node.module}.{a.name}" for a in node.names if a.name not in listed]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("teamlead.")]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "teamlead"
            and node.attr not in teamlead.__all__
        ):
            bad.append(f"teamlead.{node.attr}")
    return bad


def test_the_docs_show_python_blocks_with_public_names_only() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 5
    assert any(block.where.startswith("README.md") for block in blocks)
    for block in blocks:
        assert not private_names(block.code), (block.where, private_names(block.code))


@dataclass(frozen=True)
class BlockRun:
    """What one block did, run as written against its own scripted model."""

    block: Block
    returncode: int
    stdout: str
    stderr: str
    reached_the_model: bool  #: a subagent's request came to the scripted model


def _run_block(index: int, block: Block, root: Path) -> BlockRun:
    path = root / f"docs_block_{index}.py"
    path.write_text(block.code)
    script = FanOut.of(2, delays=0.3, synthesis_fault=Reply.error(529))
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "claude")
        run = run_to_the_end(
            [sys.executable, str(path)],
            env={**isolated_env(root), **claude.env},
            cwd=claude.cwd,
            timeout=240,
        )
        reached = bool(server.recorded("subagent"))
    return BlockRun(block, run.returncode, run.stdout, run.stderr, reached)


@pytest.fixture(scope="module")
def block_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, BlockRun]:
    """Every block's run, three at a time: each in its own interpreter, directory, Claude
    state and scripted model, so they share nothing but the time."""
    blocks = python_blocks()
    return side_by_side(
        lambda i, root: _run_block(i, blocks[i], root),
        range(len(blocks)),
        tmp_path_factory,
        at_once=3,
        root_name=lambda i: f"block{i}",
    )


@pytest.mark.cli
@pytest.mark.slow  # each block in its own interpreter, several on the real CLI
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "index", range(len(python_blocks())), ids=[block.where for block in python_blocks()]
)
def test_every_python_block_of_the_docs_runs_as_written(
    index: int, block_runs: dict[int, BlockRun]
) -> None:
    run = block_runs[index]
    code = run.block.code
    assert run.returncode == 0, f"python block {run.block.where}:\n{code}\n{run.stderr}"
    if "print(item.status" in code:
        assert run.stdout.startswith("completed SYNTHESIS of 2 findings"), run.stdout
        assert run.reached_the_model, "the block never reached the scripted model"
    if "print(message.result)" in code:  # the drop-in: its last result is the answer
        assert run.stdout.splitlines()[-1].startswith("SYNTHESIS of 2 findings"), run.stdout
        assert run.reached_the_model, "the block never reached the scripted model"


EXAMPLES_README = README.parent / "examples" / "README.md"


def _bash_commands(path: Path) -> list[str]:
    """The commands in ``path``'s bash blocks, with leading ``VAR=value`` words dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            while words and re.match(r"^\w+=", words[0]):
                words.pop(0)
            if words:
                commands.append(" ".join(words))
    return commands


def test_the_examples_readme_runs_the_venvs_tools_not_bare_ones() -> None:
    commands = _bash_commands(EXAMPLES_README)
    assert commands
    bare = [c for c in commands if c.split()[0] in ("python", "python3", "pytest", "teamlead")]
    assert not bare, bare


def test_the_offline_recipes_are_the_line_serve_scripted_prints() -> None:
    from teamlead._cli.demo import offline_exports

    line = offline_exports("http://127.0.0.1:8765")
    offline_page = README.parent / "docs" / "offline.md"
    for path in (offline_page, EXAMPLES_README):  # the recipes: each shows the line
        assert any(c.startswith("export ANTHROPIC_BASE_URL") for c in _bash_commands(path)), path
    for path in [*prose_files(), EXAMPLES_README]:  # wherever it is shown, it is that line
        exports = [c for c in _bash_commands(path) if c.startswith("export ANTHROPIC_BASE_URL")]
        assert all(c == line for c in exports), (label(path), exports)
