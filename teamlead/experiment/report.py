"""The experiment report: per-variant summaries, comparisons with the control, per-task rates.

:func:`build_report` turns trial records into a :class:`Report`; :func:`render_markdown`
prints it as tables; :meth:`Report.to_json` is the stable, versioned machine form;
:func:`write_report` writes ``report.md``, ``report.json`` and one PNG per metric.

Which trials count: the latest record of each (variant, task, trial) key; infrastructure
failures (``status="failed"``, ``error_class="infrastructure"``) are left out, since they
say nothing about the prompt. Other failures and partial trials count as they are.

Multiple comparisons: ``parallel`` is the primary metric and its p-values are
Holm-adjusted across the non-control variants; every other comparison (all variants, all
secondary metrics together) is Benjamini-Hochberg adjusted.

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
from .explain import disagreement, rule_text, zero_width
from .power import MdeResult, simulate_mde
from .records import TrialRecord, latest_records
from .stats import (
    Scale,
    Verdict,
    adjust_pvalues,
    clustered_mean,
    clustered_wilson,
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
    "upgrade_report_json",
    "write_report",
]

REPORT_VERSION = 2
"""2 added, per comparison, ``scale``, ``correction``, the compared ``tasks`` (a list; the
count is ``n_tasks``), the task-weighted ``variant_value``/``control_value``, ``weighting``,
``mde_note`` and ``explanation``; per rate ``n``, ``n_eff``, ``icc`` and
``design_effect``; and the report's ``rule`` and ``notes``. Version 1 readers' keys keep
their meaning; :func:`upgrade_report_json` reads both."""


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
    Metric("wall_s", "mean", "ratio", False, lambda r: r.wall_s, "wall time (s)"),
    Metric(
        "agent_calls", "mean", "difference", True, lambda r: float(r.agent_calls), "Agent calls"
    ),
    Metric("cost_usd", "mean", "ratio", False, lambda r: r.cost_usd, "cost (USD)"),
    Metric("tokens", "mean", "ratio", False, lambda r: float(r.tokens), "tokens (input + output)"),
    Metric("grade", "mean", "difference", True, lambda r: r.grade, "grade"),
)
"""Every metric, the primary one (``parallel``) first. ``grade`` is analysed only when
every counted trial has one."""

PRIMARY_METRIC = "parallel"
_RATE_KEYS = {"parallel": "parallel_rate", "delegated": "delegated_rate"}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RateSummary(_Model):
    """A rate with its task-clustered Wilson interval (``n_eff``, ``icc``, ``design_effect``
    say how much clustering widened it)."""

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    n: int = 0
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
    ``variant_value``/``control_value`` are the task-weighted means the effect compares
    (each compared task counts once, however many trials it has), over ``task_ids``.
    ``mde`` is simulated (:mod:`teamlead.experiment.power`); ``mde_note`` says how, or why
    there is none. ``explanation`` is set when p and the interval disagree.
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
    task_ids: list[str] = Field(default_factory=list)
    variant_value: float | None = None
    control_value: float | None = None
    weighting: str = "each compared task weighs the same"
    mde_note: str | None = None
    explanation: str | None = None


class TaskCell(_Model):
    """One task under one variant. ``flaky``: its ``parallel`` outcome (the primary metric)
    was neither always 0 nor always 1 across the trials."""

    trials: int
    parallel_rate: float
    delegated_rate: float
    flaky: bool


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

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (``version`` 2, see :data:`REPORT_VERSION`); NaN is ``null``.

        Example:
            >>> json.dumps(report.to_json())  # doctest: +SKIP
        """
        variants: dict[str, Any] = {}
        for name, summary in self.variants.items():
            entry: dict[str, Any] = {"trials": summary.trials, "excluded": summary.excluded}
            for key in ("parallel_rate", "delegated_rate"):
                rate: RateSummary = getattr(summary, key)
                entry[key] = rate.model_dump()
            for key in ("wall_s", "agent_calls", "cost_usd", "tokens"):
                mean: MeanSummary = getattr(summary, key)
                entry[key] = mean.model_dump()
            variants[name] = entry
        comparisons = []
        for c in self.comparisons:
            data = c.model_dump(exclude={"task_ids", "tasks"})
            data["tasks"] = list(c.task_ids)
            data["n_tasks"] = c.tasks
            comparisons.append(data)
        tasks = {
            task: {variant: cell.model_dump() for variant, cell in cells.items()}
            for task, cells in self.tasks.items()
        }
        return {
            "version": self.version,
            "control": self.control,
            "alpha": self.alpha,
            "power": self.power,
            "seed": self.seed,
            "rule": rule_text(self.alpha, _confidence(self.alpha)),
            "variants": variants,
            "comparisons": comparisons,
            "tasks": tasks,
            "flaky_tasks": list(self.flaky_tasks),
            "notes": list(self.notes),
        }


