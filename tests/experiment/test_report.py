"""The report: JSON schema, Markdown tables, PNG plots, which trials count."""

from __future__ import annotations

import ast
import json
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from teamlead.errors import UsageError
from teamlead.experiment import (
    TrialRecord,
    build_report,
    read_records,
    render_json,
    render_markdown,
    synthetic_records,
    write_report,
)
from teamlead.experiment import __all__ as experiment_all
from teamlead.experiment.reporting.report import Report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
METRICS = ("parallel", "delegated", "wall_s", "agent_calls", "cost_usd", "tokens")


@pytest.fixture(scope="module")
def records() -> list[TrialRecord]:
    return synthetic_records(
        {"baseline": [0.2] * 6, "delegation": [0.85] * 6, "terse": [0.3] * 6},
        trials=4,
        rng=np.random.default_rng(21),
    )


@pytest.fixture(scope="module")
def report(records: list[TrialRecord]) -> Report:
    # 100 simulated experiments per MDE (the least build_report takes) instead of the
    # default 400: the MDE is still simulated and shown, at a quarter of the cost.
    return build_report(
        records,
        control="baseline",
        seed=5,
        n_permutations=2000,
        n_bootstrap=1000,
        mde_simulations=100,
    )


def test_json_has_exactly_the_documented_keys(report: Report) -> None:
    data = report.to_json()
    assert set(data) == {
        "version",
        "control",
        "alpha",
        "power",
        "seed",
        "rule",
        "variants",
        "comparisons",
        "tasks",
        "flaky_tasks",
        "primary_metric",
        "notes",
        "methods",
        "trials",
        "scripted_trials",
        "grading",
    }
    assert data["primary_metric"] == "parallel"
    assert data["version"] == 4
    assert any("geometric mean" in line for line in data["methods"])
    assert list(data["variants"]) == ["baseline", "delegation", "terse"]
    for summary in data["variants"].values():
        assert set(summary) == {
            "trials",
            "excluded",
            "not_compared",
            "parallel_rate",
            "delegated_rate",
            "wall_s",
            "agent_calls",
            "cost_usd",
            "tokens",
            "workflow_agents",
        }
        assert summary["workflow_agents"] is None  # no trial ran a workflow
        assert summary["trials"] == 24
        for rate in ("parallel_rate", "delegated_rate"):
            assert set(summary[rate]) == {
                "estimate",
                "ci_low",
                "ci_high",
                "n",
                "n_eff",
                "icc",
                "design_effect",
                "note",
            }
            assert summary[rate]["ci_low"] <= summary[rate]["estimate"] <= summary[rate]["ci_high"]
        for mean in ("wall_s", "agent_calls", "cost_usd", "tokens"):
            assert set(summary[mean]) == {
                "mean",
                "median",
                "ci_low",
                "ci_high",
                "geo_mean",
                "interval_of",
                "note",
            }
        for mean in ("wall_s", "cost_usd", "tokens"):
            assert summary[mean]["interval_of"] == "geometric mean"
            assert summary[mean]["ci_low"] <= summary[mean]["geo_mean"] <= summary[mean]["ci_high"]
        assert summary["agent_calls"]["interval_of"] == "mean"
    assert len(data["comparisons"]) == 2 * 6
    for comparison in data["comparisons"]:
        assert set(comparison) == {
            "variant",
            "control",
            "metric",
            "diff",
            "ci_low",
            "ci_high",
            "p_value",
            "p_adjusted",
            "verdict",
            "mde",
            "scale",
            "correction",
            "tasks",
            "n_tasks",
            "exact",
            "variant_value",
            "control_value",
            "weighting",
            "mde_note",
            "explanation",
            "estimand",
            "mde_direction",
            "mde_rise",
            "mde_drop",
            "mde_text",
            "reasons",
        }
        assert comparison["control"] == "baseline"
        if comparison["scale"] == "ratio":
            assert comparison["estimand"] == "ratio of geometric means"
    # delegation runs agents in parallel far more often (0.85 against 0.2), so it calls
    # more agents at a higher cost; terse (0.3) is too close to tell apart in 24 trials
    verdicts = {(c["variant"], c["metric"]): c["verdict"] for c in data["comparisons"]}
    assert verdicts == {
        ("delegation", "parallel"): "better",
        ("delegation", "delegated"): "better",
        ("delegation", "wall_s"): "inconclusive",
        ("delegation", "agent_calls"): "better",
        ("delegation", "cost_usd"): "worse",
        ("delegation", "tokens"): "worse",
        **{("terse", metric): "inconclusive" for metric in METRICS},
    }
    assert set(data["tasks"]) == {f"task-{i:02d}" for i in range(6)}
    cell = data["tasks"]["task-00"]["delegation"]
    assert set(cell) == {"trials", "parallel_rate", "delegated_rate", "flaky"}
    assert set(data["flaky_tasks"]) <= set(data["tasks"])
    # Strict JSON: no NaN sneaks through.
    json.dumps(data, allow_nan=False)


