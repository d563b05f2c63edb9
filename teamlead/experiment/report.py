"""The experiment report: per-variant summaries, comparisons with the control, per-task rates.

:func:`build_report` turns trial records into a :class:`Report`; :func:`render_markdown`
prints it as tables; :meth:`Report.to_json` is the stable, versioned machine form;
:func:`write_report` writes ``report.md``, ``report.json`` and one PNG per metric.

Which trials count: the latest record of each (variant, task, trial) key; infrastructure
failures (``status="failed"``, ``error_class="infrastructure"``) are left out, since they
say nothing about the prompt. Other failures and partial trials count as they are.

Multiple comparisons: the primary metric (``parallel`` unless the spec names another,
e.g. ``passed`` for coding tasks) has its p-values Holm-adjusted across the non-control
variants; every other comparison (all variants, all secondary metrics together) is
Benjamini-Hochberg adjusted.

Example:
    >>> report = build_report(read_records("out/trials.jsonl").records,
    ...                       control="baseline", seed=7)  # doctest: +SKIP
    >>> print(render_markdown(report))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import UsageError
from .records import TrialRecord, latest_records
from .stats import (
    Scale,
    Verdict,
    adjust_pvalues,
    cluster_bootstrap_mean,
    clustered_wilson,
    mde_from_se,
    mde_rate,
    paired_test,
    verdict,
)

__all__ = [
    "METRICS",
    "REPORT_VERSION",
    "Comparison",
    "MeanSummary",
    "Metric",
    "RateSummary",
    "Report",
    "TaskCell",
    "VariantSummary",
    "build_report",
    "render_markdown",
    "write_report",
]

REPORT_VERSION = 1


@dataclass(frozen=True)
class Metric:
    """A quantity compared between variants.

    ``kind="rate"`` metrics are 0/1 per trial. ``scale="ratio"`` metrics are compared as
    variant / control. ``higher_is_better`` sets the verdict's direction: more delegation
    (rates, Agent calls) and a higher grade are better; less time, cost and tokens are.
    """

    name: str
    kind: Literal["rate", "mean"]
    scale: Scale
    higher_is_better: bool
    value: Callable[[TrialRecord], float | None]
    label: str


METRICS: tuple[Metric, ...] = (
    Metric(
        "parallel",
        "rate",
        "difference",
        True,
        lambda r: float(r.parallel),
        "parallel Agent calls (rate)",
    ),
    Metric(
        "delegated", "rate", "difference", True, lambda r: float(r.delegated), "delegated (rate)"
    ),
    Metric(
        "passed",
        "rate",
        "difference",
        True,
        lambda r: None if r.passed is None else float(r.passed),
        "check passed (rate)",
    ),
    Metric("wall_s", "mean", "ratio", False, lambda r: r.wall_s, "wall time (s)"),
    Metric(
        "agent_calls", "mean", "difference", True, lambda r: float(r.agent_calls), "Agent calls"
    ),
    Metric("cost_usd", "mean", "ratio", False, lambda r: r.cost_usd, "cost (USD)"),
    Metric("tokens", "mean", "ratio", False, lambda r: float(r.tokens), "tokens (input + output)"),
    Metric("grade", "mean", "difference", True, lambda r: r.grade, "grade"),
)
"""Every metric, the default primary one (``parallel``) first. ``grade`` and ``passed``
are analysed only when every counted trial has one."""

PRIMARY_METRIC = "parallel"
_RATE_KEYS = {"parallel": "parallel_rate", "delegated": "delegated_rate", "passed": "passed_rate"}
_OPTIONAL = {"grade": "a grade", "passed": "a check result"}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RateSummary(_Model):
    """A rate with its task-clustered Wilson interval (``n_eff``, ``icc``, ``design_effect``
    say how much clustering widened it)."""

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    n_eff: float
    icc: float
    design_effect: float


class MeanSummary(_Model):
    """Mean, median and the cluster-bootstrap interval of the mean."""

    mean: float | None
    median: float | None
    ci_low: float | None
    ci_high: float | None


class VariantSummary(_Model):
    """One variant's counted trials and their summaries."""

    trials: int
    excluded: int = Field(description="infrastructure failures left out")
    parallel_rate: RateSummary
    delegated_rate: RateSummary
    passed_rate: RateSummary | None = None
    wall_s: MeanSummary
    agent_calls: MeanSummary
    cost_usd: MeanSummary
    tokens: MeanSummary
    grade: MeanSummary | None = None


