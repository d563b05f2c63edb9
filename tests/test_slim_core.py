"""A plain install carries what `teamlead.query`, the client helper, `ask` and the relay need.

The statistics stack (numpy, scipy, statsmodels, and pandas through it) and the grader's
``anthropic`` client are the ``experiment`` extra. Importing the core must never load them,
and without them `teamlead experiment ...` says in one line what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "statsmodels", "pandas", "patsy", "matplotlib", "anthropic")
#: Blocks the experiment extra's modules (ImportError), then runs the console entry point.
WITHOUT_EXTRA = (
    "import sys\n"
    "for name in ('numpy', 'scipy', 'statsmodels', 'anthropic'): sys.modules[name] = None\n"
    "from teamlead._cli import main; sys.argv[0] = 'teamlead'; main()\n"
)


#: Each test starts a fresh interpreter (seconds each): the slow tier.
pytestmark = pytest.mark.slow


def _fresh(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


CORE_MODULES = (
    "teamlead",
    "teamlead.coordinator",
    "teamlead._cli",
    "teamlead._cli.ask",
    "teamlead._cli.demo",
    "teamlead._relay",
    "teamlead.testing",
)
#: One fresh interpreter imports the package, then forks a child per module that imports
#: it and reports: importing ``teamlead.X`` runs the package's own import first, so each
#: child's modules are exactly those of a fresh ``import teamlead.X``, without a fresh
#: interpreter and package import per module.
IMPORT_EACH = (
    "import json, os, sys\n"
    "import teamlead\n"
    "def heavy(): return sorted(n for n in HEAVY if n in sys.modules)\n"
    "for module in MODULES:\n"
    "    if module == 'teamlead':\n"
    "        print(json.dumps([module, heavy()]), flush=True)\n"
    "        continue\n"
    "    child = os.fork()\n"
    "    if child == 0:\n"
    "        try:\n"
    "            __import__(module)\n"
    "            print(json.dumps([module, heavy()]), flush=True)\n"
    "        except BaseException:\n"
    "            import traceback; traceback.print_exc()\n"
    "        finally:\n"
    "            sys.stderr.flush(); os._exit(0)\n"
    "    os.waitpid(child, 0)\n"
)


@pytest.fixture(scope="module")
def core_imports() -> dict[str, list[str]]:
    """Per core module: the heavy modules a fresh import of it loaded."""
    code = f"HEAVY = {HEAVY!r}\nMODULES = {CORE_MODULES!r}\n" + IMPORT_EACH
    run = _fresh(code)
    assert run.returncode == 0, run.stderr
    loaded: dict[str, list[str]] = dict(map(json.loads, run.stdout.splitlines()))
    assert set(loaded) == set(CORE_MODULES), run.stderr  # a module that failed to import
    return loaded


@pytest.mark.parametrize("module", CORE_MODULES)
def test_importing_the_core_never_loads_the_statistics_stack(
    module: str, core_imports: dict[str, list[str]]
) -> None:
    assert core_imports[module] == []


def test_the_cli_help_runs_without_the_experiment_extra() -> None:
    run = _fresh(WITHOUT_EXTRA, "ask", "--help")
    assert run.returncode == 0, run.stderr
    assert "--strategy" in run.stdout


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["experiment", "report", "runs/none"], "numpy, scipy, statsmodels missing"),
        (["experiment", "run", "spec.toml", "--out", "runs/x"], "anthropic missing"),
    ],
)
def test_experiment_without_the_extra_says_what_to_install(args: list[str], missing: str) -> None:
    run = _fresh(WITHOUT_EXTRA, *args)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert missing in lines[0]
    assert "pip install -e '.[experiment]'" in lines[0]


def test_the_statistics_stack_is_an_extra_that_the_test_extra_includes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {r.split(">")[0].split("<")[0].split(";")[0].split("[")[0] for r in requirements}

    core = names(project["dependencies"])
    extras = project["optional-dependencies"]
    experiment = names(extras["experiment"])
    assert {"numpy", "scipy", "statsmodels", "anthropic"} <= experiment
    assert not core & experiment
    assert experiment <= names(extras["test"])


#: Runs the console entry point with ``sys.argv[1:]``, then says on stderr whether the
#: SDK (or the pydantic models it brings) was loaded.
ENTRY_POINT_REPORTS_SDK = (
    "import atexit, sys\n"
    "def report():\n"
    "    heavy = sorted({n.split('.')[0] for n in sys.modules} & {'claude_agent_sdk', 'mcp'})\n"
    "    sys.stderr.write('LOADED ' + ','.join(heavy) + '\\n')\n"
    "atexit.register(report)\n"
    "sys.argv[0] = 'teamlead'\n"
    "from teamlead._cli.startup import run; run()\n"
)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], 0),
        (["ps"], 0),
        (["ps", "--json"], 0),
        (["ps", "--all"], 0),
        (["show", "0123456789ab"], 4),  # 4: no such run, said in one line
        (["stop", "0123456789ab"], 4),
        (["pause", "0123"], 4),
    ],
    ids=["help", "ps", "ps-json", "ps-all", "show", "stop", "pause"],
)
def test_the_verbs_people_type_start_without_loading_the_sdk(
    args: list[str], code: int, tmp_path: Path
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", ENTRY_POINT_REPORTS_SDK, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "TEAMLEAD_RUNTIME_DIR": str(tmp_path / "run")},
    )
    assert run.returncode == code, run.stderr
    assert run.stderr.splitlines()[-1] == "LOADED ", run.stderr


def test_the_finished_of_a_run_stopped_at_start_up_is_built_without_the_sdk() -> None:
    # a stop signal may come while the SDK is half-imported: `ask` then writes this one
    # line and exits, and loading the SDK again there would crash it
    code = (
        "import sys\n"
        "from teamlead._run.result import stopped_before_start\n"
        "assert stopped_before_start('SIGTERM').reason == 'interrupted'\n"
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'claude_agent_sdk', 'mcp'}))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_teamlead_claude_reads_its_setup_without_the_sdk_or_the_terminal_views() -> None:
    # the shim resolves the real CLI and the policy before it starts the CLI (and a
    # command line it passes through, like `--version`, needs nothing else): the SDK's
    # import (about a second) and the terminal views must not be on that path
    from teamlead._claude.binary import bundled_cli_path

    code = (
        "import os, sys\n"
        "from teamlead._shim import read_setup\n"
        "setup = read_setup()\n"
        "heavy = {'claude_agent_sdk', 'mcp', 'rich'}\n"
        "print(setup.cli, setup.policy.max_resumes)\n"
        "print(sorted({n.split('.')[0] for n in sys.modules} & heavy))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TEAMLEAD_CLAUDE_PATH"}
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**env, "TEAMLEAD_MAX_RESUMES": "2"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{bundled_cli_path()} 2", "[]"]
