"""The experiment report as text and files: Markdown tables, JSON, and the report folder.

:func:`render_markdown` prints a :class:`~teamlead.experiment.reporting.report.Report` as tables
readable in a terminal; :func:`render_json` is its stable, versioned machine form
(:meth:`Report.to_json <teamlead.experiment.reporting.report.Report.to_json>` as text);
:func:`write_report` writes ``report.md``, ``report.json`` and, through
:mod:`teamlead.experiment.reporting.plots`, one PNG per metric.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..stats.explain import confidence_label, rule_text
from .headline import fold_notes, grading_lines, headline, scripted_banner, sig
from .headline import number as _fmt
from .report import MeanSummary, RateSummary, Report, why_lines

__all__ = ["render_json", "render_markdown", "write_report"]


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


def mde_cell(rise: float | None, drop: float | None, unit: str) -> str:
    """The MDE column: ``rise 0.2, drop none`` (a factor with ``x`` for a ratio)."""
    parts = [
        f"{name} {'none' if value is None else f'{_fmt(value)}{unit}'}"
        for name, value in (("rise", rise), ("drop", drop))
    ]
    return ", ".join(parts)


def _mean_cell(mean: MeanSummary, fmt: Callable[[float | None], str] = _fmt) -> str:
    if mean.interval_of == "geometric mean":
        return (
            f"{fmt(mean.mean)} (median {fmt(mean.median)}, geo {fmt(mean.geo_mean)}) "
            f"geo [{fmt(mean.ci_low)}, {fmt(mean.ci_high)}]"
        )
    return f"{fmt(mean.mean)} (median {fmt(mean.median)}) [{fmt(mean.ci_low)}, {fmt(mean.ci_high)}]"


def _notes_markdown(notes: Sequence[str]) -> list[str]:
    out = []
    for text, subjects in fold_notes(notes):
        if subjects:
            out.append(f"- {text} ({len(subjects)} cases: {'; '.join(subjects)})")
        else:
            out.append(f"- {text}")
    return out


def render_markdown(report: Report) -> str:
    """The report as Markdown tables, readable in a terminal as is.

    Example:
        >>> print(render_markdown(report))  # doctest: +SKIP
    """
    confidence = confidence_label(report.alpha)
    out = [f"# Experiment report (control: {report.control})", ""]
    banner = scripted_banner(report)
    if banner:
        out += [f"> **{banner}**", ""]
    primary = [c for c in report.comparisons if c.metric == report.primary_metric]
    if primary:
        out += [f"## Verdicts on the primary metric ({report.primary_metric})", ""]
        out += [f"- {headline(c, report.alpha)}" for c in primary] + [""]
    out += ["## Variants", ""]
    rows = []
    with_passed = any(s.passed_rate is not None for s in report.variants.values())
    for name, s in report.variants.items():
        row = [name, str(s.trials)]
        rates: list[RateSummary | None] = [s.parallel_rate, s.delegated_rate]
        if with_passed:
            rates.insert(0, s.passed_rate)
        if s.not_compared:
            rows.append([*row, f"{s.not_compared} ({s.excluded})", *["-"] * (len(rates) + 3)])
            continue
        for rate in rates:
            if rate is None:
                row.append("n/a")
                continue
            row.append(f"{_fmt(rate.estimate)} {_interval(rate.ci_low, rate.ci_high)}")
        for mean, fmt in (
            (s.wall_s, _fmt),
            (s.agent_calls, _fmt),
            (s.cost_usd, sig),
            (s.tokens, _fmt),
        ):
            row.append(_mean_cell(mean, fmt))
        rows.append(row)
    out += _table(
        [
            "variant",
            "trials",
            *(["passed rate"] if with_passed else []),
            "parallel rate",
            "delegated rate",
            "wall s",
            "Agent calls",
            "cost USD",
            "tokens",
        ],
        rows,
    )
    out += _workflow_table(report)
    out += [
        "",
        f"Rates: pooled over trials, task-clustered Wilson {confidence} CI. Means: mean "
        f"(median) [cluster-robust t {confidence} CI]; for wall time, cost and tokens the "
        "interval is that of the geometric mean (geo), shown beside the mean.",
        "",
    ]
    out += _table(
        ["variant", "rate", "trials", "n_eff", "ICC", "design effect"],
        [
            [name, label, str(rate.n), _fmt(rate.n_eff), _fmt(rate.icc), _fmt(rate.design_effect)]
            for name, s in report.variants.items()
            if not s.not_compared
            for label, rate in (
                ("passed", s.passed_rate),
                ("parallel", s.parallel_rate),
                ("delegated", s.delegated_rate),
            )
            if rate is not None
        ],
    )
    out += [
        "",
        "n_eff: trials divided by the design effect 1 + (m - 1) ICC, m = sum(m_i^2) / sum(m_i); "
        "ICC shrunk towards 0.2.",
        "",
        "Methods:",
        "",
        *(f"- {line}" for line in report.methods),
        "",
        "## Comparisons with the control",
        "",
    ]
    rows = []
    shown_variants: set[str] = set()
    for c in report.comparisons:
        if c.verdict == "not compared":  # one row for all its metrics
            if c.variant not in shown_variants:
                shown_variants.add(c.variant)
                rows.append(
                    [c.variant, "all", "-", "n/a", "-", "-", "-", "-", "0"]
                    + [f"**not compared**: {c.explanation}"]
                )
            continue
        unit = "x" if c.scale == "ratio" else ""
        value = sig if c.metric == "cost_usd" else _fmt
        effect = "n/a" if c.diff is None else f"{_fmt(c.diff)}{unit}"
        mde = mde_cell(c.mde_rise, c.mde_drop, unit) if c.mde_text else "n/a"
        shown = f"**{c.verdict}**"
        if c.verdict == "inconclusive":
            if c.mde is not None:
                shown += f" (detectable {c.mde_direction} of {_fmt(c.mde)}{unit})"
            else:
                shown += f" ({c.reasons.get('mde') or c.mde_note})"
        rows.append(
            [
                c.variant,
                c.metric,
                f"{value(c.variant_value)} vs {value(c.control_value)}",
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
        f"Primary metric: {report.primary_metric} (Holm); the rest: BH. "
        "Variant vs control: means over the compared tasks (geometric means for the ratios "
        "marked x), each task weighing the same "
        "(the headline rates above are pooled over trials, so they can differ). Effect: "
        "variant - control, or variant / control where marked x. p: within-task "
        f"permutation test. MDE: the rise and the drop this rule detects with power "
        f"{report.power:g} on this design, by simulation over the plausible control rates "
        "(none: that direction cannot be detected, the reason is below).",
    ]
    why = why_lines(report)
    if why:
        out += ["", "Why n/a, and why inconclusive:", ""]
        out += [f"- {subject}: {line}." for subject, line in why]
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
            passed = (
                f"passed {_fmt(cell.passed_rate, 2)}, "
                if cell is not None and cell.passed_rate is not None
                else ""
            )
            row.append(
                "-"
                if cell is None
                else f"{passed}{_fmt(cell.parallel_rate, 2)} / {_fmt(cell.delegated_rate, 2)} "
                f"(n={cell.trials}){' flaky' if cell.flaky else ''}"
            )
        rows.append(row)
    out += _table(["task", *names], rows)
    out += ["", "Cells: [passed rate,] parallel rate / delegated rate (trials)."]
    out += [""]
    if report.flaky_tasks:
        out.append(
            "Flaky tasks (parallel both 0 and 1 within a variant): " + ", ".join(report.flaky_tasks)
        )
    else:
        out.append("Flaky tasks: none.")
    if report.grading is not None:
        out += ["", "## Grading", ""] + [f"- {line}" for line in grading_lines(report.grading)]
    if report.notes:
        out += ["", "## Notes", ""] + _notes_markdown(report.notes)
    return "\n".join(out) + "\n"


def render_json(report: Report) -> str:
    """The report's JSON form (``version`` :data:`REPORT_VERSION`, NaN as ``null``), indented;
    no trailing newline.

    Example:
        >>> print(render_json(report))  # doctest: +SKIP
    """
    return json.dumps(report.to_json(), indent=2, allow_nan=False)


def write_report(directory: str | Path, report: Report, *, plots: bool = True) -> list[Path]:
    """Write ``report.md``, ``report.json`` and (with ``plots``) one PNG per metric.

    Raises:
        UsageError: ``plots`` is set but matplotlib is missing (install teamlead[plots]),
            checked before anything is written.

    Example:
        >>> write_report("out/report", report)  # doctest: +SKIP
        [PosixPath('out/report/report.md'), PosixPath('out/report/report.json'), ...]
    """
    from .plots import require_matplotlib, write_plots  # matplotlib only when plotting

    if plots:
        require_matplotlib()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    markdown = folder / "report.md"
    markdown.write_text(render_markdown(report), encoding="utf-8")
    data = folder / "report.json"
    data.write_text(render_json(report) + "\n", encoding="utf-8")
    written = [markdown, data]
    if plots:
        written += write_plots(folder, report)
    return written


def _workflow_table(report: Report) -> list[str]:
    """The variants' workflow agents (nothing when no trial ran one)."""
    rows = [
        [
            name,
            str(w.trials),
            str(w.started),
            str(w.most_at_once),
            str(w.lost),
            str(w.cached),
            str(w.agents_at_once),
        ]
        for name, s in report.variants.items()
        if (w := s.workflow_agents) is not None
    ]
    if not rows:
        return []
    head = [
        "variant",
        "trials with workflows",
        "workflow agents",
        "most at once",
        "lost",
        "from cache",
        "agents at once (all kinds)",
    ]
    note = (
        "Workflow agents: those the lead's workflows started, the most running at once in "
        "one trial, lost (in error or never finished), replayed from the journal; a trial "
        "whose workflow ran two at once counts as parallel."
    )
    return ["", *_table(head, rows), "", note]
