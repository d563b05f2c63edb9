"""Statistics for prompt-strategy experiments, clustered by task.

Trials of one task are not independent (some tasks invite delegation, some don't), so
every estimate treats the *task* as the unit of resampling or of variance inflation (rates,
in :mod:`~teamlead.experiment.stats.rates`, inflate the variance by a design effect):

- **Means** (wall time, calls, cost, tokens): mean and median of the trials, and a
  cluster-robust t-interval (:mod:`teamlead.experiment.stats.intervals`). Times, costs and
  tokens are skewed, and the interval of their arithmetic mean covers only 74-93% (lognormal
  spread 0.5-1.5, tasks of widely varying length, 10 tasks); a cluster bootstrap-t does
  little better (84-94%). So for them (``log_scale``) the interval is that of the
  *geometric mean*, the cluster-robust t-interval of the logarithms, which covers 95% in
  the same designs; when a value is 0 the logarithm is undefined and the arithmetic mean's
  interval is used, with a note.
- **Paired comparisons** (a variant against the control): the effect is computed on the
  tasks both ran, giving each task equal weight. The p-value comes from a *within-task
  permutation test* (shuffle the variant/control labels among one task's trials; exact
  enumeration when the relabelings are few, else seeded Monte Carlo; ties count half,
  the mid-p value, because 0/1 outcomes tie so often that the classic p-value is far
  below its nominal size); it needs no distributional assumption and keeps task
  differences out of the noise. The interval is a
  t-interval over tasks, which keeps its coverage with 10 tasks where a percentile
  bootstrap does not. Times, costs and tokens are compared as a ratio (variant/control)
  of geometric means: the test and the interval work on the per-task mean logarithms,
  so a ratio that is the same on every task is estimated as exactly that, with a bounded
  interval, however different the tasks' scales. With a 0 among the values the ratio of
  the task-weighted means is used instead, with Fieller's interval (``estimand`` says
  which).

What the numbers let one conclude (the simulated minimum detectable effect in
:mod:`teamlead.experiment.stats.power`; p-value adjustment, verdicts and the closed-form MDE
helpers in :mod:`teamlead.experiment.stats.verdicts`) builds on these estimates.

Everything random takes a :class:`numpy.random.Generator`, so results are reproducible.
scipy is imported on first use: importing teamlead stays fast.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from .intervals import cluster_mean_interval, paired_interval

__all__ = [
    "ONE_TASK",
    "Clusters",
    "MeanEstimate",
    "PairedResult",
    "analysis_rng",
    "Scale",
    "Verdict",
    "cluster_bootstrap_mean",
    "clustered_mean",
    "effect_statistic",
    "nonempty",
    "ARITHMETIC",
    "GEOMETRIC",
    "paired_test",
]

Clusters = Sequence[Sequence[float] | npt.NDArray[np.float64]]
"""Values grouped by task: ``clusters[i]`` holds the trial values of task ``i``."""

Scale = Literal["difference", "ratio"]
Verdict = Literal["better", "worse", "inconclusive", "not compared"]
"""``not compared``: the variant has no counted trial (all failed as infrastructure)."""

_FloatArray = npt.NDArray[np.float64]

ONE_TASK = "one task: no interval, since nothing says how much tasks vary"
"""Why a single task gives no interval (rates and means alike)."""
GEOMETRIC = "ratio of geometric means"
ARITHMETIC = "ratio of means"


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True)


class MeanEstimate(_Result):
    """Mean, median and geometric mean of the trials, with an interval for ``interval_of``.

    ``note`` says why there is no interval, or why the geometric mean could not be used.
    """

    mean: float
    median: float
    ci_low: float
    ci_high: float
    n: int
    geo_mean: float = math.nan
    interval_of: Literal["mean", "geometric mean"] = "mean"
    note: str | None = None


class PairedResult(_Result):
    """A variant against the control on the tasks both ran.

    ``effect`` is variant minus control (``scale="difference"``) or variant / control
    (``scale="ratio"``), with the interval on the same scale. ``se`` is the bootstrap
    standard error on the analysis scale (difference, or log ratio). ``exact`` says the
    p-value enumerated every relabeling instead of sampling them.
    """

    scale: Scale
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    se: float
    tasks: int
    exact: bool
    estimand: str = "difference of means"


def analysis_rng(seed: int, *labels: str) -> np.random.Generator:
    """A stable random stream for one analysis, named by ``labels``.

    The same seed gives the same numbers whatever order the analyses run in (Python's
    ``hash()`` is salted per process, crc32 is not).
    """
    return np.random.default_rng([seed, zlib.crc32("\x1f".join(labels).encode())])


def nonempty(clusters: Clusters) -> list[_FloatArray]:
    """The clusters with at least one value, as float arrays."""
    return [np.asarray(c, dtype=np.float64) for c in clusters if len(c) > 0]


def _quantiles(values: _FloatArray, alpha: float) -> tuple[float, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    # Interpolating next to an infinite draw would give NaN; take order statistics then.
    levels = [alpha / 2, 1 - alpha / 2]
    if np.isfinite(values).all():
        low, high = np.quantile(values, levels)
    else:
        low, high = np.quantile(values, levels, method="inverted_cdf")
    return float(low), float(high)


def cluster_bootstrap_mean(
    clusters: Clusters,
    *,
    rng: np.random.Generator,
    n_bootstrap: int = 5000,
    alpha: float = 0.05,
) -> MeanEstimate:
    """Mean and median of all trials, and a percentile cluster-bootstrap CI for the mean.

    Each bootstrap draw resamples tasks with replacement and takes the mean of all their
    trials, so between-task spread widens the interval as it should. With a single task
    the interval is NaN: there is nothing to resample.

    Example:
        >>> est = cluster_bootstrap_mean([[1.0, 2.0], [3.0, 4.0]], rng=np.random.default_rng(0))
        >>> est.mean, est.median
        (2.5, 2.5)
    """
    groups = nonempty(clusters)
    if not groups:
        nan = math.nan
        return MeanEstimate(mean=nan, median=nan, ci_low=nan, ci_high=nan, n=0)
    values = np.concatenate(groups)
    if len(groups) >= 2:
        sums = np.array([g.sum() for g in groups])
        counts = np.array([len(g) for g in groups], dtype=np.float64)
        index = rng.integers(0, len(groups), size=(n_bootstrap, len(groups)))
        draws = sums[index].sum(axis=1) / counts[index].sum(axis=1)
        low, high = _quantiles(draws, alpha)
    else:  # one task: no interval over tasks
        low = high = math.nan
    return MeanEstimate(
        mean=float(values.mean()),
        median=float(np.median(values)),
        ci_low=low,
        ci_high=high,
        n=int(values.size),
    )


def clustered_mean(
    clusters: Clusters, *, alpha: float = 0.05, log_scale: bool = False
) -> MeanEstimate:
    """Mean, median and geometric mean of all trials, and a cluster-robust t-interval.

    With ``log_scale`` (times, costs, tokens: skewed) the interval is that of the geometric
    mean (the t-interval of the logarithms, exponentiated); it falls back to the
    arithmetic mean's, with a ``note``, when a value is 0 or below. NaN bounds, with a
    ``note``, for a single task.

    Example:
        >>> clustered_mean([[1.0, 2.0], [3.0, 4.0]]).mean
        2.5
        >>> round(clustered_mean([[1.0, 4.0], [2.0, 8.0]], log_scale=True).geo_mean, 3)
        2.828
    """
    groups = nonempty(clusters)
    if not groups:
        nan = math.nan
        return MeanEstimate(mean=nan, median=nan, ci_low=nan, ci_high=nan, n=0)
    values = np.concatenate(groups)
    positive = bool((values > 0).all())
    geo = float(np.exp(np.log(values).mean())) if positive else math.nan
    note: str | None = None
    interval_of: Literal["mean", "geometric mean"] = "mean"
    if log_scale and positive:
        logs = [np.log(g) for g in groups]
        _, log_low, log_high = cluster_mean_interval(
            [g.sum() for g in logs], [len(g) for g in logs], alpha=alpha
        )
        low, high = min(math.exp(log_low), geo), max(math.exp(log_high), geo)
        if math.isnan(log_low):
            low = high = math.nan
        interval_of = "geometric mean"
    else:
        _, low, high = cluster_mean_interval(
            [g.sum() for g in groups], [len(g) for g in groups], alpha=alpha
        )
        if log_scale:
            note = (
                "some trials have 0, so the geometric mean is undefined; the interval is the "
                "arithmetic mean's, which covers less than its level when values are skewed"
            )
    if len(groups) < 2:
        note = ONE_TASK
    return MeanEstimate(
        mean=float(values.mean()),
        median=float(np.median(values)),
        ci_low=low,
        ci_high=high,
        n=int(values.size),
        geo_mean=geo,
        interval_of=interval_of,
        note=note,
    )


def effect_statistic(
    mean_variant: _FloatArray, mean_control: _FloatArray, scale: Scale
) -> _FloatArray:
    """The paired test's statistic: the difference of means, or their log ratio (NaN at 0).

    The permutation test here and the MDE simulation
    (:mod:`~teamlead.experiment.stats.power`) share it, so the simulated rule is the rule
    that decides the verdict.
    """
    if scale == "difference":
        return mean_variant - mean_control
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(mean_variant) - np.log(mean_control)


def _permutation_sums(
    pooled: list[_FloatArray],
    sizes: list[int],
    *,
    rng: np.random.Generator,
    n_permutations: int,
) -> tuple[_FloatArray, _FloatArray, bool]:
    """Sums over tasks of the relabeled variant and control means, and whether exact."""
    total = math.prod(math.comb(len(y), a) for y, a in zip(pooled, sizes, strict=True))
    if total <= n_permutations:
        sum_v = np.zeros(1)
        sum_c = np.zeros(1)
        for y, a in zip(pooled, sizes, strict=True):
            picks = np.array(list(itertools.combinations(range(len(y)), a)), dtype=np.intp)
            mv = y[picks].mean(axis=1)
            mc = (y.sum() - y[picks].sum(axis=1)) / (len(y) - a)
            sum_v = np.add.outer(sum_v, mv).ravel()
            sum_c = np.add.outer(sum_c, mc).ravel()
        return sum_v, sum_c, True
    sum_v = np.zeros(n_permutations)
    sum_c = np.zeros(n_permutations)
    for y, a in zip(pooled, sizes, strict=True):
        order = rng.random((n_permutations, len(y))).argsort(axis=1)
        chosen = y[order[:, :a]].sum(axis=1)
        sum_v += chosen / a
        sum_c += (y.sum() - chosen) / (len(y) - a)
    return sum_v, sum_c, False


def paired_test(
    variant: Clusters,
    control: Clusters,
    *,
    scale: Scale = "difference",
    rng: np.random.Generator,
    n_permutations: int = 10_000,
    n_bootstrap: int = 5000,
    alpha: float = 0.05,
    mid_p: bool = True,
) -> PairedResult:
    """Compare a variant with the control, task by task.

    ``variant[i]`` and ``control[i]`` are the trials of the same task; tasks where either
    side has no trials are left out. The statistic gives each task equal weight:
    ``V = mean over tasks of the variant's task mean`` (likewise ``C``), and the effect is
    ``V - C``. On the ratio scale, when every value is above 0, the same runs on the
    logarithms and the effect is the ratio of geometric means ``exp(V - C)``
    (``estimand`` is :data:`GEOMETRIC`); with a 0 among them it is the ratio of the
    task-weighted means ``V / C`` with Fieller's interval (:data:`ARITHMETIC`).

    The two-sided p-value is a within-task permutation test: under the null hypothesis
    (the strategy makes no difference), the labels of one task's trials are exchangeable.
    With at most ``n_permutations`` distinct relabelings they are all enumerated (exact
    p-value); otherwise ``n_permutations`` are drawn and the observed labeling counts as
    one of them. With ``mid_p`` (the default) relabelings that tie the observed statistic
    count half: 0/1 outcomes with a few trials per task tie a lot, and counting ties in
    full makes the test much more conservative than ``alpha`` (a false-positive rate
    near 0.03 instead of 0.05 at 10 tasks x 4 trials); the mid-p value (Lancaster) keeps
    it close to ``alpha``. Pass ``mid_p=False`` for the classic, conservative p-value.
    An observed effect of exactly none (identical arms) has p = 1. The interval is a
    t-interval over tasks (:func:`~teamlead.experiment.stats.intervals.paired_interval`); NaN,
    like ``se``, with fewer than two tasks. ``n_bootstrap`` is accepted for compatibility
    and unused.

    Example:
        >>> r = paired_test([[1, 1], [1, 0]], [[0, 0], [0, 1]], rng=np.random.default_rng(1))
        >>> r.effect, r.exact
        (0.5, True)
    """
    if len(variant) != len(control):
        raise ValueError("variant and control need the same tasks, in the same order")
    pairs = [
        (np.asarray(v, dtype=np.float64), np.asarray(c, dtype=np.float64))
        for v, c in zip(variant, control, strict=True)
        if len(v) > 0 and len(c) > 0
    ]
    k = len(pairs)
    nan = math.nan
    estimand = "difference of means"
    if scale == "ratio":
        estimand = ARITHMETIC
        if k and all((v > 0).all() and (c > 0).all() for v, c in pairs):
            estimand = GEOMETRIC
    if k == 0:
        return PairedResult(
            scale=scale,
            effect=nan,
            ci_low=nan,
            ci_high=nan,
            p_value=nan,
            se=nan,
            tasks=0,
            exact=False,
            estimand=estimand,
        )
    # The analysis scale: a ratio of geometric means is a difference of mean logarithms.
    analysis: Scale = scale
    if estimand == GEOMETRIC:
        pairs = [(np.log(v), np.log(c)) for v, c in pairs]
        analysis = "difference"
    mv = np.array([v.mean() for v, _ in pairs])
    mc = np.array([c.mean() for _, c in pairs])
    observed = float(effect_statistic(np.array([mv.mean()]), np.array([mc.mean()]), analysis)[0])

    pooled = [np.concatenate([v, c]) for v, c in pairs]
    sizes = [len(v) for v, _ in pairs]
    sum_v, sum_c, exact = _permutation_sums(pooled, sizes, rng=rng, n_permutations=n_permutations)
    null = effect_statistic(sum_v / k, sum_c / k, analysis)
    if math.isfinite(observed):
        tolerance = 1e-9 * max(1.0, abs(observed))
        with np.errstate(invalid="ignore"):
            # A non-finite relabeled statistic is as extreme as it gets: count it.
            at_least = ~(np.abs(null) < abs(observed) - tolerance)
            beyond = ~(np.abs(null) <= abs(observed) + tolerance)
        tie = 0.5 if mid_p else 1.0
        hits = float(beyond.sum()) + tie * float((at_least & ~beyond).sum())
        # Sampled: the observed labeling is one more draw, tied with itself.
        p_value = hits / null.size if exact else (hits + tie) / (1 + null.size)
        if abs(observed) <= tolerance:  # no difference at all: nothing to reject
            p_value = 1.0
    else:
        p_value = nan

    interval = paired_interval(mv, mc, scale=analysis, alpha=alpha)
    low, high, se = float(interval.low), float(interval.high), float(interval.se)
    if estimand == GEOMETRIC:
        low, high = math.exp(low), math.exp(high)
    effect = math.exp(observed) if scale == "ratio" else observed
    return PairedResult(
        scale=scale,
        effect=effect,
        ci_low=low,
        ci_high=high,
        p_value=min(1.0, p_value) if math.isfinite(p_value) else nan,
        se=se,
        tasks=k,
        exact=exact,
        estimand=estimand,
    )
