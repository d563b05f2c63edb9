"""The sentences a report leads with, shared by the Markdown and the HTML forms.

One verdict line per comparison (:func:`headline`), the warning that a scripted model
answered (:func:`scripted_banner`), how many trials were graded (:func:`grading_lines`),
notes that say one thing about many subjects folded into one (:func:`fold_notes`), and
numbers to significant digits for costs of a fraction of a cent (:func:`sig`). Each is
built from the report's fields alone, so it says what the statistics say, in their words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..stats.comparisons import Comparison
from ..stats.explain import confidence_label
from .report import GradingSummary, Report

__all__ = ["fold_notes", "grading_lines", "headline", "number", "scripted_banner", "sig"]

_MONEY_METRICS = ("cost_usd",)
_REASONS_SHOWN = 5  # most frequent first; a real model's replies make many distinct ones


def number(value: float | None, digits: int = 3) -> str:
    """A number as the reports print it: ``n/a`` for none, ``digits`` decimals (one from
    100 up), significant digits for the very large and very small."""
    if value is None or not math.isfinite(value):
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
    return "< 0.0001" if value < 1e-4 else f"= {number(value, 4)}"


def _interval(low: float | None, high: float | None) -> str:
    return f"[{number(low)}, {number(high)}]"


def sig(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits: costs of a fraction of a cent stay legible.

    Example:
        >>> sig(0.0051234), sig(0.005), sig(12.345), sig(1234.5), sig(None)
        ('0.00512', '0.005', '12.3', '1,234', 'n/a')
    """
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) < 1e-4 or abs(value) >= 1e9:
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _value(c: Comparison, value: float | None) -> str:
    return sig(value) if c.metric in _MONEY_METRICS else number(value)


def _effect(c: Comparison) -> str:
    if c.diff is None:
        return "n/a"
    if c.scale == "ratio":
        return f"{number(c.diff)}x"
    return ("+" if c.diff > 0 else "") + number(c.diff)


def headline(c: Comparison, alpha: float) -> str:
    """One sentence for a comparison: the verdict, then the numbers it rests on.

    Built from the comparison's fields alone (verdict, values, effect, interval, adjusted
    p, MDE and the notes on them), so it says what the statistics say, in their words.

    Example:
        >>> headline(comparison, 0.05)  # doctest: +SKIP
        'delegation is better than baseline on passed: 1 vs 0.389, effect +0.611 (95% CI
        [0.43, 0.79]), p = 0.0002 (Holm).'
    """
    unit = "x" if c.scale == "ratio" else ""
    where = f"on {c.metric}"
    if c.diff is None:
        why = (c.mde_note or c.explanation or "no effect could be estimated").rstrip(".")
        why = why if why.startswith("not compared") else f"not compared; {why}"
        return f"{c.variant} vs {c.control} {where}: {why}."
    values = f"{_value(c, c.variant_value)} vs {_value(c, c.control_value)}"
    confidence = confidence_label(alpha)
    interval = f"{confidence} CI {_interval(c.ci_low, c.ci_high)}{unit}"
    method = "Holm" if c.correction == "holm" else "BH"
    numbers = f"effect {_effect(c)} ({interval}), p {_fmt_p(c.p_adjusted)} ({method})"
    if c.verdict in ("better", "worse"):
        text = f"{c.variant} is {c.verdict} than {c.control} {where}: {values}, {numbers}."
    else:
        if c.mde is not None:
            reach = f"the smallest effect this design detects (MDE) is {number(c.mde)}{unit}"
        else:
            reach = (c.mde_note or "no minimum detectable effect").rstrip(".")
        text = (
            f"{c.variant} vs {c.control} {where}: no detectable difference "
            f"({values}, {numbers}); {reach}."
        )
    if c.explanation:
        text += f" {c.explanation[0].upper()}{c.explanation[1:].rstrip('.')}."
    return text


def grading_lines(grading: GradingSummary | None) -> list[str]:
    """How many trials were graded, and one line per reason the others were not."""
    if grading is None:
        return []
    lines = [f"{grading.graded} of {grading.trials} counted trial(s) graded."]
    reasons = list(grading.not_graded.items())
    lines += [f"{n} not graded: {reason}" for reason, n in reasons[:_REASONS_SHOWN]]
    if rest := reasons[_REASONS_SHOWN:]:
        lines.append(
            f"{sum(n for _, n in rest)} not graded for {len(rest)} other reason(s); "
            "each trial's is its grader_error in trials.jsonl"
        )
    return lines


def scripted_banner(report: Report) -> str | None:
    """The warning that answers came from teamlead's scripted model; None when none did."""
    if not report.scripted_trials:
        return None
    share = (
        "every counted trial was"
        if report.scripted_trials == report.trials
        else f"{report.scripted_trials} of {report.trials} counted trials were"
    )
    return (
        f"Scripted model: {share} answered by teamlead's scripted model server, not by a "
        "real model. The verdicts show what the analysis finds in the script's behaviour, "
        "not how a model behaves; costs are the CLI's list-price estimate for the scripted "
        "tokens, and nothing was charged."
    )


def fold_notes(notes: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Notes that say the same thing about several subjects, folded into one each.

    A note reads ``SUBJECT: TEXT``; notes with the same ``TEXT`` become one entry
    ``(TEXT, [SUBJECT, ...])``, at the place of the first. A note that stands alone comes
    back whole, as ``(NOTE, [])``.

    Example:
        >>> fold_notes(["a cost: zero variance", "b cost: zero variance", "one note"])
        [('zero variance', ['a cost', 'b cost']), ('one note', [])]
    """
    groups: dict[str, list[str]] = {}
    whole: dict[str, str] = {}
    for note in notes:
        subject, sep, text = note.partition(": ")
        key = text if sep else note
        groups.setdefault(key, []).append(subject if sep else "")
        whole.setdefault(key, note)
    return [
        (key, subjects) if len(subjects) > 1 else (whole[key], [])
        for key, subjects in groups.items()
    ]