def test_flaky_tasks_are_the_ones_with_mixed_parallel_outcomes(report: Report) -> None:
    expected = [
        task
        for task, cells in report.tasks.items()
        if any(0 < cell.parallel_rate < 1 for cell in cells.values())
    ]
    assert report.flaky_tasks == expected
    assert expected  # rates of 0.2 and 0.3 over 4 trials give mixed tasks


def test_markdown_has_the_tables(report: Report) -> None:
    text = render_markdown(report)
    assert "| variant | trials | parallel rate | delegated rate | wall s |" in text
    assert (
        "| variant | metric | variant vs control | effect | 95% CI | p | p adjusted | MDE | "
        "tasks | verdict |" in text
    )
    assert "| variant | rate | trials | n_eff | ICC | design effect |" in text
    assert "Verdict rule:" in text and "Compared tasks:" in text
    assert "| task | baseline | delegation | terse |" in text
    assert "| delegation | parallel |" in text
    assert "**better**" in text
    assert "(Holm)" in text and "(BH)" in text
    for task in report.tasks:
        assert f"| {task} |" in text


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_write_report_writes_markdown_json_and_valid_pngs(report: Report, tmp_path: Path) -> None:
    written = write_report(tmp_path / "out", report)
    names = {p.name for p in written}
    assert {"report.md", "report.json"} <= names
    assert {
        "parallel.png",
        "delegated.png",
        "wall_s.png",
        "agent_calls.png",
        "cost_usd.png",
        "tokens.png",
    } <= names
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report.to_json()
    assert (tmp_path / "out" / "report.md").read_text() == render_markdown(report)
    assert (tmp_path / "out" / "report.json").read_text() == render_json(report) + "\n"
    assert render_json(report) == json.dumps(report.to_json(), indent=2)
    for path in written:
        if path.suffix == ".png":
            width, height = _png_size(path)
            assert width > 200 and height > 200
    import matplotlib.image

    pixels = matplotlib.image.imread(str(tmp_path / "out" / "parallel.png"))
    assert pixels.shape[0] > 200 and pixels.std() > 0  # decodes, and is not blank