def upgrade_report_json(data: dict[str, Any]) -> dict[str, Any]:
    """Read a ``report.json`` of any version up to :data:`REPORT_VERSION` as the current form.

    Keys that version 1 did not write come back as ``None`` (or empty lists).

    Raises:
        UsageError: not a report, or written by a newer teamlead.

    Example:
        >>> upgrade_report_json({"version": 1, "variants": {}, "comparisons": [],
        ...                      "tasks": {}, "flaky_tasks": []})["notes"]
        []
    """
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"not an experiment report (version {version!r})")
    if version > REPORT_VERSION:
        raise UsageError(
            f"report version {version} is newer than this teamlead reads ({REPORT_VERSION})"
        )
    out = dict(data)
    if version == 1:
        for key in ("control", "alpha", "power", "seed", "rule"):
            out.setdefault(key, None)
        out.setdefault("notes", [])
        upgraded = []
        for comparison in data.get("comparisons", []):
            entry = dict(comparison)
            metric = next((m for m in METRICS if m.name == entry.get("metric")), None)
            entry.setdefault("scale", metric.scale if metric else None)
            primary = entry.get("metric") == PRIMARY_METRIC
            entry.setdefault("correction", "holm" if primary else "fdr_bh")
            for key in ("tasks", "n_tasks", "variant_value", "control_value", "weighting"):
                entry.setdefault(key, None)
            for key in ("exact", "mde_note", "explanation"):
                entry.setdefault(key, None)
            upgraded.append(entry)
        out["comparisons"] = upgraded
        out["version"] = REPORT_VERSION
    return out


def _confidence(alpha: float) -> str:
    pct = 100 * (1 - alpha)
    return f"{pct:.0f}%" if pct.is_integer() else f"{pct:g}%"


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
    mde_simulations: int = 400,
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
        n_bootstrap: unused since version 2 (intervals are t-intervals); accepted so
            older callers keep working.
        mde_simulations: simulated experiments per MDE (fewer: faster, coarser); 0 skips
            the MDE (``mde`` is ``None``), for simulation studies of the verdicts alone.

    Raises:
        UsageError: no counted trials for the control.

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
    by_model = [r for r in counted if r.status == "failed"]
    if by_model:
        notes.append(
            f"{len(by_model)} trial(s) failed by the model and count as they are, at their "
            f"short recorded wall time (mean {np.mean([r.wall_s for r in by_model]):.3g} s) "
            f"and their cost (mean ${np.mean([r.cost_usd for r in by_model]):.3g}, often 0): "
            "they pull the time and cost means down"
        )
    metrics = list(METRICS)
    with_grade = sum(r.grade is not None for r in counted)
    if with_grade < len(counted):
        metrics = [m for m in metrics if m.name != "grade"]
        if with_grade:
            notes.append(f"grade not analysed: only {with_grade} of {len(counted)} trials have one")

    variants = {
        name: _summarise(by_variant[name], tasks, metrics, excluded.get(name, 0), alpha)
        for name in names
    }
    for name, summary in variants.items():
        for metric in metrics:
            mean = getattr(summary, metric.name, None)
            if not isinstance(mean, MeanSummary) or mean.ci_low is None:
                continue
            if mean.ci_low == mean.ci_high and len(tasks) >= 2:
                notes.append(
                    f"{name} {metric.name}: zero variance, every trial has "
                    f"{_fmt(mean.mean)}; the interval has zero width, which is no spread "
                    "observed, not certainty"
                )
    comparisons = _compare(
        by_variant,
        control,
        tasks,
        metrics,
        seed,
        alpha,
        power,
        n_permutations,
        mde_simulations,
        notes,
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
    )


