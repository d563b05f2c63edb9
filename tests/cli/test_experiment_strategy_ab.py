"""The offline A/B of ``examples/strategy-ab.toml`` runs from the command line, as the docs'
walk-through does: a trimmed copy of the spec on the real CLI against the ``strategy-ab``
scripted scenario, then its report (the recorded full run's statistics are checked in
tests/experiment/test_strategy_ab.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from teamlead.experiment import read_records
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import scenario

from .conftest import TEAMLEAD, ask_env

pytestmark = pytest.mark.cli

SPEC = Path(__file__).resolve().parents[2] / "examples" / "strategy-ab.toml"


@pytest.mark.slow
def test_the_example_runs_offline_from_the_command_line(tmp_path: Path) -> None:
    """The docs' walk-through on a trimmed spec: 2 tasks, 1 trial each (4 trials)."""
    text = SPEC.read_text(encoding="utf-8")
    text = text.replace("trials = 4 ", "trials = 1 ", 1)
    text = text.replace('cwd = "strategy-ab"', f"cwd = {str(SPEC.parent / 'strategy-ab')!r}", 1)
    third = [m.start() for m in re.finditer(r"^\[\[tasks\]\]", text, re.M)][2]
    spec = tmp_path / "strategy-ab.toml"
    spec.write_text(text[:third], encoding="utf-8")
    out = tmp_path / "out"
    with ScriptedServer(scenario("strategy-ab")) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = ask_env(claude)
        run = subprocess.run(
            [*TEAMLEAD, "experiment", "run", str(spec), "--out", str(out),
             "--quiet"],
            env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("ran 4 trial(s), skipped 0 finished, 0 failed"), run.stdout
        # the scripted model's cost is said as what it is, as the report says it
        assert run.stdout.rstrip().endswith(
            " list-price estimate for a scripted model, nothing charged"
        ), run.stdout
        baseline_leads = [
            r.request.system
            for r in server.recorded("lead")
            if "# Delegation" not in r.request.system
        ]
        assert baseline_leads and not any("in ONE message" in s for s in baseline_leads)
    records = read_records(out / "trials.jsonl").records
    assert len(records) == 4
    for r in records:
        assert r.scripted_model is True and r.grader_error is None and r.check is not None
        assert r.parallel is (r.variant == "delegation")
        assert r.passed is (r.check.exit_code == 0)
        if r.variant == "delegation":
            assert r.passed is True
    page = tmp_path / "report.html"
    report = subprocess.run(
        [*TEAMLEAD, "experiment", "report", str(out), "--no-plots",
         "--html", str(page), "--permutations", "500", "--mde-simulations", "100"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "## Verdicts on the primary metric (passed)" in report.stdout
    assert "- 4 of 4 counted trial(s) graded." in report.stdout
    html = page.read_text(encoding="utf-8")
    assert 'id="scripted"' in html
    assert ", seed 7, " in html  # the spec's own (`seed = 7`), as the run recorded it
