"""The quantities an experiment compares between variants, and which of them it analyses.

Each :class:`Metric` says how to read its value off a trial record, whether it is a 0/1
rate or a mean, the scale its comparison uses and which direction is better. The report
(:mod:`teamlead.experiment.reporting.report`) and the plots
(:mod:`teamlead.experiment.reporting.plots`) both iterate :data:`METRICS`, so they always
agree on the set and its order.

:func:`analysed_metrics` decides, for a set of counted trials, which metrics are analysed
(``grade`` and ``passed`` only when every trial has one) and which is the primary one:
``parallel`` unless the spec names another, e.g. ``passed`` (the check command's verdict)
for coding tasks. The primary metric's p-values are Holm-adjusted, the rest BH-adjusted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ...errors import UsageError
from ..specs.records import TrialRecord
from .estimates import Scale

__all__ = [
    "METRICS",
    "PRIMARY_METRIC",
    "RATE_KEYS",
    "Metric",
    "analysed_metrics",
    "metric_clusters",
]


@dataclass(frozen=True)
class Metric:
    """A quantity compared between variants.

    ``kind="rate"`` metrics are 0/1 per trial. ``scale="ratio"`` metrics are compared as
    variant / control. ``higher_is_better`` sets the verdict's direction: more delegation
    (rates, Agent calls), passing the check and a higher grade are better; less time, cost
    and tokens are.
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
"""The default primary metric: its p-values are Holm-adjusted; every other one BH."""
RATE_KEYS: dict[str, str] = {
    "parallel": "parallel_rate",
    "delegated": "delegated_rate",
    "passed": "passed_rate",
}
"""Rate metric -> the field of the report's ``VariantSummary`` holding it."""


def metric_clusters(
    records: Sequence[TrialRecord], tasks: Sequence[str], metric: Metric
) -> list[list[float]]:
    """``metric``'s values grouped by task, in the order of ``tasks`` (missing values left out).

    This is the clustered input every estimate in :mod:`teamlead.experiment.stats.estimates` takes.
    """
    by_task: dict[str, list[float]] = {task: [] for task in tasks}
    for record in records:
        value = metric.value(record)
        if value is not None and record.task in by_task:
            by_task[record.task].append(value)
    return [by_task[task] for task in tasks]


_OPTIONAL = {"grade": "a grade", "passed": "a check result"}
"""Metrics analysed only when every counted trial has a value, and what that value is."""


def analysed_metrics(
    records: Sequence[TrialRecord], primary: str = PRIMARY_METRIC
) -> tuple[list[Metric], str, list[str]]:
    """The metrics to analyse for ``records``, primary first; the primary; notes on both.

    ``grade`` and ``passed`` are left out unless every record has one (a note says so when
    some do). If ``primary`` is left out that way, :data:`PRIMARY_METRIC` takes its place
    and a note says so.

    Raises:
        UsageError: ``primary`` is not a metric.

    Example:
        >>> metrics, primary, notes = analysed_metrics(records, "passed")  # doctest: +SKIP
        >>> metrics[0].name == primary  # doctest: +SKIP
        True
    """
    if primary not in {m.name for m in METRICS}:
        raise UsageError(f"unknown primary metric {primary!r}")
    metrics = list(METRICS)
    notes: list[str] = []
    for name, what in _OPTIONAL.items():
        metric = next(m for m in METRICS if m.name == name)
        have = sum(metric.value(r) is not None for r in records)
        if have < len(records):
            metrics.remove(metric)
            if have:
                notes.append(
                    f"{name} not analysed: only {have} of {len(records)} trials have {what}"
                )
    if primary not in {m.name for m in metrics}:
        notes.append(f"primary metric {primary} not analysed; Holm applies to {PRIMARY_METRIC}")
        primary = PRIMARY_METRIC
    metrics.sort(key=lambda m: m.name != primary)  # stable: the primary's rows come first
    return metrics, primary, notes
