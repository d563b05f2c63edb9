"""The report's JSON versions: what each added, and reading a ``report.json`` of any of them.

:data:`REPORT_VERSION` is the version :meth:`~teamlead.experiment.reporting.report.Report.to_json`
writes; :func:`upgrade_report_json` reads every earlier one as the current form, so a file
written by an older teamlead stays readable.
"""

from __future__ import annotations

from typing import Any

from ...errors import UsageError
from ..stats.metrics import METRICS, PRIMARY_METRIC

__all__ = ["REPORT_VERSION", "upgrade_report_json"]

REPORT_VERSION = 4
"""4 added, per variant, ``workflow_agents`` (``trials``, ``started``, ``most_at_once``,
``lost``, ``cached``, ``agents_at_once``; ``null`` when no trial ran a workflow agent).
3 added, per comparison, ``estimand``, ``mde_direction``, ``mde_rise``, ``mde_drop``,
``mde_text`` and ``reasons`` (why each n/a field is n/a), and the verdict ``not compared``
(a variant whose trials all failed as infrastructure); ``mde`` is now the MDE in
``mde_direction`` (for a ratio a factor below 1 when that is a drop). Per mean,
``geo_mean``, ``interval_of`` (``ci_low``/``ci_high`` bound the geometric mean of times,
costs and tokens) and ``note``; per rate ``note``; per variant ``not_compared``; and the
report's ``methods``. 2 added, per comparison, ``scale``, ``correction``, the compared
``tasks`` (a list; the count is ``n_tasks``), the task-weighted
``variant_value``/``control_value``, ``weighting``, ``mde_note`` and ``explanation``; per
rate ``n``, ``n_eff``, ``icc`` and
``design_effect``; per variant ``passed_rate`` (when every trial ran a check); and the
report's ``rule``, ``notes`` and ``primary_metric``. :func:`upgrade_report_json` reads
every version."""


def upgrade_report_json(data: dict[str, Any]) -> dict[str, Any]:
    """Read a ``report.json`` of any version up to :data:`REPORT_VERSION` as the current form.

    Keys that older versions did not write come back as ``None`` (or empty lists and
    mappings); a version 2 mean's interval is that of the arithmetic mean
    (``interval_of``: ``mean``).

    Raises:
        UsageError: not a report, or written by a newer teamlead.

    Example:
        >>> upgrade_report_json({"version": 1, "variants": {}, "comparisons": [],
        ...                      "tasks": {}, "flaky_tasks": []})["notes"]
        []
    """
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"not an experiment report (version {version!r})")
    if version > REPORT_VERSION:
        raise UsageError(
            f"report version {version} is newer than this teamlead reads ({REPORT_VERSION})"
        )
    out = dict(data)
    out.setdefault("primary_metric", PRIMARY_METRIC)  # written since passed could be primary
    for key in ("trials", "scripted_trials", "grading"):  # written since grading was summed up
        out.setdefault(key, None)
    if version == 1:
        for key in ("control", "alpha", "power", "seed", "rule"):
            out.setdefault(key, None)
        out.setdefault("notes", [])
        upgraded = []
        for comparison in data.get("comparisons", []):
            entry = dict(comparison)
            metric = next((m for m in METRICS if m.name == entry.get("metric")), None)
            entry.setdefault("scale", metric.scale if metric else None)
            primary = entry.get("metric") == PRIMARY_METRIC
            entry.setdefault("correction", "holm" if primary else "fdr_bh")
            for key in ("tasks", "n_tasks", "variant_value", "control_value", "weighting"):
                entry.setdefault(key, None)
            for key in ("exact", "mde_note", "explanation"):
                entry.setdefault(key, None)
            upgraded.append(entry)
        out["comparisons"] = upgraded
    if version <= 2:
        out.setdefault("methods", [])
        comparisons = []
        for comparison in out.get("comparisons", []):
            entry = dict(comparison)
            for key in ("estimand", "mde_direction", "mde_rise", "mde_drop", "mde_text"):
                entry.setdefault(key, None)
            entry.setdefault("reasons", {})
            comparisons.append(entry)
        out["comparisons"] = comparisons
        variants = {}
        for name, summary in out.get("variants", {}).items():
            entry = dict(summary)
            entry.setdefault("not_compared", None)
            for key, value in summary.items():
                if isinstance(value, dict) and "ci_low" in value:
                    value = dict(value)
                    value.setdefault("note", None)
                    if "mean" in value:
                        value.setdefault("geo_mean", None)
                        value.setdefault("interval_of", "mean")
                    entry[key] = value
            variants[name] = entry
        out["variants"] = variants
    if version <= 3:
        out["variants"] = {
            name: {**summary, "workflow_agents": summary.get("workflow_agents")}
            for name, summary in out.get("variants", {}).items()
        }
    out["version"] = REPORT_VERSION
    return out