def test_without_matplotlib_plots_ask_for_the_extra(
    report: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(UsageError, match=r"\.\[plots\]"):
        write_report(tmp_path / "out", report)
    assert not (tmp_path / "out").exists()  # nothing half-written
    written = write_report(tmp_path / "out", report, plots=False)
    assert [p.name for p in written] == ["report.md", "report.json"]


def test_infrastructure_failures_are_left_out_and_noted(records: list[TrialRecord]) -> None:
    broken = records[0].model_copy(
        update={"trial": 99, "status": "failed", "error_class": "infrastructure"}
    )
    model_failure = records[0].model_copy(
        update={"trial": 98, "status": "failed", "error_class": "model"}
    )
    report = build_report(
        [*records, broken, model_failure],
        control="baseline",
        n_permutations=200,
        n_bootstrap=200,
        mde_simulations=0,  # which trials count does not depend on the MDE
    )
    assert report.variants["baseline"].trials == 25
    assert report.variants["baseline"].excluded == 1
    assert any("infrastructure" in note for note in report.notes)
    assert "infrastructure" in render_markdown(report)


def test_grade_is_compared_only_when_every_trial_has_one(records: list[TrialRecord]) -> None:
    rng = np.random.default_rng(0)
    graded = [
        r.model_copy(update={"grade": float(rng.normal(7 if r.variant == "delegation" else 5, 1))})
        for r in records
    ]
    # The MDE is not what this test is about: skipping its simulation keeps it fast.
    quick: dict[str, Any] = {"n_permutations": 500, "n_bootstrap": 500, "mde_simulations": 0}
    report = build_report(graded, control="baseline", **quick)
    grade = [c for c in report.comparisons if c.metric == "grade"]
    assert [c.variant for c in grade] == ["delegation", "terse"]
    assert grade[0].verdict == "better"
    assert report.variants["delegation"].grade is not None
    partial = build_report([*graded[:-1], records[-1]], control="baseline", **quick)
    assert not [c for c in partial.comparisons if c.metric == "grade"]
    assert any("grade not analysed" in note for note in partial.notes)


def test_a_control_without_trials_is_a_usage_error(records: list[TrialRecord]) -> None:
    with pytest.raises(UsageError, match="control 'nobody' has no counted trial records"):
        build_report(records, control="nobody")


def test_report_from_a_trials_file(records: list[TrialRecord], tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    path.write_text("".join(r.to_json_line() + "\n" for r in records) + "{torn", encoding="utf-8")
    result = read_records(path)
    assert len(result.warnings) == 1
    # The MDE stays in the comparison (100 simulations, the least there is), so the
    # records read back must reproduce it too.
    how: dict[str, Any] = {"seed": 5, "n_permutations": 500, "mde_simulations": 100}
    from_file = build_report(result.records, control="baseline", **how)
    assert from_file.to_json() == build_report(records, control="baseline", **how).to_json()
    assert any(c.mde is not None for c in from_file.comparisons)


def test_exported_names_exist() -> None:
    import teamlead.experiment as experiment

    for name in experiment_all:
        assert hasattr(experiment, name), name


# Each experiment module may import only modules earlier in this order (lazy and
# TYPE_CHECKING imports included): the stages specs -> running, stats -> reporting, and
# inside a stage its own chain (intervals -> estimates -> power -> ... -> comparisons),
# never back.
_CHAIN = [
    *("specs.records", "specs.steps", "specs._toml_lines", "specs.spec", "specs.synthetic"),
    *("running.trial_commands", "running.outdir", "running.workspace", "running.trial"),
    *("running.grader", "running.agent_counts", "running.runner", "running.ray_cluster"),
    *("running.ray_account", "running.ray_backend"),
    *("stats.intervals", "stats.estimates", "stats.rates", "stats.power", "stats.verdicts"),
    *("stats.explain",),
    *("stats.metrics", "stats.comparisons"),
    *("reporting.versions", "reporting.report", "reporting.headline", "reporting.svg"),
    *("reporting.plots", "reporting.render", "reporting.html"),
]


def test_the_experiment_modules_import_one_way() -> None:
    import teamlead.experiment as experiment

    folder = Path(experiment.__file__).parent
    modules = sorted(
        f"{p.parent.name}.{p.stem}" for p in folder.glob("*/*.py") if p.stem != "__init__"
    )
    assert modules == sorted(_CHAIN)
    assert sorted(p.name for p in folder.glob("*.py")) == ["__init__.py"]
    backwards = []
    for name in _CHAIN:
        stage = name.split(".")[0]
        tree = ast.parse((folder / f"{name.replace('.', '/')}.py").read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.level == 1:
                target = f"{stage}.{node.module.split('.')[0]}"
            elif node.level == 2:
                target = ".".join(node.module.split(".")[:2])
            else:
                continue
            if _CHAIN.index(target) >= _CHAIN.index(name):
                backwards.append(f"{name} imports {target}")
    assert backwards == []
