"""How each variant is compared with the control: the :class:`Comparison` and its making.

:func:`compare_variants` runs, per variant and metric, the within-task permutation test and
t-interval (:mod:`~teamlead.experiment.stats.estimates`), the simulated minimum detectable
effect of that rule (:mod:`~teamlead.experiment.stats.power`), the p-value adjustment and the
verdict (:mod:`~teamlead.experiment.stats.verdicts`), and the words for disagreements
(:mod:`~teamlead.experiment.stats.explain`). Kept apart from
:mod:`~teamlead.experiment.reporting.report`, which summarises the variants and assembles the
report, so each stays one concept.

Multiple comparisons: the primary metric (``AnalysisSettings.primary``: ``parallel``
unless the spec names another, e.g. ``passed``) has its p-values Holm-adjusted across the
non-control variants; every other comparison (all variants, all secondary metrics
together) is Benjamini-Hochberg adjusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..specs.records import TrialRecord
from .estimates import Scale, Verdict, analysis_rng, paired_test
from .explain import disagreement, zero_width
from .metrics import PRIMARY_METRIC, Metric, metric_clusters
from .power import MdeResult, simulate_mde
from .verdicts import adjust_pvalues, verdict

__all__ = ["AnalysisSettings", "Comparison", "compare_variants", "finite"]


def finite(value: float) -> float | None:
    """``value``, or ``None`` for NaN and infinities (JSON has no NaN)."""
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class AnalysisSettings:
    """How the report analyses: its seed, levels, resampling and simulation sizes, and the
    primary (Holm-adjusted) metric."""

    seed: int
    alpha: float
    power: float
    n_permutations: int
    n_bootstrap: int
    mde_simulations: int
    primary: str = PRIMARY_METRIC


class Comparison(BaseModel):
    """A variant against the control on one metric.

    ``diff`` is variant minus control, except on the ratio scale (``wall_s``,
    ``cost_usd``, ``tokens``) where it is variant / control; ``ci_low``/``ci_high`` and
    ``mde`` use the same scale (``mde`` as a factor there, e.g. 1.3 for a 30% change).
    ``variant_value``/``control_value`` are the task-weighted means the effect compares
    (each compared task counts once, however many trials it has), over ``task_ids``.
    ``mde`` is simulated (:mod:`teamlead.experiment.stats.power`); ``mde_note`` says how, or why
    there is none. ``explanation`` is set when p and the interval disagree.
    """

    model_config = ConfigDict(frozen=True)

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


def compare_variants(
    by_variant: dict[str, list[TrialRecord]],
    control: str,
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    how: AnalysisSettings,
    notes: list[str],
) -> list[Comparison]:
    """Every non-control variant against ``control`` on every metric, adjusted and judged.

    Notes on undefined ratios and zero-width intervals are appended to ``notes``.
    """
    alpha, power = how.alpha, how.power
    raw: list[dict[str, Any]] = []
    treatments = [name for name in by_variant if name != control]
    for name in treatments:
        for metric in metrics:
            variant_clusters = metric_clusters(by_variant[name], tasks, metric)
            control_clusters = metric_clusters(by_variant[control], tasks, metric)
            compared = [
                (task, v, c)
                for task, v, c in zip(tasks, variant_clusters, control_clusters, strict=True)
                if v and c
            ]
            result = paired_test(
                variant_clusters,
                control_clusters,
                scale=metric.scale,
                rng=analysis_rng(how.seed, "compare", name, metric.name),
                n_permutations=how.n_permutations,
                alpha=alpha,
            )
            # Holm's strictest step is alpha / m: exact for one variant, else a lower bound
            # on the power; BH (secondary metrics) is approximated by plain alpha.
            primary = metric.name == how.primary
            mde_alpha = alpha / len(treatments) if primary else alpha
            mde = (
                simulate_mde(
                    [v for _, v, _ in compared],
                    [c for _, _, c in compared],
                    kind=metric.kind,
                    scale=metric.scale,
                    rng=analysis_rng(how.seed, "mde", name, metric.name),
                    alpha=mde_alpha,
                    power=power,
                    simulations=how.mde_simulations,
                )
                if how.mde_simulations
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

    primary_rows = [i for i, c in enumerate(raw) if c["metric"].name == how.primary]
    secondary = [i for i, c in enumerate(raw) if c["metric"].name != how.primary]
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
        low, high = finite(result.ci_low), finite(result.ci_high)
        flat = zero_width(low, high, result.tasks)
        if flat is not None:
            notes.append(f"{entry['variant']} vs {control}, {metric.name}: {flat}")
        comparisons.append(
            Comparison(
                variant=entry["variant"],
                control=control,
                metric=metric.name,
                scale=metric.scale,
                diff=finite(result.effect),
                ci_low=low,
                ci_high=high,
                p_value=finite(result.p_value),
                p_adjusted=finite(adjusted[i]),
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
                mde=finite(entry["mde"].mde),
                tasks=result.tasks,
                exact=result.exact,
                task_ids=entry["task_ids"],
                variant_value=finite(entry["values"][0]),
                control_value=finite(entry["values"][1]),
                mde_note=entry["mde_note"],
                explanation=disagreement(
                    p_adjusted=finite(adjusted[i]),
                    ci_low=low,
                    ci_high=high,
                    scale=metric.scale,
                    alpha=alpha,
                ),
            )
        )
    return comparisons
