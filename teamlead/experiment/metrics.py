"""The quantities an experiment compares between variants, the primary one first.

Each :class:`Metric` says how to read its value off a trial record, whether it is a 0/1
rate or a mean, the scale its comparison uses and which direction is better. The report
(:mod:`teamlead.experiment.report`) and the plots (:mod:`teamlead.experiment.plots`)
both iterate :data:`METRICS`, so they always agree on the set and its order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from .records import TrialRecord
from .stats import Scale

__all__ = ["METRICS", "PRIMARY_METRIC", "RATE_KEYS", "Metric", "metric_clusters"]


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
"""The metric whose p-values are Holm-adjusted; every other one is BH-adjusted."""
RATE_KEYS: dict[str, str] = {"parallel": "parallel_rate", "delegated": "delegated_rate"}
"""Rate metric -> the :class:`~teamlead.experiment.report.VariantSummary` field holding it."""


def metric_clusters(
    records: Sequence[TrialRecord], tasks: Sequence[str], metric: Metric
) -> list[list[float]]:
    """``metric``'s values grouped by task, in the order of ``tasks`` (missing values left out).

    This is the clustered input every estimate in :mod:`teamlead.experiment.stats` takes.
    """
    by_task: dict[str, list[float]] = {task: [] for task in tasks}
    for record in records:
        value = metric.value(record)
        if value is not None and record.task in by_task:
            by_task[record.task].append(value)
    return [by_task[task] for task in tasks]
