"""The experiment report as one self-contained HTML file.

Everything is inline: the style, the charts (hand-built SVG, so no matplotlib is needed)
and a small script that makes tables sortable. A Content-Security-Policy meta tag forbids
every request that would leave the file, and the page uses no URL at all, so opening it
offline, or from an archive years later, shows exactly what was written. Without
JavaScript the tables are plain and every ``<details>`` drill-down still opens.

Every piece of text that came from a run (final answers, task and variant names, error
classes, provenance) goes through :func:`html.escape`: a final answer is model output
and may contain markup.

Example:
    >>> page = render_html(report, records)  # doctest: +SKIP
    >>> Path("report.html").write_text(page)  # doctest: +SKIP
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence

from ..specs.records import TrialRecord, latest_records
from ..stats.explain import confidence_label, rule_text
from .headline import fold_notes, grading_lines, headline, number, scripted_banner, sig
from .render import mde_cell
from .report import MeanSummary, RateSummary, Report, why_lines
from .svg import interval_glyph, rate_chart

__all__ = ["render_html"]

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#1d1d1f;
padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f6}table.sortable th{cursor:pointer}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
.better{color:#0a7a2f;font-weight:600}.worse{color:#b3261e;font-weight:600}
.inconclusive{color:#6b6b6b;font-weight:600}.note{color:#555}
pre{white-space:pre-wrap;background:#f7f7f9;padding:.5em;max-width:70em}
details{margin:.3em 0}summary{cursor:pointer}.rule{background:#fff8e1;padding:.5em}
.banner{background:#fdecea;border:2px solid #b3261e;padding:.6em .8em;font-weight:600}
#headline ul{list-style:none;padding:0}#headline li{font-size:1.15em;margin:.4em 0;
padding:.5em .7em;border-left:6px solid #6b6b6b;background:#f7f7f9}
#headline li.better{border-color:#0a7a2f;color:inherit;font-weight:400}
#headline li.worse{border-color:#b3261e;color:inherit;font-weight:400}
#headline li.inconclusive{color:inherit;font-weight:400}
#headline li span{text-transform:uppercase;margin-right:.5em;font-size:.85em}
tr.primary td{background:#eef4ff}tr.primary td:nth-child(2),th.primary,td.primary{font-weight:600}
th.primary,td.primary{background:#eef4ff}
"""

_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var up = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('thead th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col];
        var raw = cell ? (cell.getAttribute('data-sort') || cell.textContent) : '';
        var num = parseFloat(raw);
        return isNaN(num) || !/^\\s*[-+]?[0-9.]/.test(raw) ? raw.toLowerCase() : num;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0)
                                            : (typeof x === 'number' ? -1 : 1);
        return up ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; form-action 'none'; base-uri 'none'"
)