def _summarise(
    records: Sequence[TrialRecord],
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    excluded: int,
    alpha: float,
) -> VariantSummary:
    fields: dict[str, Any] = {"trials": len(records), "excluded": excluded}
    for metric in metrics:
        clusters = _clusters(records, tasks, metric)
        if metric.kind == "rate":
            rate = clustered_wilson(clusters, alpha=alpha)
            fields[_RATE_KEYS[metric.name]] = RateSummary(
                estimate=_finite(rate.estimate),
                ci_low=_finite(rate.ci_low),
                ci_high=_finite(rate.ci_high),
                n=rate.n,
                n_eff=rate.n_eff,
                icc=rate.icc,
                design_effect=rate.design_effect,
            )
        else:
            mean = clustered_mean(clusters, alpha=alpha)
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
    seed: int,
    alpha: float,
    power: float,
    n_permutations: int,
    mde_simulations: int,
    notes: list[str],
) -> list[Comparison]:
    raw: list[dict[str, Any]] = []
    treatments = [name for name in by_variant if name != control]
    for name in treatments:
        for metric in metrics:
            variant_clusters = _clusters(by_variant[name], tasks, metric)
            control_clusters = _clusters(by_variant[control], tasks, metric)
            compared = [
                (task, v, c)
                for task, v, c in zip(tasks, variant_clusters, control_clusters, strict=True)
                if v and c
            ]
            result = paired_test(
                variant_clusters,
                control_clusters,
                scale=metric.scale,
                rng=_rng(seed, "compare", name, metric.name),
                n_permutations=n_permutations,
                alpha=alpha,
            )
            # Holm's strictest step is alpha / m: exact for one variant, else a lower bound
            # on the power; BH (secondary metrics) is approximated by plain alpha.
            primary = metric.name == PRIMARY_METRIC
            mde_alpha = alpha / len(treatments) if primary else alpha
            mde = (
                simulate_mde(
                    [v for _, v, _ in compared],
                    [c for _, _, c in compared],
                    kind=metric.kind,
                    scale=metric.scale,
                    rng=_rng(seed, "mde", name, metric.name),
                    alpha=mde_alpha,
                    power=power,
                    simulations=mde_simulations,
                )
                if mde_simulations
                else MdeResult(math.nan, math.nan, 0, 0, "not computed (mde_simulations=0)")
            )
            if mde.reason is not None:
                mde_note = mde.reason
            else:
                mde_note = (
                    f"simulated: {mde.simulations} experiments x {mde.permutations} "
                    f"relabelings at alpha {mde_alpha:.3g}"
                    f"{'' if primary else ' before the BH adjustment'}; approximate"
                )
            control_mean = (
                float(np.mean([np.mean(c) for _, _, c in compared])) if compared else math.nan
            )
            variant_mean = (
                float(np.mean([np.mean(v) for _, v, _ in compared])) if compared else math.nan
            )
            if metric.scale == "ratio" and control_mean == 0.0:
                notes.append(
                    f"{name} vs {control}, {metric.name}: the control's mean is 0 on the "
                    "compared tasks, so the ratio, its interval and its MDE are undefined"
                )
            raw.append(
                {
                    "variant": name,
                    "metric": metric,
                    "result": result,
                    "mde": mde,
                    "mde_note": mde_note,
                    "task_ids": [task for task, _, _ in compared],
                    "values": (variant_mean, control_mean),
                }
            )

    primary_rows = [i for i, c in enumerate(raw) if c["metric"].name == PRIMARY_METRIC]
    secondary = [i for i, c in enumerate(raw) if c["metric"].name != PRIMARY_METRIC]
    adjusted = [math.nan] * len(raw)
    groups: tuple[tuple[list[int], Literal["holm", "fdr_bh"]], ...] = (
        (primary_rows, "holm"),
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
        low, high = _finite(result.ci_low), _finite(result.ci_high)
        flat = zero_width(low, high, result.tasks)
        if flat is not None:
            notes.append(f"{entry['variant']} vs {control}, {metric.name}: {flat}")
        comparisons.append(
            Comparison(
                variant=entry["variant"],
                control=control,
                metric=metric.name,
                scale=metric.scale,
                diff=_finite(result.effect),
                ci_low=low,
                ci_high=high,
                p_value=_finite(result.p_value),
                p_adjusted=_finite(adjusted[i]),
                correction="holm" if metric.name == PRIMARY_METRIC else "fdr_bh",
                verdict=verdict(
                    result.effect,
                    result.ci_low,
                    result.ci_high,
                    adjusted[i],
                    scale=metric.scale,
                    higher_is_better=metric.higher_is_better,
                    alpha=alpha,
                ),
                mde=_finite(entry["mde"].mde),
                tasks=result.tasks,
                exact=result.exact,
                task_ids=entry["task_ids"],
                variant_value=_finite(entry["values"][0]),
                control_value=_finite(entry["values"][1]),
                mde_note=entry["mde_note"],
                explanation=disagreement(
                    p_adjusted=_finite(adjusted[i]),
                    ci_low=low,
                    ci_high=high,
                    scale=metric.scale,
                    alpha=alpha,
                ),
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
            cells[task][name] = TaskCell(
                trials=len(trials),
                parallel_rate=sum(parallel) / len(trials),
                delegated_rate=sum(r.delegated for r in trials) / len(trials),
                flaky=len(set(parallel)) > 1,
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
    confidence = _confidence(report.alpha)
    out = [f"# Experiment report (control: {report.control})", ""]
    out += ["## Variants", ""]
    rows = []
    for name, s in report.variants.items():
        row = [name, str(s.trials)]
        for rate in (s.parallel_rate, s.delegated_rate):
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
        f"Rates: pooled over trials, task-clustered Wilson {confidence} CI. Means: mean "
        f"(median) [cluster-robust t {confidence} CI].",
        "",
    ]
    out += _table(
        ["variant", "rate", "trials", "n_eff", "ICC", "design effect"],
        [
            [name, label, str(rate.n), _fmt(rate.n_eff), _fmt(rate.icc), _fmt(rate.design_effect)]
            for name, s in report.variants.items()
            for label, rate in (("parallel", s.parallel_rate), ("delegated", s.delegated_rate))
        ],
    )
    out += [
        "",
        "n_eff: trials divided by the design effect 1 + (m - 1) ICC, m = sum(m_i^2) / sum(m_i).",
        "",
        "## Comparisons with the control",
        "",
    ]
    rows = []
    for c in report.comparisons:
        unit = "x" if c.scale == "ratio" else ""
        effect = "n/a" if c.diff is None else f"{_fmt(c.diff)}{unit}"
        mde = "n/a" if c.mde is None else f"{_fmt(c.mde)}{unit}"
        shown = f"**{c.verdict}**"
        if c.verdict == "inconclusive":
            shown += f" (MDE {mde})" if c.mde is not None else f" ({c.mde_note})"
        rows.append(
            [
                c.variant,
                c.metric,
                f"{_fmt(c.variant_value)} vs {_fmt(c.control_value)}",
                effect,
                _interval(c.ci_low, c.ci_high),
                _fmt_p(c.p_value),
                f"{_fmt_p(c.p_adjusted)} ({'Holm' if c.correction == 'holm' else 'BH'})",
                mde,
                str(c.tasks),
                shown,
            ]
        )
    out += _table(
        [
            "variant",
            "metric",
            "variant vs control",
            "effect",
            f"{confidence} CI",
            "p",
            "p adjusted",
            "MDE",
            "tasks",
            "verdict",
        ],
        rows,
    )
    out += [
        "",
        rule_text(report.alpha, confidence),
        "",
        "Variant vs control: means over the compared tasks, each task weighing the same "
        "(the headline rates above are pooled over trials, so they can differ). Effect: "
        "variant - control, or variant / control where marked x. p: within-task "
        f"permutation test. MDE: the effect this rule detects with power {report.power:g} "
        "on this design, by simulation.",
    ]
    explained = [c for c in report.comparisons if c.explanation]
    if explained:
        out += [""] + [f"- {c.variant}, {c.metric}: {c.explanation}." for c in explained]
    out += ["", "Compared tasks:", ""]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for c in report.comparisons:
        key = (c.variant, tuple(c.task_ids))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            f"- {c.variant} vs {c.control}: {len(c.task_ids)} of {len(report.tasks)} "
            f"task(s): {', '.join(c.task_ids) or 'none'}"
        )
    out += [
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
            row.append(
                "-"
                if cell is None
                else f"{_fmt(cell.parallel_rate, 2)} / {_fmt(cell.delegated_rate, 2)} "
                f"(n={cell.trials}){' flaky' if cell.flaky else ''}"
            )
        rows.append(row)
    out += _table(["task", *names], rows)
    out += ["", "Cells: parallel rate / delegated rate (trials)."]
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
