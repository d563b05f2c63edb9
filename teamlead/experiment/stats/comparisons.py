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
from .estimates import (
    ARITHMETIC,
    GEOMETRIC,
    PairedResult,
    Scale,
    Verdict,
    analysis_rng,
    paired_test,
)
from .explain import disagreement, mde_text, too_few_tasks, zero_width
from .metrics import PRIMARY_METRIC, Metric, metric_clusters
from .power import MdeResult, simulate_mde
from .verdicts import adjust_pvalues, verdict

__all__ = [
    "ALL_INFRASTRUCTURE",
    "NOT_COMPARED",
    "AnalysisSettings",
    "Comparison",
    "compare_variants",
    "finite",
]


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


ALL_INFRASTRUCTURE = "all trials failed as infrastructure"
NOT_COMPARED = f"not compared: {ALL_INFRASTRUCTURE}"
"""The line for a variant with no counted trial."""


class Comparison(BaseModel):
    """A variant against the control on one metric.

    ``diff`` is variant minus control, except on the ratio scale (``wall_s``,
    ``cost_usd``, ``tokens``) where it is variant / control (``estimand``: the ratio of
    geometric means, or of means when a value is 0); ``ci_low``/``ci_high`` use the same
    scale. ``variant_value``/``control_value`` are the task-weighted means the effect
    compares (geometric means for a ratio of geometric means; each compared task counts
    once, however many trials it has), over ``task_ids``.

    The MDE is simulated (:mod:`teamlead.experiment.stats.power`) in each direction:
    ``mde_rise``/``mde_drop`` (sizes for a difference, factors above/below 1 for a
    ratio); ``mde`` is the one in ``mde_direction``, the metric's better direction when it
    can be detected, else the other; ``mde_text`` says both in words, or why not, and
    ``mde_note`` how it was simulated. ``explanation`` is the one-line reason when the
    verdict is inconclusive though one part of the rule was met (p and the interval
    disagree, a zero-width interval, too few tasks), and ``reasons`` the reason for each
    field that is n/a (``diff``, ``ci``, ``p_value``, ``p_adjusted``, ``mde``).
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
    estimand: str = "difference of means"
    mde_direction: Literal["rise", "drop"] | None = None
    mde_rise: float | None = None
    mde_drop: float | None = None
    mde_text: str | None = None
    reasons: dict[str, str] = Field(default_factory=dict)


def _not_compared(name: str, control: str, metric: Metric, primary: bool) -> Comparison:
    reasons = dict.fromkeys(("diff", "ci", "p_value", "p_adjusted", "mde"), NOT_COMPARED)
    return Comparison(
        variant=name,
        control=control,
        metric=metric.name,
        scale=metric.scale,
        diff=None,
        ci_low=None,
        ci_high=None,
        p_value=None,
        p_adjusted=None,
        correction="holm" if primary else "fdr_bh",
        verdict="not compared",
        mde=None,
        tasks=0,
        exact=False,
        mde_text=NOT_COMPARED,
        explanation=ALL_INFRASTRUCTURE,
        reasons=reasons,
    )


def _mde_fields(mde: MdeResult, metric: Metric) -> dict[str, Any]:
    rise, drop = finite(mde.rise), finite(mde.drop)
    better, worse = ("rise", "drop") if metric.higher_is_better else ("drop", "rise")
    values = {"rise": rise, "drop": drop}
    direction = better if values[better] is not None else worse
    chosen = values[direction]
    text = mde_text(
        rise,
        drop,
        metric.scale,
        rise_reason=mde.rise_reason,
        drop_reason=mde.drop_reason,
        reason=mde.reason,
    )
    return {
        "mde": chosen,
        "mde_direction": direction if chosen is not None else None,
        "mde_rise": rise,
        "mde_drop": drop,
        "mde_text": text,
    }


def _reasons(
    result: PairedResult, metric: Metric, control_mean: float, mde: dict[str, Any]
) -> dict[str, str]:
    """The one-line reason for every field of a comparison that is n/a."""
    reasons: dict[str, str] = {}
    k = result.tasks
    undefined = metric.scale == "ratio" and control_mean == 0.0
    if k == 0:
        why = "no task ran under both the variant and the control with a value"
        reasons.update(diff=why, ci=why, p_value=why, p_adjusted=why)
    elif undefined:
        why = "the control's mean is 0 on the compared tasks, so a ratio is undefined"
        reasons.update(diff=why, ci=why, p_value=why, p_adjusted=why)
    elif not math.isfinite(result.effect):
        reasons["diff"] = "the effect is not finite"
    if "ci" not in reasons and not (math.isfinite(result.ci_low) and math.isfinite(result.ci_high)):
        if k < 2:
            reasons["ci"] = "one compared task: an interval over tasks needs two"
        elif result.estimand == ARITHMETIC:
            reasons["ci"] = (
                "some values are 0, so the ratio is of means, and Fieller's interval for it is "
                "unbounded: the control's task means are too spread to bound the ratio"
            )
        else:
            reasons["ci"] = "the interval is not finite"
    if "p_value" not in reasons and not math.isfinite(result.p_value):
        reasons["p_value"] = reasons["p_adjusted"] = "the test statistic is undefined"
    if mde["mde"] is None:
        reasons["mde"] = mde["mde_text"]
    return reasons


def compare_variants(
    by_variant: dict[str, list[TrialRecord]],
    control: str,
    tasks: Sequence[str],
    metrics: Sequence[Metric],
    how: AnalysisSettings,
    notes: list[str],
) -> list[Comparison]:
    """Every non-control variant against ``control`` on every metric, adjusted and judged.

    A variant without counted trials gets ``not compared`` rows. Notes on undefined
    ratios and zero-width intervals are appended to ``notes``.
    """
    alpha, power = how.alpha, how.power
    raw: list[dict[str, Any]] = []
    treatments = [name for name in by_variant if name != control]
    compared_treatments = [name for name in treatments if by_variant[name]]
    for name in compared_treatments:
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
            mde_alpha = alpha / len(compared_treatments) if primary else alpha
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
                else MdeResult.none("not computed (mde_simulations=0)")
            )
            if mde.reason is not None:
                mde_note = mde.reason
            else:
                mde_note = (
                    f"simulated over the plausible control rates: {mde.simulations} experiments"
                    if metric.kind == "rate"
                    else f"simulated: {mde.simulations} experiments"
                ) + (
                    f" x {mde.permutations} relabelings at alpha {mde_alpha:.3g}"
                    f"{'' if primary else ' before the BH adjustment'}; approximate"
                )
            geometric = result.estimand == GEOMETRIC

            def centre(values: list[float], geometric: bool = geometric) -> float:
                return float(np.mean(np.log(values)) if geometric else np.mean(values))

            control_mean = (
                float(np.mean([centre(c) for _, _, c in compared])) if compared else math.nan
            )
            variant_mean = (
                float(np.mean([centre(v) for _, v, _ in compared])) if compared else math.nan
            )
            if geometric:
                control_mean, variant_mean = math.exp(control_mean), math.exp(variant_mean)
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
                    "mde": _mde_fields(mde, metric),
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
        flat_note = zero_width(low, high, result.tasks)
        if flat_note is not None:
            notes.append(f"{entry['variant']} vs {control}, {metric.name}: {flat_note}")
        p_adjusted = finite(adjusted[i])
        called = verdict(
            result.effect,
            result.ci_low,
            result.ci_high,
            adjusted[i],
            scale=metric.scale,
            higher_is_better=metric.higher_is_better,
            alpha=alpha,
            tasks=result.tasks,
        )
        explanation = disagreement(
            p_adjusted=p_adjusted, ci_low=low, ci_high=high, scale=metric.scale, alpha=alpha
        )
        if called == "inconclusive" and explanation is None and result.tasks > 0:
            explanation = too_few_tasks(result.tasks) or flat_note
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
                p_adjusted=p_adjusted,
                correction="holm" if metric.name == how.primary else "fdr_bh",
                verdict=called,
                tasks=result.tasks,
                exact=result.exact,
                task_ids=entry["task_ids"],
                variant_value=finite(entry["values"][0]),
                control_value=finite(entry["values"][1]),
                mde_note=entry["mde_note"],
                explanation=explanation,
                estimand=result.estimand,
                reasons=_reasons(result, metric, entry["values"][1], entry["mde"]),
                **entry["mde"],
            )
        )
    for name in treatments:
        if not by_variant[name]:
            comparisons += [
                _not_compared(name, control, metric, metric.name == how.primary)
                for metric in metrics
            ]
    return comparisons
