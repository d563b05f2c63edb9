"""The experiment runner's trial order, and the ``experiment`` command's errors and report.

The runner on the real CLI, with scripted models, is in tests/cli/test_experiment_runner.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from teamlead._cli import main
from teamlead.experiment.running.runner import trial_order, trial_session_id
from teamlead.experiment.specs.spec import parse_spec

from ..records import ab_spec


def test_trial_order_is_seeded_interleaved_and_complete() -> None:
    spec = parse_spec(ab_spec(3, 2))
    order = trial_order(spec)
    assert order == trial_order(spec)
    assert len(order) == len(set(order)) == spec.total_trials
    assert [k.trial for k in order[:6]] == [0] * 6  # rounds stay together: balanced when cut short
    assert order[:6] != sorted(order[:6])
    assert (
        trial_session_id(7, order[0])
        == trial_session_id(7, order[0])
        != trial_session_id(8, order[0])
    )


def test_experiment_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.toml"
    bad.write_text(ab_spec(1, 1).replace('control = "baseline"', 'control = "nobody"'))
    result = runner.invoke(main, ["experiment", "run", str(bad), "--out", str(tmp_path / "o")])
    assert (
        result.exit_code == 2
        and "control" in result.output
        and len(result.output.strip().splitlines()) == 1
    )
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(
        ab_spec(1, 1).replace('strategy = "delegation"', 'strategy = "no-such-prompt"')
    )
    result = runner.invoke(main, ["experiment", "run", str(unknown), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no-such-prompt" in result.output
    zero = tmp_path / "zero.toml"
    zero.write_text(ab_spec(1, 1).replace("trials = 1", "trials = 0"))
    result = runner.invoke(main, ["experiment", "run", str(zero), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "trials" in result.output
    result = runner.invoke(main, ["experiment", "report", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no trials.jsonl" in result.output
    good = tmp_path / "good.toml"
    good.write_text(ab_spec(1, 1))
    args = ["experiment", "run", str(good), "--out", str(tmp_path / "o")]
    env = {"ANTHROPIC_API_KEY": "sk-test-only-not-real"}
    result = runner.invoke(main, [*args, "--session-store", "postgres://db/1"], env=env)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "a session store is redis://" in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_experiment_report_cli_json_and_markdown(tmp_path: Path) -> None:
    import numpy as np

    from teamlead.experiment.specs.records import append_record
    from teamlead.experiment.specs.synthetic import synthetic_records

    # The command's wiring is under test, not the statistics (tests/experiment/test_stats.py):
    # fewer relabelings and MDE simulations, a tenth of the time.
    quick = ["--permutations", "500", "--mde-simulations", "100"]

    out = tmp_path / "out"
    out.mkdir()
    rng = np.random.default_rng(5)
    for record in synthetic_records(
        {"baseline": [0.2] * 6, "delegation": [0.9] * 6}, trials=4, rng=rng
    ):
        append_record(out / "trials.jsonl", record)
    (out / "experiment.json").write_text(json.dumps({"version": 1, "control": "baseline"}))
    runner = CliRunner()
    as_json = runner.invoke(
        main, ["experiment", "report", str(out), "--json", "--no-plots", *quick]
    )
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert set(data["variants"]) == {"baseline", "delegation"}
    assert "100 experiments" in json.dumps(data)  # the sizes asked for reached the statistics
    assert {
        "variant",
        "control",
        "metric",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "verdict",
    } <= set(data["comparisons"][0])
    env = {"TEAMLEAD_JSON": "1", "TEAMLEAD_NO_PLOTS": "1", "TEAMLEAD_SEED": "0"}
    env |= {"TEAMLEAD_PERMUTATIONS": "500", "TEAMLEAD_MDE_SIMULATIONS": "100"}
    from_env = runner.invoke(main, ["experiment", "report", str(out)], env=env)
    assert from_env.exit_code == 0 and json.loads(from_env.output) == data
    # TEAMLEAD_OUT names `experiment run`'s directory too: here it is refused, not overwritten
    to_a_dir = runner.invoke(
        main, ["experiment", "report", str(out), *quick], env={"TEAMLEAD_OUT": str(out)}
    )
    assert to_a_dir.exit_code == 2 and "'--out'" in to_a_dir.output
    assert "is a directory" in to_a_dir.output and (out / "trials.jsonl").exists()
    md = runner.invoke(
        main, ["experiment", "report", str(out), "--out", str(tmp_path / "r.md"), *quick]
    )
    assert md.exit_code == 0 and "| delegation | parallel |" in md.output
    assert (tmp_path / "r.md").read_text().startswith("# Experiment report")
    assert list(out.glob("*.png"))
