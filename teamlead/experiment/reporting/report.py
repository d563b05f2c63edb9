"""The experiment report: per-variant summaries, comparisons with the control, per-task rates.

:func:`build_report` turns trial records into a :class:`Report` with the estimates of
:mod:`~teamlead.experiment.stats.estimates` and the verdicts of
:mod:`~teamlead.experiment.stats.verdicts`; :meth:`Report.to_json` is the stable, versioned
machine form. Printing and writing it (Markdown, JSON, plots) is
:mod:`teamlead.experiment.reporting.render`, which builds on this module.

Which trials count: the latest record of each (variant, task, trial) key; infrastructure
failures (``status="failed"``, ``error_class="infrastructure"``) are left out, since they
say nothing about the prompt. Other failures and partial trials count as they are.

How variants are compared with the control (tests, MDE, multiple-comparison adjustment,
verdicts) is :mod:`teamlead.experiment.stats.comparisons`; which metrics are analysed and which
is primary (Holm-adjusted: ``parallel`` unless the spec names another, e.g. ``passed``) is
:func:`~teamlead.experiment.stats.metrics.analysed_metrics`.
:func:`~teamlead.experiment.reporting.versions.upgrade_report_json` (re-exported here) reads
a ``report.json`` of any version.

Example:
    >>> report = build_report(read_records("out/trials.jsonl").records,
    ...                       control="baseline", seed=7)  # doctest: +SKIP
    >>> report.comparisons[0].verdict  # doctest: +SKIP
    'better'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ...errors import UsageError
from ..specs.records import TrialRecord, isolation_notes, latest_records
from ..stats.comparisons import NOT_COMPARED, AnalysisSettings, Comparison, compare_variants, finite
from ..stats.estimates import clustered_mean
from ..stats.explain import confidence_label, rule_text, zero_width
from ..stats.metrics import (
    METRICS,
    PRIMARY_METRIC,
    RATE_KEYS,
    Metric,
    analysed_metrics,
    metric_clusters,
)
from ..stats.rates import clustered_wilson
from .versions import REPORT_VERSION, upgrade_report_json

__all__ = [
    "REPORT_VERSION",
    "Comparison",
    "GradingSummary",
    "MeanSummary",
    "RateSummary",
    "Report",
    "TaskCell",
    "VariantSummary",
    "WorkflowAgentsSummary",
    "build_report",
    "upgrade_report_json",
    "why_lines",
]

METHODS = (
    "Rates: pooled over trials, with a Wilson interval at the effective sample size; the "
    "design effect uses the ANOVA intra-class correlation shrunk towards 0.2 (worth 4 "
    "tasks), because from few sparse tasks the raw estimate is often 0 and the interval "
    "then covered about 92% near rates of 0.1 or 0.9.",
    "Times, costs and tokens are skewed: their interval is that of the geometric mean (a "
    "cluster-robust t-interval of the logarithms), and they are compared as a ratio of "
    "geometric means (a t-interval over tasks of the mean log ratios). In simulation with "
    "lognormal spread up to 1.5 and tasks of widely varying length it covers 95%, where the "
    "arithmetic mean's interval covered 74-93% and a cluster bootstrap-t 84-94%; a ratio "
    "that is the same on every task is estimated as exactly that. With a 0 among the values "
    "the arithmetic mean (and the ratio of means, Fieller's interval) is used, with a note.",
    "MDE: simulated with this design's tasks and trials, for a rise and for a drop "
    "separately, with the control's rates drawn from what its trials make plausible.",
)
"""How the report estimates, and why; printed in every format."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RateSummary(_Model):
    """A rate with its task-clustered Wilson interval (``n_eff``, ``icc``, ``design_effect``
    say how much clustering widened it). ``note``: why the interval is n/a."""

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    n: int = 0
    n_eff: float | None
    icc: float | None
    design_effect: float | None
    note: str | None = None


class MeanSummary(_Model):
    """Mean, median, geometric mean, and the cluster-robust t-interval of ``interval_of``
    (the geometric mean for times, costs and tokens). ``note``: why the interval is n/a
    or is not the geometric mean's."""

    mean: float | None
    median: float | None
    ci_low: float | None
    ci_high: float | None
    geo_mean: float | None = None
    interval_of: str = "mean"
    note: str | None = None


