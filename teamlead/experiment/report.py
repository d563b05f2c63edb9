"""The experiment report: per-variant summaries, comparisons with the control, per-task rates.

:func:`build_report` turns trial records into a :class:`Report` with the estimates of
:mod:`~teamlead.experiment.stats` and the verdicts of :mod:`~teamlead.experiment.verdicts`;
:meth:`Report.to_json` is the stable, versioned machine form. Printing and writing it
(Markdown, JSON, plots) is :mod:`teamlead.experiment.render`, which builds on this module.

Which trials count: the latest record of each (variant, task, trial) key; infrastructure
failures (``status="failed"``, ``error_class="infrastructure"``) are left out, since they
say nothing about the prompt. Other failures and partial trials count as they are.

Multiple comparisons: the primary metric (``parallel`` unless the spec names another,
e.g. ``passed``; see :func:`~teamlead.experiment.metrics.analysed_metrics`) has its
p-values Holm-adjusted across the non-control variants; every other comparison (all
variants, all secondary metrics together) is Benjamini-Hochberg adjusted.

Example:
    >>> report = build_report(read_records("out/trials.jsonl").records,
    ...                       control="baseline", seed=7)  # doctest: +SKIP
    >>> report.comparisons[0].verdict  # doctest: +SKIP
    'better'
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import UsageError
from .metrics import PRIMARY_METRIC, RATE_KEYS, Metric, analysed_metrics, metric_clusters
from .records import TrialRecord, isolation_notes, latest_records
from .stats import (
    Scale,
    Verdict,
    analysis_rng,
    cluster_bootstrap_mean,
    clustered_wilson,
    paired_test,
)
from .verdicts import adjust_pvalues, mde_from_se, mde_rate, verdict

__all__ = [
    "REPORT_VERSION",
    "Comparison",
    "MeanSummary",
    "RateSummary",
    "Report",
    "TaskCell",
    "VariantSummary",
    "build_report",
]

REPORT_VERSION = 1


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
    """One task under one variant. ``flaky``: its ``parallel`` outcome was neither always 0
    nor always 1 across the trials. ``passed_rate``: None unless every trial ran a check."""

    trials: int
    parallel_rate: float
    delegated_rate: float
    flaky: bool
    passed_rate: float | None = None


_COMPARISON_JSON_FIELDS = (
    *("variant", "control", "metric", "diff", "ci_low", "ci_high"),
    *("p_value", "p_adjusted", "verdict", "mde"),
)
"""The :class:`Comparison` fields in ``to_json`` (``scale``, ``correction``, ``tasks``,
``exact`` are left out of version 1)."""


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
            for key in RATE_KEYS.values():
                rate: RateSummary | None = getattr(summary, key)
                if rate is not None:
                    entry[key] = rate.model_dump(include={"estimate", "ci_low", "ci_high"})
            for key in ("wall_s", "agent_calls", "cost_usd", "tokens"):
                mean: MeanSummary = getattr(summary, key)
                entry[key] = mean.model_dump()
            variants[name] = entry
        comparisons = [c.model_dump(include=set(_COMPARISON_JSON_FIELDS)) for c in self.comparisons]
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
        UsageError: no counted trials for the control, or an unknown ``primary``.

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
    excluded = Counter(r.variant for r in latest if r.infrastructure_failure)

    names = list(dict.fromkeys(r.variant for r in counted))  # in order of first appearance
    tasks = list(dict.fromkeys(r.task for r in counted))
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
    metrics, primary, more = analysed_metrics(counted, primary)
    notes += more + isolation_notes(counted)

    how = _Settings(seed, alpha, power, n_permutations, n_bootstrap, primary)
    variants = {
        name: _summarise(by_variant[name], tasks, metrics, excluded.get(name, 0), how)
        for name in names
    }
    comparisons = _compare(by_variant, control, tasks, metrics, variants, how)
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


@dataclass(frozen=True)
class _Settings:
    """How :func:`build_report` analyses: its seed, levels and resampling sizes."""

    seed: int
    alpha: float
    power: float
    n_permutations: int
    n_bootstrap: int
    primary: str


def _summarise(
    records: Sequence[TrialRecord],
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    excluded: int,
    how: _Settings,
) -> VariantSummary:
    variant = records[0].variant if records else ""
    fields: dict[str, Any] = {"trials": len(records), "excluded": excluded}
    for metric in metrics:
        clusters = metric_clusters(records, tasks, metric)
        if metric.kind == "rate":
            rate = clustered_wilson(clusters, alpha=how.alpha)
            fields[RATE_KEYS[metric.name]] = RateSummary(
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
                rng=analysis_rng(how.seed, "summary", variant, metric.name),
                alpha=how.alpha,
                n_bootstrap=how.n_bootstrap,
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
    how: _Settings,
) -> list[Comparison]:
    alpha, power = how.alpha, how.power
    raw: list[dict[str, Any]] = []
    for name in by_variant:
        if name == control:
            continue
        for metric in metrics:
            variant_clusters = metric_clusters(by_variant[name], tasks, metric)
            control_clusters = metric_clusters(by_variant[control], tasks, metric)
            result = paired_test(
                variant_clusters,
                control_clusters,
                scale=metric.scale,
                rng=analysis_rng(how.seed, "compare", name, metric.name),
                n_permutations=how.n_permutations,
                n_bootstrap=how.n_bootstrap,
                alpha=alpha,
            )
            if metric.kind == "rate":
                key = RATE_KEYS[metric.name]
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

    primary = [i for i, c in enumerate(raw) if c["metric"].name == how.primary]
    secondary = [i for i, c in enumerate(raw) if c["metric"].name != how.primary]
    adjusted = [math.nan] * len(raw)
    groups: tuple[tuple[list[int], Literal["holm", "fdr_bh"]], ...] = (
        (primary, "holm"),
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
                correction="holm" if metric.name == how.primary else "fdr_bh",
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