class Comparison(_Model):
    """A variant against the control on one metric.

    ``diff`` is variant minus control, except on the ratio scale (``wall_s``,
    ``cost_usd``, ``tokens``) where it is variant / control; ``ci_low``/``ci_high`` and
    ``mde`` use the same scale (``mde`` as a factor there, e.g. 1.3 for a 30% change).
    """

    variant: str
    control: str
    metric: str
    scale: Scale
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None
    correction: Literal["holm", "fdr_bh"]
    verdict: Verdict
    mde: float | None
    tasks: int
    exact: bool


class TaskCell(_Model):
    """One task under one variant. ``flaky``: its ``parallel`` outcome (the primary metric)
    was neither always 0 nor always 1 across the trials."""

    trials: int
    parallel_rate: float
    delegated_rate: float
    flaky: bool
    passed_rate: float | None = None


class Report(_Model):
    """Everything :func:`build_report` found. ``samples`` (per-trial values by metric and
    variant) feeds the plots; it is not part of :meth:`to_json`."""

    version: int = REPORT_VERSION
    control: str
    seed: int
    alpha: float
    power: float
    variants: dict[str, VariantSummary]
    comparisons: list[Comparison]
    tasks: dict[str, dict[str, TaskCell]]
    flaky_tasks: list[str]
    samples: dict[str, dict[str, list[float]]]
    notes: list[str] = Field(default_factory=list)
    primary_metric: str = PRIMARY_METRIC

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (``version`` 1); NaN becomes ``null``.

        Example:
            >>> json.dumps(report.to_json())  # doctest: +SKIP
        """
        variants: dict[str, Any] = {}
        for name, summary in self.variants.items():
            entry: dict[str, Any] = {"trials": summary.trials}
            for key in ("parallel_rate", "delegated_rate", "passed_rate"):
                rate: RateSummary | None = getattr(summary, key)
                if rate is None:
                    continue
                entry[key] = {
                    "estimate": rate.estimate,
                    "ci_low": rate.ci_low,
                    "ci_high": rate.ci_high,
                }
            for key in ("wall_s", "agent_calls", "cost_usd", "tokens"):
                mean: MeanSummary = getattr(summary, key)
                entry[key] = mean.model_dump()
            variants[name] = entry
        comparisons = [
            c.model_dump(
                include={
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
                }
            )
            for c in self.comparisons
        ]
        tasks = {
            task: {variant: cell.model_dump(exclude_none=True) for variant, cell in cells.items()}
            for task, cells in self.tasks.items()
        }
        return {
            "version": self.version,
            "variants": variants,
            "comparisons": comparisons,
            "tasks": tasks,
            "flaky_tasks": list(self.flaky_tasks),
            "primary_metric": self.primary_metric,
            "notes": list(self.notes),
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _rng(seed: int, *labels: str) -> np.random.Generator:
    # A stable per-analysis stream: the same seed gives the same numbers whatever order
    # the analyses run in (Python's hash() is salted per process, crc32 is not).
    return np.random.default_rng([seed, zlib.crc32("\x1f".join(labels).encode())])


def _clusters(
    records: Sequence[TrialRecord], tasks: Sequence[str], metric: Metric
) -> list[list[float]]:
    by_task: dict[str, list[float]] = {task: [] for task in tasks}
    for record in records:
        value = metric.value(record)
        if value is not None and record.task in by_task:
            by_task[record.task].append(value)
    return [by_task[task] for task in tasks]


def build_report(
    records: Iterable[TrialRecord],
    *,
    control: str,
    seed: int = 0,
    alpha: float = 0.05,
    power: float = 0.8,
    n_permutations: int = 10_000,
    n_bootstrap: int = 5000,
    primary: str = PRIMARY_METRIC,
) -> Report:
    """Summarise an experiment and compare every variant with ``control``.

    Deterministic for a given ``seed`` whatever the order of ``records``. Fewer
    permutations or bootstrap draws make it faster and coarser, nothing else changes.
    Variants are listed control first, then by name; tasks by id.

    Args:
        records: trial records, e.g. ``read_records(path).records`` (duplicates of a key:
            the last one counts).
        control: the variant the others are compared with.
        seed: seeds every permutation and bootstrap stream.
        alpha: significance level for verdicts and the confidence level ``1 - alpha``.
        power: the power at which the minimum detectable effect (``mde``) is computed.
        n_permutations: relabelings for the permutation p-values (exact below this many).
        n_bootstrap: cluster-bootstrap draws for intervals.
        primary: the primary metric (Holm-adjusted); the rest are BH-adjusted.

    Raises:
        UsageError: no counted trials for the control.

    Example:
        >>> report = build_report(records, control="baseline", seed=7)  # doctest: +SKIP
        >>> [c.verdict for c in report.comparisons if c.metric == "parallel"]  # doctest: +SKIP
        ['better']
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UsageError("alpha and power must lie strictly between 0 and 1")
    if n_permutations < 1 or n_bootstrap < 2:
        raise UsageError("n_permutations must be >= 1 and n_bootstrap >= 2")
    # Sorted so the result depends on the records and the seed, not on their order.
    latest = sorted(latest_records(records), key=lambda r: (r.variant, r.task, r.trial))
    counted = [r for r in latest if not r.infrastructure_failure]
    excluded: dict[str, int] = {}
    for record in latest:
        if record.infrastructure_failure:
            excluded[record.variant] = excluded.get(record.variant, 0) + 1

    names: list[str] = []
    tasks: list[str] = []
    for record in counted:
        if record.variant not in names:
            names.append(record.variant)
        if record.task not in tasks:
            tasks.append(record.task)
    if control not in names:
        raise UsageError(f"control {control!r} has no counted trial records")
    names.remove(control)
    names.insert(0, control)
    by_variant = {name: [r for r in counted if r.variant == name] for name in names}

    notes: list[str] = []
    if excluded:
        notes.append(
            "left out as infrastructure failures: "
            + ", ".join(f"{v} {n}" for v, n in sorted(excluded.items()))
        )
    if primary not in {m.name for m in METRICS}:
        raise UsageError(f"unknown primary metric {primary!r}")
    metrics = list(METRICS)
    for name, what in _OPTIONAL.items():
        metric = next(m for m in METRICS if m.name == name)
        have = sum(metric.value(r) is not None for r in counted)
        if have < len(counted):
            metrics.remove(metric)
            if have:
                notes.append(
                    f"{name} not analysed: only {have} of {len(counted)} trials have {what}"
                )
    if primary not in {m.name for m in metrics}:
        notes.append(f"primary metric {primary} not analysed; Holm applies to {PRIMARY_METRIC}")
        primary = PRIMARY_METRIC
    metrics.sort(key=lambda m: m.name != primary)  # the primary metric's rows come first
    notes += _workspace_notes(counted)

    variants = {
        name: _summarise(
            by_variant[name], tasks, metrics, excluded.get(name, 0), seed, alpha, n_bootstrap
        )
        for name in names
    }
    comparisons = _compare(
        by_variant,
        control,
        tasks,
        metrics,
        variants,
        seed,
        alpha,
        power,
        n_permutations,
        n_bootstrap,
        primary,
    )
    task_cells = _task_cells(by_variant, tasks)
    flaky = [task for task in tasks if any(c.flaky for c in task_cells[task].values())]
    samples = {
        m.name: {
            name: [v for r in by_variant[name] if (v := m.value(r)) is not None] for name in names
        }
        for m in metrics
    }
    return Report(
        control=control,
        seed=seed,
        alpha=alpha,
        power=power,
        variants=variants,
        comparisons=comparisons,
        tasks=task_cells,
        flaky_tasks=flaky,
        samples=samples,
        notes=notes,
        primary_metric=primary,
    )


