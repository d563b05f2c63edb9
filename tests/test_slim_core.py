"""A plain install carries what `teamlead.query`, the client helper, `ask` and the relay need.

The statistics stack (numpy, scipy, statsmodels, and pandas through it) and the grader's
``anthropic`` client are the ``experiment`` extra. Importing the core must never load them,
and without them `teamlead experiment ...` says in one line what to install.
"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    "module",
    [
        "teamlead",
        "teamlead.coordinator",
        "teamlead._cli",
        "teamlead._cli.ask",
        "teamlead._cli.demo",
        "teamlead._relay",
        "teamlead.testing",
    ],
)
def test_importing_the_core_never_loads_the_statistics_stack(module: str) -> None:
    code = (
        f"import json, sys, {module}\n"
        f"print(json.dumps(sorted(n for n in {HEAVY!r} if n in sys.modules)))\n"
    )
    run = _fresh(code)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


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