class WorkflowAgentsSummary(_Model):
    """One variant's workflow agents over its counted trials (see
    :class:`~teamlead.experiment.specs.records.TrialRecord`): the trials that ran one, the
    agents started, the most at once in one trial, those lost (in error or never
    finished), those replayed from the journal, and the most agents of every kind at once
    in one trial."""

    trials: int
    started: int
    most_at_once: int
    lost: int
    cached: int
    agents_at_once: int


class VariantSummary(_Model):
    """One variant's counted trials and their summaries. ``not_compared``: why the variant
    has no comparison (every trial failed as infrastructure). ``workflow_agents``: ``None``
    when no trial ran a workflow agent."""

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
    not_compared: str | None = None
    workflow_agents: WorkflowAgentsSummary | None = None


class TaskCell(_Model):
    """One task under one variant. ``flaky``: its ``parallel`` outcome was neither always 0
    nor always 1 across the trials. ``passed_rate``: None unless every trial ran a check."""

    trials: int
    parallel_rate: float
    delegated_rate: float
    flaky: bool
    passed_rate: float | None = None


class GradingSummary(_Model):
    """How many counted trials the grader scored, and why the others have no grade.

    ``not_graded`` maps each reason (a trial failed, no final answer, the grader's call
    failed, its reply had no score) to the number of trials it applies to, most first.
    """

    trials: int
    graded: int
    not_graded: dict[str, int] = Field(default_factory=dict)


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
    methods: list[str] = Field(default_factory=lambda: list(METHODS))
    grading: GradingSummary | None = None
    trials: int = 0
    scripted_trials: int = 0

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (``version`` is :data:`REPORT_VERSION`); NaN is ``null``.

        Beside the statistics' keys: ``trials`` (counted), ``scripted_trials`` (answered by
        teamlead's scripted model) and ``grading`` (``trials``, ``graded``, ``not_graded``
        reasons with counts; ``null`` without a grader). Readers of older files get
        ``None`` for them from :func:`upgrade_report_json`.

        Example:
            >>> json.dumps(report.to_json())  # doctest: +SKIP
        """
        variants: dict[str, Any] = {}
        for name, summary in self.variants.items():
            entry: dict[str, Any] = {
                "trials": summary.trials,
                "excluded": summary.excluded,
                "not_compared": summary.not_compared,
            }
            for key in RATE_KEYS.values():
                rate: RateSummary | None = getattr(summary, key)
                if rate is not None:
                    entry[key] = rate.model_dump()
            for key in ("wall_s", "agent_calls", "cost_usd", "tokens"):
                mean: MeanSummary = getattr(summary, key)
                entry[key] = mean.model_dump()
            workflows = summary.workflow_agents
            entry["workflow_agents"] = workflows.model_dump() if workflows is not None else None
            variants[name] = entry
        comparisons = []
        for c in self.comparisons:
            data = c.model_dump(exclude={"task_ids", "tasks"})
            data["tasks"] = list(c.task_ids)
            data["n_tasks"] = c.tasks
            comparisons.append(data)
        tasks = {
            task: {variant: cell.model_dump(exclude_none=True) for variant, cell in cells.items()}
            for task, cells in self.tasks.items()
        }
        return {
            "version": self.version,
            "control": self.control,
            "alpha": self.alpha,
            "power": self.power,
            "seed": self.seed,
            "rule": rule_text(self.alpha, confidence_label(self.alpha)),
            "variants": variants,
            "comparisons": comparisons,
            "tasks": tasks,
            "flaky_tasks": list(self.flaky_tasks),
            "notes": list(self.notes),
            "primary_metric": self.primary_metric,
            "methods": list(self.methods),
            "trials": self.trials,
            "scripted_trials": self.scripted_trials,
            "grading": None if self.grading is None else self.grading.model_dump(),
        }


_FIELD_NAMES = {
    "diff": "effect",
    "ci": "interval",
    "p_value": "p",
    "p_adjusted": "p adjusted",
    "mde": "MDE",
}


def why_lines(report: Report) -> list[tuple[str, str]]:
    """``(subject, line)`` for every n/a figure and every inconclusive verdict with a reason.

    Every format (Markdown, HTML; JSON carries the same strings in ``note``, ``reasons``
    and ``explanation``) prints these, so no "n/a" and no contradiction goes unexplained.

    Example:
        >>> why_lines(report)[0]  # doctest: +SKIP
        ('b', 'not compared: all trials failed as infrastructure')
    """
    lines: list[tuple[str, str]] = []
    for name, summary in report.variants.items():
        if summary.not_compared:
            lines.append((name, summary.not_compared))
            continue
        for metric in METRICS:
            key = RATE_KEYS.get(metric.name, metric.name)
            value = getattr(summary, key, None)
            if isinstance(value, (RateSummary, MeanSummary)) and value.note:
                lines.append((f"{name} {metric.name}", value.note))
    for c in report.comparisons:
        if c.verdict == "not compared":
            continue
        subject = f"{c.variant} vs {c.control}, {c.metric}"
        if c.explanation:
            lines.append((subject, c.explanation))
        by_reason: dict[str, list[str]] = {}
        for field, reason in c.reasons.items():
            by_reason.setdefault(reason, []).append(_FIELD_NAMES.get(field, field))
        for reason, fields in by_reason.items():
            lines.append((subject, f"{', '.join(fields)} n/a: {reason}"))
        if c.mde is not None and c.mde_text and "can be detected" in c.mde_text:
            lines.append((subject, f"MDE: {c.mde_text}"))
    return lines


def build_report(
    records: Iterable[TrialRecord],
    *,
    control: str,
    seed: int = 0,
    alpha: float = 0.05,
    power: float = 0.8,
    n_permutations: int = 10_000,
    n_bootstrap: int = 5000,
    mde_simulations: int = 400,
    primary: str = PRIMARY_METRIC,
) -> Report:
    """Summarise an experiment and compare every variant with ``control``.

    Deterministic for a given ``seed`` whatever the order of ``records``. Fewer
    permutations or bootstrap draws make it faster and coarser, nothing else changes.
    Variants are listed control first, then by name; tasks by id. A variant whose trials
    all failed as infrastructure is listed with no counted trial and ``not compared``.

    Args:
        records: trial records, e.g. ``read_records(path).records`` (duplicates of a key:
            the last one counts).
        control: the variant the others are compared with.
        seed: seeds every permutation and bootstrap stream.
        alpha: significance level for verdicts and the confidence level ``1 - alpha``.
        power: the power at which the minimum detectable effect (``mde``) is computed.
        n_permutations: relabelings for the permutation p-values (exact below this many).
        n_bootstrap: unused since version 2 (intervals are t-intervals); accepted so
            older callers keep working.
        mde_simulations: simulated experiments per MDE (fewer: faster, coarser); 0 skips
            the MDE (``mde`` is ``None``), for simulation studies of the verdicts alone.
        primary: the primary metric (Holm-adjusted); the rest are BH-adjusted.

    Raises:
        UsageError: no counted trials for the control, or an unknown ``primary``.

    Example:
        >>> report = build_report(records, control="baseline", seed=7)  # doctest: +SKIP
        >>> [c.verdict for c in report.comparisons if c.metric == "parallel"]  # doctest: +SKIP
        ['better']
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UsageError("alpha and power must lie strictly between 0 and 1")
    if (
        n_permutations < 1
        or n_bootstrap < 2
        or not (mde_simulations == 0 or mde_simulations >= 100)
    ):
        raise UsageError(
            "n_permutations must be >= 1, n_bootstrap >= 2, and mde_simulations 0 or >= 100"
        )
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
        failed = (
            f" (all {excluded[control]} failed as infrastructure)" if control in excluded else ""
        )
        raise UsageError(f"control {control!r} has no counted trial records{failed}")
    names += sorted(name for name in excluded if name not in names)  # all infrastructure
    names.remove(control)
    names.insert(0, control)
    by_variant = {name: [r for r in counted if r.variant == name] for name in names}

    notes: list[str] = []
    if excluded:
        notes.append(
            "left out as infrastructure failures: "
            + ", ".join(f"{v} {n}" for v, n in sorted(excluded.items()))
        )
    by_model = [r for r in counted if r.status == "failed"]
    if by_model:
        notes.append(
            f"{len(by_model)} trial(s) failed by the model and count as they are, at their "
            f"short recorded wall time (mean {np.mean([r.wall_s for r in by_model]):.3g} s) "
            f"and their cost (mean ${np.mean([r.cost_usd for r in by_model]):.3g}, often 0): "
            "they pull the time and cost means down"
        )
    metrics, primary, more = analysed_metrics(counted, primary)
    notes += more + isolation_notes(counted)

    how = AnalysisSettings(
        seed, alpha, power, n_permutations, n_bootstrap, mde_simulations, primary
    )
    variants = {
        name: _summarise(by_variant[name], tasks, metrics, excluded.get(name, 0), how)
        for name in names
    }
    for name, summary in variants.items():
        for metric in metrics:
            mean = getattr(summary, metric.name, None)
            if not isinstance(mean, MeanSummary) or mean.ci_low is None:
                continue
            if zero_width(mean.ci_low, mean.ci_high, len(tasks)) is not None:
                notes.append(
                    f"{name} {metric.name} (every trial {mean.mean:.4g}): zero variance; "
                    "the interval has zero width, which is no spread observed, not certainty"
                )
    comparisons = compare_variants(by_variant, control, tasks, metrics, how, notes)
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
        grading=_grading(counted),
        trials=len(counted),
        scripted_trials=sum(r.scripted_model is True for r in counted),
    )