def _workspace_notes(records: Sequence[TrialRecord]) -> list[str]:
    notes: list[str] = []
    shared = sum(r.workspace == "shared" for r in records)
    if shared:
        notes.append(
            f"{shared} trial(s) ran in one shared directory (workspace = 'shared'): "
            "they could see each other's edits"
        )
    dirty = sum(bool(r.git_dirty) and r.workspace == "worktree" for r in records)
    if dirty:
        notes.append(
            f"{dirty} worktree trial(s) started from a repository with uncommitted changes, "
            "which their worktrees did not have"
        )
    return notes


def _summarise(
    records: Sequence[TrialRecord],
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    excluded: int,
    seed: int,
    alpha: float,
    n_bootstrap: int,
) -> VariantSummary:
    variant = records[0].variant if records else ""
    fields: dict[str, Any] = {"trials": len(records), "excluded": excluded}
    for metric in metrics:
        clusters = _clusters(records, tasks, metric)
        if metric.kind == "rate":
            rate = clustered_wilson(clusters, alpha=alpha)
            fields[_RATE_KEYS[metric.name]] = RateSummary(
                estimate=_finite(rate.estimate),
                ci_low=_finite(rate.ci_low),
                ci_high=_finite(rate.ci_high),
                n_eff=rate.n_eff,
                icc=rate.icc,
                design_effect=rate.design_effect,
            )
        else:
            mean = cluster_bootstrap_mean(
                clusters,
                rng=_rng(seed, "summary", variant, metric.name),
                alpha=alpha,
                n_bootstrap=n_bootstrap,
            )
            fields[metric.name] = MeanSummary(
                mean=_finite(mean.mean),
                median=_finite(mean.median),
                ci_low=_finite(mean.ci_low),
                ci_high=_finite(mean.ci_high),
            )
    return VariantSummary(**fields)


