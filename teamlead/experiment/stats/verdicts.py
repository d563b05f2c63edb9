"""What an experiment's estimates let one conclude: power, multiple testing, verdicts.

- **Closed-form minimum detectable effect**, for planning before any data exist: for
  rates, from Cohen's h (statsmodels ``NormalIndPower``) at the effective sample sizes,
  converted back to a rate difference above the control rate; for means,
  ``(z_{1-alpha/2} + z_power) * SE`` (as a ratio factor on the ratio scale). The report
  itself simulates the MDE of the rule it applies (:mod:`teamlead.experiment.stats.power`).
- **Adjusted p-values**: Holm (family-wise) or Benjamini-Hochberg (FDR).
- **Verdicts**: ``better``/``worse`` only when the adjusted p-value and the interval
  agree, the interval is wider than round-off and at least
  :data:`~teamlead.experiment.stats.intervals.MIN_TASKS` tasks were compared; else
  ``inconclusive``.

The estimates themselves (clustered rates, t-interval means, the paired permutation test)
are in :mod:`teamlead.experiment.stats.estimates`. scipy and statsmodels are imported on first use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .estimates import Scale, Verdict
from .intervals import MIN_TASKS, flat

__all__ = ["adjust_pvalues", "mde_from_se", "mde_rate", "verdict"]


def mde_rate(
    control_rate: float,
    n_eff_variant: float,
    n_eff_control: float | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest rise over ``control_rate`` detectable at ``alpha`` with ``power``.

    Solves for Cohen's h (arcsine-transformed difference, statsmodels
    ``NormalIndPower``, two-sided) at the effective sample sizes, then converts back to a
    rate difference. If no rate above the control is far enough away, it reports the
    smallest detectable drop; NaN if neither exists (too few trials).

    Example:
        >>> round(mde_rate(0.2, 40), 3) > round(mde_rate(0.2, 400), 3)
        True
    """
    from statsmodels.stats.power import (  # type: ignore[import-untyped, unused-ignore]
        NormalIndPower,
    )

    if not (0.0 <= control_rate <= 1.0) or n_eff_variant <= 0:
        return math.nan
    ratio = 1.0 if n_eff_control is None else n_eff_control / n_eff_variant
    if ratio <= 0:
        return math.nan
    h = float(
        NormalIndPower().solve_power(
            effect_size=None, nobs1=n_eff_variant, alpha=alpha, power=power, ratio=ratio
        )
    )
    base = math.asin(math.sqrt(control_rate))
    if base + h / 2 <= math.pi / 2:
        return math.sin(base + h / 2) ** 2 - control_rate
    if base - h / 2 >= 0.0:
        return control_rate - math.sin(base - h / 2) ** 2
    return math.nan


def mde_from_se(
    se: float, *, scale: Scale = "difference", alpha: float = 0.05, power: float = 0.8
) -> float:
    """Minimum detectable effect from a standard error: ``(z_{1-alpha/2} + z_power) * se``.

    On the ratio scale ``se`` is that of the log ratio and the result is a factor
    (``1.3``: a 30% change is detectable).
    """
    from scipy.stats import norm  # type: ignore[import-untyped, unused-ignore]

    if not math.isfinite(se):
        return math.nan
    distance = float(norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se
    return math.exp(distance) if scale == "ratio" else distance


def adjust_pvalues(p_values: Sequence[float], method: Literal["holm", "fdr_bh"]) -> list[float]:
    """Holm (family-wise) or Benjamini-Hochberg (FDR) adjusted p-values.

    NaN entries (untestable comparisons) stay NaN and do not count as tests. The same
    numbers as statsmodels' ``multipletests`` (a test checks it), computed here because
    that function runs a full garbage collection on every call (0.17 s each).

    Example:
        >>> adjust_pvalues([0.01, 0.04, float("nan")], "holm")
        [0.02, 0.04, nan]
    """
    values = np.asarray(p_values, dtype=np.float64)
    out = np.full(values.shape, math.nan)
    present = np.flatnonzero(~np.isnan(values))
    m = present.size
    if m == 0:
        return [float(v) for v in out]
    order = present[np.argsort(values[present], kind="stable")]
    ranked = values[order]
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    else:
        scaled = ranked * m / np.arange(1, m + 1)
        adjusted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    out[order] = adjusted
    return [float(v) for v in out]


def verdict(
    effect: float,
    ci_low: float,
    ci_high: float,
    p_adjusted: float,
    *,
    scale: Scale,
    higher_is_better: bool,
    alpha: float = 0.05,
    tasks: int | None = None,
) -> Verdict:
    """``better`` or ``worse`` only when the adjusted p-value is below ``alpha`` *and* the
    interval excludes no-effect (0 for a difference, 1 for a ratio); else ``inconclusive``.

    Also ``inconclusive``: an interval of zero width up to round-off (no spread observed
    is not certainty), and, when ``tasks`` is given, fewer than
    :data:`~teamlead.experiment.stats.intervals.MIN_TASKS` compared tasks.

    Example:
        >>> verdict(1.0, 1.0, 1.0, 0.0002, scale="difference", higher_is_better=True)
        'inconclusive'
    """
    null = 1.0 if scale == "ratio" else 0.0
    values = (effect, ci_low, ci_high, p_adjusted)
    if any(math.isnan(v) for v in values) or p_adjusted >= alpha:
        return "inconclusive"
    if ci_low <= null <= ci_high or effect == null or bool(flat(ci_low, ci_high)):
        return "inconclusive"
    if tasks is not None and tasks < MIN_TASKS:
        return "inconclusive"
    return "better" if (effect > null) == higher_is_better else "worse"
