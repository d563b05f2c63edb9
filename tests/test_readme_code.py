"""Every Python block in README.md runs as written, offline, and uses only public names.

Each block is written to a file and run in a fresh interpreter whose environment points
the bundled CLI at a scripted model (what `teamlead serve-scripted` prints), so the
blocks that talk to "the API" talk to it. A block that prints a run's outcome must print
``completed``.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import teamlead
from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut

from .isolated import isolated_env, run_to_the_end, side_by_side

README = Path(__file__).resolve().parent.parent / "README.md"
#: Public subpackages a block may import from (the rest of teamlead is reached as `teamlead.X`).
PUBLIC_MODULES = {"teamlead", "teamlead.testing", "teamlead.testing.scripts"}


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def private_names(code: str) -> list[str]:
    """The teamlead names ``code`` uses that are not public."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("teamlead"):
            if node.module not in PUBLIC_MODULES:
                bad.append(f"from {node.module} import ...")
            elif node.module == "teamlead":
                bad += [a.name for a in node.names if a.name not in teamlead.__all__]
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


def test_the_readme_shows_python_blocks_with_public_names_only() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        assert not private_names(block), private_names(block)


@dataclass(frozen=True)
class BlockRun:
    """What one README block did, run as written against its own scripted model."""

    code: str
    returncode: int
    stdout: str
    stderr: str
    reached_the_model: bool  #: a subagent's request came to the scripted model


def _run_block(index: int, code: str, root: Path) -> BlockRun:
    path = root / f"readme_block_{index}.py"
    path.write_text(code)
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
    return BlockRun(code, run.returncode, run.stdout, run.stderr, reached)


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
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_every_readme_python_block_runs_as_written(
    index: int, block_runs: dict[int, BlockRun]
) -> None:
    run = block_runs[index]
    code = run.code
    assert run.returncode == 0, f"README python block {index}:\n{code}\n{run.stderr}"
    if "print(item.status" in code:
        assert run.stdout.startswith("completed SYNTHESIS of 2 findings"), run.stdout
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


def test_the_readmes_offline_recipe_is_the_line_serve_scripted_prints() -> None:
    from teamlead._cli.demo import offline_exports

    line = offline_exports("http://127.0.0.1:8765")
    for path in (README, EXAMPLES_README):
        exports = [c for c in _bash_commands(path) if c.startswith("export ANTHROPIC_BASE_URL")]
        assert exports, path
        assert all(c == line for c in exports), (path, exports)