_num = number


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _sort_key(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def _td(text: str, sort: float | None = None, raw: bool = False) -> str:
    attr = f' data-sort="{_sort_key(sort)}"' if sort is not None else ""
    return f"<td{attr}>{text if raw else _e(text)}</td>"


def _table(
    header: Sequence[str], rows: Iterable[str], *, table_id: str, highlight: str | None = None
) -> str:
    head = "".join(
        f'<th scope="col"{" class=primary" if h == highlight else ""}>{_e(h)}</th>' for h in header
    )
    return (
        f'<table class="sortable" id="{_e(table_id)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _workflow_agents(report: Report) -> list[str]:
    """The variants' workflow agents (nothing when no trial ran one)."""
    rows = []
    for name, summary in report.variants.items():
        w = summary.workflow_agents
        if w is None:
            continue
        counts = (w.trials, w.started, w.most_at_once, w.lost, w.cached, w.agents_at_once)
        rows.append("<tr>" + _td(name) + "".join(_td(str(n), float(n)) for n in counts) + "</tr>")
    if not rows:
        return []
    header = [
        "variant", "trials with workflows", "workflow agents", "most at once", "lost",
        "from cache", "agents at once (all kinds)",
    ]  # fmt: skip
    note = (
        "<p class=note>Workflow agents: those the lead's workflows started, the most running "
        "at once in one trial, lost (in error or never finished), replayed from the journal; "
        "a trial whose workflow ran two at once counts as parallel.</p>"
    )
    return ["<h3>Workflow agents</h3>", _table(header, rows, table_id="workflow-agents"), note]


def _interval(low: float | None, high: float | None) -> str:
    return f"[{_num(low)}, {_num(high)}]"


def _comparisons(report: Report) -> str:
    """The comparisons table; each distinct MDE note is a footnote below it, not a repeat
    in every row."""
    footnotes = list(dict.fromkeys(c.mde_note for c in report.comparisons if c.mde_note))
    rows = []
    shown_variants: set[str] = set()
    for c in report.comparisons:
        if c.verdict == "not compared":  # one row for all its metrics
            if c.variant not in shown_variants:
                shown_variants.add(c.variant)
                rows.append(
                    "<tr>"
                    + _td(c.variant)
                    + _td("all")
                    + "".join(_td("n/a") for _ in range(8))
                    + _td(
                        f'<span class="inconclusive">not compared</span>'
                        f'<div class="note">{_e(c.explanation)}</div>',
                        raw=True,
                    )
                    + "</tr>"
                )
            continue
        unit = "x" if c.scale == "ratio" else ""
        value = sig if c.metric == "cost_usd" else _num
        primary = c.metric == report.primary_metric
        mde = mde_cell(c.mde_rise, c.mde_drop, unit) if c.mde_text else "n/a"
        tasks = (
            f"<details><summary>{c.tasks}</summary>{_e(', '.join(c.task_ids) or 'none')}</details>"
        )
        reasons = "".join(
            f'<div class="note">{_e(field)} n/a: {_e(reason)}</div>'
            for field, reason in c.reasons.items()
            if field != "mde"
        )
        explanation = f'<div class="note">{_e(c.explanation)}</div>' if c.explanation else ""
        explanation += reasons
        mark = footnotes.index(c.mde_note) + 1 if c.mde_note else None
        mde_note = (f'<div class="note">{_e(c.mde_text)}</div>' if c.mde_text else "") + (
            f' <sup title="see note {mark} below the table">{mark}</sup>' if mark else ""
        )
        rows.append(
            ('<tr class="primary">' if primary else "<tr>")
            + _td(c.variant)
            + _td(f"{c.metric} (primary)" if primary else c.metric)
            + _td(f"{value(c.variant_value)} vs {value(c.control_value)}", c.variant_value)
            + _td(f"{_num(c.diff)}{unit}", c.diff)
            + _td(_interval(c.ci_low, c.ci_high), c.ci_low)
            + _td(interval_glyph(c), raw=True)
            + _td(_num(c.p_value, 4), c.p_value)
            + _td(
                f"{_num(c.p_adjusted, 4)} ({'Holm' if c.correction == 'holm' else 'BH'})",
                c.p_adjusted,
            )
            + _td(f"{_e(mde)}{mde_note}", c.mde, raw=True)
            + _td(tasks, float(c.tasks), raw=True)
            + _td(f'<span class="{_e(c.verdict)}">{_e(c.verdict)}</span>{explanation}', raw=True)
            + "</tr>"
        )
    header = [
        "variant",
        "metric",
        "variant vs control",
        "effect",
        "interval",
        "chart",
        "p",
        "p adjusted",
        "MDE",
        "tasks",
        "verdict",
    ]
    notes = "".join(f"<li>{_e(note)}</li>" for note in footnotes)
    table = _table(header, rows, table_id="comparisons")
    # an <ol>: its items are numbered like the marks in the MDE cells
    return table + (f'<ol class="note" id="mde-notes">{notes}</ol>' if notes else "")


def _variants(report: Report) -> str:
    with_passed = _with_passed(report)
    rows: list[list[str]] = []
    for name, s in report.variants.items():
        cells = [_td(name), _td(str(s.trials), float(s.trials)), _td(str(s.excluded), s.excluded)]
        if s.not_compared:
            span = 4 + 2 * (3 if with_passed else 2)
            note = f'<td colspan="{span}" class="note">{_e(s.not_compared)}</td>'
            rows.append([*cells, note])  # no column to mark: the cells are merged
            continue
        rates: list[RateSummary | None] = [s.parallel_rate, s.delegated_rate]
        for rate in [s.passed_rate, *rates] if with_passed else rates:
            if rate is None:
                cells += [_td("n/a"), _td("n/a")]
                continue
            cells.append(
                _td(f"{_num(rate.estimate)} {_interval(rate.ci_low, rate.ci_high)}", rate.estimate)
            )
            cells.append(_td(f"{_num(rate.n_eff)} / {_num(rate.icc)}", rate.n_eff))
        for mean, fmt in (
            (s.wall_s, _num),
            (s.agent_calls, _num),
            (s.cost_usd, sig),
            (s.tokens, _num),
        ):
            cells.append(_td(_mean_text(mean, fmt), mean.mean))
        rows.append(cells)
    passed = ["passed rate", "passed n_eff / ICC"] if with_passed else []
    header = [
        "variant", "trials", "excluded", *passed, "parallel rate", "parallel n_eff / ICC",
        "delegated rate", "delegated n_eff / ICC", "wall s", "Agent calls", "cost USD", "tokens",
    ]  # fmt: skip
    primary = _PRIMARY_COLUMN.get(report.primary_metric)
    column = header.index(primary) if primary in header else None
    lines = []
    for cells in rows:
        if column is not None and column < len(cells):  # the primary metric's cells stand out
            cells[column] = cells[column].replace("<td", '<td class="primary"', 1)
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return _table(header, lines, table_id="variants", highlight=primary)


# The variants table's column that shows each primary metric.
_PRIMARY_COLUMN = {
    "passed": "passed rate", "parallel": "parallel rate", "delegated": "delegated rate",
    "wall_s": "wall s", "agent_calls": "Agent calls", "cost_usd": "cost USD", "tokens": "tokens",
}  # fmt: skip


def _mean_text(mean: MeanSummary, fmt: Callable[[float | None], str] = _num) -> str:
    low = f"[{fmt(mean.ci_low)}, {fmt(mean.ci_high)}]"
    if mean.interval_of == "geometric mean":
        return f"{fmt(mean.mean)} (geo {fmt(mean.geo_mean)} {low})"
    return f"{fmt(mean.mean)} {low}"


def _with_passed(report: Report) -> bool:
    """Whether the report analysed ``passed`` (every trial ran a check)."""
    return any(s.passed_rate is not None for s in report.variants.values())


def _per_task(report: Report) -> str:
    names = list(report.variants)
    rows = []
    for task, cells in report.tasks.items():
        row = [_td(task)]
        for name in names:
            cell = cells.get(name)
            if cell is None:
                row.append(_td("-"))
            else:
                flaky = " flaky" if cell.flaky else ""
                passed = "" if cell.passed_rate is None else f"passed {_num(cell.passed_rate, 2)}, "
                row.append(
                    _td(
                        f"{passed}{_num(cell.parallel_rate, 2)} / {_num(cell.delegated_rate, 2)} "
                        f"(n={cell.trials}){flaky}",
                        cell.parallel_rate,
                    )
                )
        rows.append("<tr>" + "".join(row) + "</tr>")
    return _table(["task", *names], rows, table_id="tasks")


_PROVENANCE = (
    "prompt_name", "prompt_version", "prompt_sha256", "prompt_source", "model", "cli_version",
    "sdk_version", "teamlead_version", "git_sha", "git_dirty", "workspace", "workspace_setup_s",
    "workspace_path", "started_at", "attempts", "resumes", "scripted_model", "grader_error",
    "grader_cost_usd",
)  # fmt: skip


def _trials(records: Sequence[TrialRecord], names: Sequence[str]) -> str:
    latest = sorted(latest_records(records), key=lambda r: (r.variant, r.task, r.trial))
    order = {name: i for i, name in enumerate(names)}
    latest.sort(key=lambda r: order.get(r.variant, len(order)))
    out = []
    for name in dict.fromkeys(r.variant for r in latest):
        mine = [r for r in latest if r.variant == name]
        items = []
        for r in mine:
            status = r.status + (f" ({r.error_class})" if r.error_class else "")
            provenance = "".join(
                f"<tr><th>{_e(key)}</th><td>{_e(getattr(r, key))}</td></tr>"
                for key in _PROVENANCE
                if getattr(r, key) is not None
            ) + "".join(
                f"<tr><th>{step}</th><td>{_e(run.describe())}, {_num(run.duration_s)} s"
                f"{_e(', output: ' + run.output_file) if run.output_file else ''}</td></tr>"
                for step, run in (("setup", r.setup), ("check", r.check))
                if run is not None
            )
            grade = "" if r.grade is None else f", grade {_num(r.grade)}"
            if r.grade is None and r.grader_error:
                grade += ", not graded"
            if r.passed is not None:
                grade += ", check passed" if r.passed else ", check failed"
            items.append(
                f"<details><summary>{_e(r.task)} #{r.trial}: {_e(status)}, "
                f"{'parallel' if r.parallel else 'not parallel'}, {r.agent_calls} Agent "
                f"call(s), {_num(r.wall_s)} s, ${sig(r.cost_usd)}{_e(grade)}</summary>"
                f"<pre>{_e(r.final_text) or '(no final answer)'}</pre>"
                f"<table>{provenance}</table></details>"
            )
        out.append(
            f"<details><summary>{_e(name)}: {len(mine)} trial(s)</summary>"
            f"{''.join(items)}</details>"
        )
    return "".join(out)


def _headline(report: Report) -> str:
    """The verdicts on the primary metric, one line per comparison, before anything else."""
    primary = [c for c in report.comparisons if c.metric == report.primary_metric]
    if not primary:
        return ""
    items = "".join(
        f'<li class="{_e(c.verdict)}"><span class="{_e(c.verdict)}">{_e(c.verdict)}</span> '
        f"{_e(headline(c, report.alpha))}</li>"
        for c in primary
    )
    title = f"Verdicts on the primary metric, {report.primary_metric}"
    return f'<section id="headline"><h2>{_e(title)}</h2><ul>{items}</ul></section>'


def _grading(report: Report) -> list[str]:
    lines = grading_lines(report.grading)
    if not lines:
        return []
    reasons = "".join(f"<li>{_e(line)}</li>" for line in lines[1:])
    return ["<h2>Grading</h2>", f'<p id="grading">{_e(lines[0])}</p>', f"<ul>{reasons}</ul>"]


def _notes(notes: Sequence[str]) -> str:
    """The notes, those that say the same thing about several subjects folded into one."""
    items = []
    for text, subjects in fold_notes(notes):
        if subjects:
            items.append(
                f"<li><details><summary>{_e(text)} ({len(subjects)} cases)</summary>"
                f"{_e('; '.join(subjects))}</details></li>"
            )
        else:
            items.append(f"<li>{_e(text)}</li>")
    return "".join(items) or "<li>none</li>"


def render_html(report: Report, records: Sequence[TrialRecord]) -> str:
    """The whole report as one HTML page; ``records`` feed the per-trial drill-down.

    Example:
        >>> "<svg" in render_html(report, records)  # doctest: +SKIP
        True
    """
    confidence = confidence_label(report.alpha)
    notes = _notes(report.notes)
    why = "".join(f"<li>{_e(subject)}: {_e(line)}</li>" for subject, line in why_lines(report))
    methods = "".join(f"<li>{_e(line)}</li>" for line in report.methods)
    flaky = ", ".join(report.flaky_tasks) or "none"
    banner = scripted_banner(report)
    body = [
        f"<h1>Experiment report (control: {_e(report.control)})</h1>",
        *([f'<p class="banner" id="scripted" role="note">{_e(banner)}</p>'] if banner else []),
        _headline(report),
        f"<p>alpha {report.alpha:g}, power {report.power:g}, seed {report.seed}, "
        f"report version {report.version}, primary metric {_e(report.primary_metric)} "
        "(Holm; the rest BH).</p>",
        f'<p class="rule">{_e(rule_text(report.alpha, confidence))}</p>',
        "<h2>Variants</h2>",
        *(
            [rate_chart(report, "passed_rate", f"check passed rate with {confidence} interval")]
            if _with_passed(report)
            else []
        ),
        rate_chart(report, "parallel_rate", f"parallel rate with {confidence} interval"),
        rate_chart(report, "delegated_rate", f"delegated rate with {confidence} interval"),
        _variants(report),
        *_workflow_agents(report),
        f"<p class=note>Rates are pooled over trials with a task-clustered Wilson "
        f"{confidence} interval; n_eff is the trials divided by the design effect "
        "1 + (m - 1) ICC with m = sum(m_i^2) / sum(m_i). Means carry a cluster-robust "
        f"t {confidence} interval; for wall time, cost and tokens it is the geometric "
        "mean's (geo).</p>",
        f"<h3>Methods</h3><ul>{methods}</ul>",
        "<h2>Comparisons with the control</h2>",
        _comparisons(report),
        "<p class=note>Variant vs control: means over the compared tasks (geometric means for "
        "the ratios marked x), each task weighing the same. Effect: variant - control, or "
        "variant / control where marked x. Chart: the interval (line) and effect (dot) "
        "against no effect (dashed). MDE: the rise and the "
        f"drop this rule detects with power {report.power:g} on this design, by simulation "
        "over the plausible control rates.</p>",
        *([f"<h3>Why n/a, and why inconclusive</h3><ul>{why}</ul>"] if why else []),
        "<h2>Per task</h2>",
        _per_task(report),
        "<p class=note>Cells: [passed rate,] parallel rate / delegated rate (trials). "
        f"Flaky: {_e(flaky)}.</p>",
        *_grading(report),
        "<h2>Trials</h2>",
        _trials(records, list(report.variants)),
        "<h2>Notes</h2>",
        f'<ul id="notes">{notes}</ul>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Experiment report: {_e(report.control)}</title><style>{_STYLE}</style>"
        f"</head><body>{''.join(body)}<script>{_SCRIPT}</script></body></html>\n"
    )