def _compare(
    by_variant: dict[str, list[TrialRecord]],
    control: str,
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    summaries: dict[str, VariantSummary],
    seed: int,
    alpha: float,
    power: float,
    n_permutations: int,
    n_bootstrap: int,
    primary: str,
) -> list[Comparison]:
    raw: list[dict[str, Any]] = []
    for name in by_variant:
        if name == control:
            continue
        for metric in metrics:
            variant_clusters = _clusters(by_variant[name], tasks, metric)
            control_clusters = _clusters(by_variant[control], tasks, metric)
            result = paired_test(
                variant_clusters,
                control_clusters,
                scale=metric.scale,
                rng=_rng(seed, "compare", name, metric.name),
                n_permutations=n_permutations,
                n_bootstrap=n_bootstrap,
                alpha=alpha,
            )
            if metric.kind == "rate":
                key = _RATE_KEYS[metric.name]
                control_rate: RateSummary = getattr(summaries[control], key)
                variant_rate: RateSummary = getattr(summaries[name], key)
                mde = (
                    mde_rate(
                        control_rate.estimate,
                        variant_rate.n_eff,
                        control_rate.n_eff,
                        alpha=alpha,
                        power=power,
                    )
                    if control_rate.estimate is not None and control_rate.n_eff > 0
                    else math.nan
                )
            else:
                mde = mde_from_se(result.se, scale=metric.scale, alpha=alpha, power=power)
            raw.append({"variant": name, "metric": metric, "result": result, "mde": mde})

    first = [i for i, c in enumerate(raw) if c["metric"].name == primary]
    secondary = [i for i, c in enumerate(raw) if c["metric"].name != primary]
    adjusted = [math.nan] * len(raw)
    groups: tuple[tuple[list[int], Literal["holm", "fdr_bh"]], ...] = (
        (first, "holm"),
        (secondary, "fdr_bh"),
    )
    for group, method in groups:
        values = adjust_pvalues([raw[i]["result"].p_value for i in group], method)
        for i, value in zip(group, values, strict=True):
            adjusted[i] = value

    comparisons: list[Comparison] = []
    for i, entry in enumerate(raw):
        metric = entry["metric"]
        result = entry["result"]
        comparisons.append(
            Comparison(
                variant=entry["variant"],
                control=control,
                metric=metric.name,
                scale=metric.scale,
                diff=_finite(result.effect),
                ci_low=_finite(result.ci_low),
                ci_high=_finite(result.ci_high),
                p_value=_finite(result.p_value),
                p_adjusted=_finite(adjusted[i]),
                correction="holm" if metric.name == primary else "fdr_bh",
                verdict=verdict(
                    result.effect,
                    result.ci_low,
                    result.ci_high,
                    adjusted[i],
                    scale=metric.scale,
                    higher_is_better=metric.higher_is_better,
                    alpha=alpha,
                ),
                mde=_finite(entry["mde"]),
                tasks=result.tasks,
                exact=result.exact,
            )
        )
    return comparisons


def _task_cells(
    by_variant: dict[str, list[TrialRecord]], tasks: Sequence[str]
) -> dict[str, dict[str, TaskCell]]:
    cells: dict[str, dict[str, TaskCell]] = {task: {} for task in tasks}
    for name, records in by_variant.items():
        for task in tasks:
            trials = [r for r in records if r.task == task]
            if not trials:
                continue
            parallel = [r.parallel for r in trials]
            passed = [r.passed for r in trials if r.passed is not None]
            cells[task][name] = TaskCell(
                trials=len(trials),
                parallel_rate=sum(parallel) / len(trials),
                delegated_rate=sum(r.delegated for r in trials) / len(trials),
                flaky=len(set(parallel)) > 1,
                passed_rate=sum(passed) / len(passed) if len(passed) == len(trials) else None,
            )
    return cells


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 10**-digits:
        return f"{value:.{digits}g}"
    if abs(value) >= 100:
        digits = 1
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".")


def _fmt_p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "<0.0001" if value < 1e-4 else _fmt(value, 4)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _interval(low: float | None, high: float | None) -> str:
    return f"[{_fmt(low)}, {_fmt(high)}]"


