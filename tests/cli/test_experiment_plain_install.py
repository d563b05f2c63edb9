"""A plain install (no matplotlib) runs and reports an A/B of two one-line prompt files.

The `teamlead` command runs in a subprocess where importing matplotlib fails, as on an
install without the ``plots`` extra; the trials run on the real bundled CLI against the
scripted model server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from teamlead.experiment import TrialWriter
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import ProbabilisticFanOut

from ..records import trial_record

MARKER = "Fan out to parallel agents."
# Blocks `import matplotlib` (ImportError), then runs the console entry point.
WITHOUT_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; "
    "from teamlead._cli import main; sys.argv[0] = 'teamlead'; main()"
)

# What runs without matplotlib is under test, not the statistics: fewer relabelings and
# MDE simulations (the report's own sizes are tested in tests/experiment/test_stats.py).
QUICK = ("--permutations", "500", "--mde-simulations", "100")


def _teamlead(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.cli
@pytest.mark.timeout(300)
def test_plain_install_runs_and_reports_one_line_prompt_files(tmp_path: Path) -> None:
    arms = tmp_path / "arms"
    arms.mkdir()
    (arms / "plain.md").write_text("Answer directly.\n")
    (arms / "fan.md").write_text(MARKER + "\n")
    spec = tmp_path / "ab.toml"
    lines = [
        "[experiment]",
        'name = "plain"',
        "trials = 1",  # three tasks, two arms: six trials
        "seed = 3",
        "concurrency = 4",
        'control = "plain"',
        "[[variants]]",
        'name = "plain"',
        'strategy = "arms/plain.md"',
        "[[variants]]",
        'name = "fan"',
        'strategy = "arms/fan.md"',
    ]
    for i in range(3):
        lines += ["[[tasks]]", f'id = "t{i}"', f'prompt = "Question {i}."']
    spec.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, p_plain=0.0, p_solo=0.0, delay=0.1)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**os.environ, **claude.env}
        run = _teamlead(env, claude.cwd, "experiment", "run", str(spec), "--out", str(out), "-q")
        assert run.returncode == 0, run.stderr
    assert "ran 6 trial(s)" in run.stdout

    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 6
    fan = next(r for r in records if r["variant"] == "fan")
    assert fan["prompt_name"] == "fan" and fan["prompt_version"] is None
    assert fan["prompt_source"].endswith("fan.md") and len(fan["prompt_sha256"]) == 64

    as_json = _teamlead(env, tmp_path, "experiment", "report", str(out), "--json", *QUICK)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    parallel = next(c for c in data["comparisons"] if c["metric"] == "parallel")
    assert parallel["diff"] == 1.0 and parallel["tasks"] == ["t0", "t1", "t2"]
    # the run's own files (".lock" holds the out dir against a second run): report --json
    # added none
    run_files = [".lock", "experiment.json", "run.json", "trials.jsonl"]
    assert sorted(p.name for p in out.iterdir()) == run_files

    report = _teamlead(env, tmp_path, "experiment", "report", str(out), *QUICK)
    assert report.returncode == 0, report.stderr
    assert "Traceback" not in report.stderr
    warning = [line for line in report.stderr.splitlines() if "plots skipped" in line]
    assert warning == [
        "teamlead: warning: plots skipped: matplotlib is not installed; "
        "from a checkout, pip install -e '.[plots]' to get them"
    ]
    assert "| fan | parallel |" in report.stdout and "Verdict rule:" in report.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        ".lock",
        "experiment.json",
        "report.json",
        "report.md",
        "run.json",
        "trials.jsonl",
    ]


def test_the_plots_warning_is_only_for_a_report_that_asked_for_plots(tmp_path: Path) -> None:
    """``--html`` draws its own charts: without matplotlib it says nothing about PNG plots;
    the plain report, whose PNG plots were asked for, still says they were skipped."""
    out = tmp_path / "out"
    with TrialWriter(out / "trials.jsonl") as writer:
        for n, task in enumerate(("t0", "t1", "t2")):
            writer.append(trial_record("plain", task, 0, parallel=False))
            writer.append(trial_record("fan", task, 0, parallel=n != 1))
    (out / "experiment.json").write_text(json.dumps({"version": 1, "control": "plain"}))
    page = tmp_path / "report.html"
    html = _teamlead(
        dict(os.environ), tmp_path, "experiment", "report", str(out), "--html", str(page), *QUICK
    )
    assert html.returncode == 0, html.stderr
    assert page.is_file() and "plots skipped" not in html.stderr
    plain = _teamlead(dict(os.environ), tmp_path, "experiment", "report", str(out), *QUICK)
    assert plain.returncode == 0, plain.stderr
    assert "teamlead: warning: plots skipped: matplotlib is not installed" in plain.stderr
