"""The words around a verdict: the decision rule, and why a p-value and an interval disagree.

A verdict needs two things to agree (the two-part rule): the adjusted p-value of the
within-task permutation test below alpha, *and* the t-interval excluding no effect. They
answer slightly different questions (the test asks whether the labels matter within
tasks; the interval how far the average effect could be from the estimate given the
spread between tasks), so on small experiments they sometimes disagree. Every report
states the rule, and each disagreement gets one line saying which part failed, so
"inconclusive" never hides a small p-value without a reason. Rendering modules
(Markdown, JSON, HTML) take these strings as they are.
"""

from __future__ import annotations

import math

from .intervals import MIN_TASKS, flat

__all__ = [
    "confidence_label",
    "disagreement",
    "mde_text",
    "rule_text",
    "too_few_tasks",
    "zero_width",
]


def confidence_label(alpha: float) -> str:
    """The confidence level ``1 - alpha`` as a percentage label.

    Example:
        >>> confidence_label(0.05), confidence_label(0.025)
        ('95%', '97.5%')
    """
    pct = 100 * (1 - alpha)
    return f"{pct:.0f}%" if pct.is_integer() else f"{pct:g}%"


def rule_text(alpha: float, confidence: str) -> str:
    """The two-part rule, in one sentence.

    Example:
        >>> rule_text(0.05, "95%").startswith("Verdict rule:")
        True
    """
    return (
        f"Verdict rule: a variant is better or worse only when both (1) the adjusted "
        f"p-value of the within-task permutation test is below {alpha:g} and (2) the "
        f"{confidence} t-interval over the compared tasks excludes no effect (0 for a "
        "difference, 1 for a ratio), with a width above round-off and at least "
        f"{MIN_TASKS} compared tasks; otherwise it is inconclusive."
    )


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def disagreement(
    *,
    p_adjusted: float | None,
    ci_low: float | None,
    ci_high: float | None,
    scale: str,
    alpha: float,
) -> str | None:
    """One line when the p-value and the interval point different ways, else ``None``.

    Example:
        >>> disagreement(p_adjusted=0.017, ci_low=-0.05, ci_high=0.43, scale="difference",
        ...              alpha=0.05)  # doctest: +ELLIPSIS
        'p = 0.017 is below 0.05 but the interval [-0.05, 0.43] includes 0: ...'
    """
    if p_adjusted is None or ci_low is None or ci_high is None:
        return None
    if any(math.isnan(v) for v in (p_adjusted, ci_low, ci_high)):
        return None
    null = 1.0 if scale == "ratio" else 0.0
    includes = ci_low <= null <= ci_high
    interval = f"[{_fmt(ci_low)}, {_fmt(ci_high)}]"
    if p_adjusted < alpha and includes:
        return (
            f"p = {_fmt(p_adjusted)} is below {alpha:g} but the interval {interval} includes "
            f"{null:g}: the labels matter within tasks, yet the spread between tasks leaves "
            "the average effect uncertain, so the verdict is inconclusive"
        )
    if p_adjusted >= alpha and not includes:
        return (
            f"the interval {interval} excludes {null:g} but p = {_fmt(p_adjusted)} is not "
            f"below {alpha:g} (after the multiple-comparison adjustment), so the verdict is "
            "inconclusive"
        )
    return None


def zero_width(ci_low: float | None, ci_high: float | None, tasks: int) -> str | None:
    """A warning for a zero-width interval (up to round-off) over two or more tasks.

    Example:
        >>> zero_width(1.0, 1.0, 10) is not None, zero_width(1 / 3, 1 / 3 + 1e-16, 4) is not None
        (True, True)
    """
    if ci_low is None or ci_high is None or tasks < 2 or not bool(flat(ci_low, ci_high)):
        return None
    return (
        f"zero variance: every one of the {tasks} compared tasks shows the same effect, so the "
        "interval has zero width; that is not certainty, only no observed spread, and it "
        "decides no verdict"
    )


def too_few_tasks(tasks: int) -> str | None:
    """Why a comparison over fewer than :data:`MIN_TASKS` tasks has no verdict, else None.

    Example:
        >>> too_few_tasks(2)  # doctest: +ELLIPSIS
        'only 2 compared tasks: a verdict needs at least 3, ...'
    """
    if tasks >= MIN_TASKS:
        return None
    return (
        f"only {tasks} compared task{'' if tasks == 1 else 's'}: a verdict needs at least "
        f"{MIN_TASKS}, since with fewer one coincidence decides it, however small p is"
    )


def _size(value: float, scale: str, direction: str) -> str:
    if scale == "ratio":
        change = abs(value - 1)
        return f"{change:.0%} (x{value:.3g})"
    return f"{value:.3g}"


def mde_text(
    rise: float | None,
    drop: float | None,
    scale: str,
    *,
    rise_reason: str | None,
    drop_reason: str | None,
    reason: str | None,
) -> str:
    """The MDE in words, by direction: ``detectable rise of ...; detectable drop of ...``.

    A direction with none says why (``no rise can be detected: ...``).

    Example:
        >>> mde_text(0.2, None, "difference", rise_reason=None, reason=None,
        ...          drop_reason="no drop can be detected: the control's rate is 0")
        "detectable rise of 0.2; no drop can be detected: the control's rate is 0"
        >>> mde_text(1.3, 0.77, "ratio", rise_reason=None, drop_reason=None, reason=None)
        'detectable rise of 30% (x1.3); detectable drop of 23% (x0.77)'
    """
    if reason is not None:
        return reason
    parts = []
    for name, value, why in (("rise", rise, rise_reason), ("drop", drop, drop_reason)):
        if value is not None:
            parts.append(f"detectable {name} of {_size(value, scale, name)}")
        else:
            parts.append(why or f"no {name} can be detected")
    return "; ".join(parts)