def _grading(records: Sequence[TrialRecord]) -> GradingSummary | None:
    """The grading summary; None when no trial was graded or tried (no grader in the spec)."""
    if not any(r.grade is not None or r.grader_error for r in records):
        return None
    reasons: dict[str, int] = {}
    for record in records:
        if record.grade is None:
            reason = record.grader_error or "no grade recorded"
            reasons[reason] = reasons.get(reason, 0) + 1
    ordered = dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
    graded = sum(r.grade is not None for r in records)
    return GradingSummary(trials=len(records), graded=graded, not_graded=ordered)


def _workflow_agents(records: Sequence[TrialRecord]) -> WorkflowAgentsSummary | None:
    """The variant's workflow agents; ``None`` when no trial ran one."""
    ran = [r for r in records if r.workflow_agents]
    if not ran:
        return None
    return WorkflowAgentsSummary(
        trials=len(ran),
        started=sum(r.workflow_agents for r in ran),
        most_at_once=max(r.workflow_agents_at_once for r in ran),
        lost=sum(r.workflow_agents_lost for r in ran),
        cached=sum(r.workflow_agents_cached for r in ran),
        agents_at_once=max(r.agents_at_once for r in records),
    )


def _summarise(
    records: Sequence[TrialRecord],
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    excluded: int,
    how: AnalysisSettings,
) -> VariantSummary:
    fields: dict[str, Any] = {"trials": len(records), "excluded": excluded}
    if not records:
        fields["not_compared"] = NOT_COMPARED
    fields["workflow_agents"] = _workflow_agents(records)
    for metric in metrics:
        clusters = metric_clusters(records, tasks, metric)
        if metric.kind == "rate":
            rate = clustered_wilson(clusters, alpha=how.alpha)
            fields[RATE_KEYS[metric.name]] = RateSummary(
                estimate=finite(rate.estimate),
                ci_low=finite(rate.ci_low),
                ci_high=finite(rate.ci_high),
                n=rate.n,
                n_eff=finite(rate.n_eff),
                icc=finite(rate.icc),
                design_effect=finite(rate.design_effect),
                note=rate.note if records else NOT_COMPARED,
            )
        else:
            mean = clustered_mean(clusters, alpha=how.alpha, log_scale=metric.scale == "ratio")
            fields[metric.name] = MeanSummary(
                mean=finite(mean.mean),
                median=finite(mean.median),
                ci_low=finite(mean.ci_low),
                ci_high=finite(mean.ci_high),
                geo_mean=finite(mean.geo_mean),
                interval_of=mean.interval_of,
                note=mean.note if records else NOT_COMPARED,
            )
    return VariantSummary(**fields)


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