def render_markdown(report: Report) -> str:
    """The report as Markdown tables, readable in a terminal as is.

    Example:
        >>> print(render_markdown(report))  # doctest: +SKIP
    """
    pct = 100 * (1 - report.alpha)
    confidence = f"{pct:.0f}%" if pct.is_integer() else f"{pct:g}%"
    out = [f"# Experiment report (control: {report.control})", ""]
    out += ["## Variants", ""]
    rows = []
    with_passed = any(s.passed_rate is not None for s in report.variants.values())
    for name, s in report.variants.items():
        row = [name, str(s.trials)]
        rates: list[RateSummary | None] = [s.parallel_rate, s.delegated_rate]
        if with_passed:
            rates.insert(0, s.passed_rate)
        for rate in rates:
            if rate is None:
                row.append("n/a")
                continue
            row.append(f"{_fmt(rate.estimate)} {_interval(rate.ci_low, rate.ci_high)}")
        for mean in (s.wall_s, s.agent_calls, s.cost_usd, s.tokens):
            row.append(
                f"{_fmt(mean.mean)} (median {_fmt(mean.median)}) "
                f"{_interval(mean.ci_low, mean.ci_high)}"
            )
        rows.append(row)
    out += _table(
        [
            "variant",
            "trials",
            *(["passed rate"] if with_passed else []),
            "parallel rate",
            "delegated rate",
            "wall s",
            "Agent calls",
            "cost USD",
            "tokens",
        ],
        rows,
    )
    out += [
        "",
        f"Rates: task-clustered Wilson {confidence} CI. Means: mean (median) "
        f"[cluster-bootstrap {confidence} CI].",
        "",
        "## Comparisons with the control",
        "",
    ]
    rows = []
    for c in report.comparisons:
        unit = "x" if c.scale == "ratio" else ""
        effect = "n/a" if c.diff is None else f"{_fmt(c.diff)}{unit}"
        mde = "n/a" if c.mde is None else f"{_fmt(c.mde)}{unit}"
        rows.append(
            [
                c.variant,
                c.metric,
                effect,
                _interval(c.ci_low, c.ci_high),
                _fmt_p(c.p_value),
                f"{_fmt_p(c.p_adjusted)} ({'Holm' if c.correction == 'holm' else 'BH'})",
                mde,
                f"**{c.verdict}**",
            ]
        )
    out += _table(
        ["variant", "metric", "effect", f"{confidence} CI", "p", "p adjusted", "MDE", "verdict"],
        rows,
    )
    out += [
        "",
        f"Primary metric: {report.primary_metric} (Holm); the rest: BH. "
        "Effect: variant - control, or variant / control where marked x. p: within-task "
        "permutation test. MDE: smallest effect detectable "
        f"at alpha {report.alpha:g} with power {report.power:g}.",
        "",
        "## Per task",
        "",
    ]
    names = list(report.variants)
    rows = []
    for task, cells in report.tasks.items():
        row = [task]
        for name in names:
            cell = cells.get(name)
            passed = (
                f"passed {_fmt(cell.passed_rate, 2)}, "
                if cell is not None and cell.passed_rate is not None
                else ""
            )
            row.append(
                "-"
                if cell is None
                else f"{passed}{_fmt(cell.parallel_rate, 2)} / {_fmt(cell.delegated_rate, 2)} "
                f"(n={cell.trials}){' flaky' if cell.flaky else ''}"
            )
        rows.append(row)
    out += _table(["task", *names], rows)
    out += ["", "Cells: [passed rate,] parallel rate / delegated rate (trials)."]
    out += [""]
    if report.flaky_tasks:
        out.append(
            "Flaky tasks (parallel both 0 and 1 within a variant): " + ", ".join(report.flaky_tasks)
        )
    else:
        out.append("Flaky tasks: none.")
    if report.notes:
        out += ["", "## Notes", ""] + [f"- {note}" for note in report.notes]
    return "\n".join(out) + "\n"


def write_report(directory: str | Path, report: Report, *, plots: bool = True) -> list[Path]:
    """Write ``report.md``, ``report.json`` and (with ``plots``) one PNG per metric.

    Raises:
        UsageError: ``plots`` is set but matplotlib is missing (install teamlead[plots]),
            checked before anything is written.

    Example:
        >>> write_report("out/report", report)  # doctest: +SKIP
        [PosixPath('out/report/report.md'), PosixPath('out/report/report.json'), ...]
    """
    from .plots import require_matplotlib, write_plots

    if plots:
        require_matplotlib()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    markdown = folder / "report.md"
    markdown.write_text(render_markdown(report), encoding="utf-8")
    data = folder / "report.json"
    data.write_text(
        json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    written = [markdown, data]
    if plots:
        written += write_plots(folder, report)
    return written
