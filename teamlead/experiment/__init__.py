"""Prompt-strategy A/B experiments: the spec, trial records, statistics and the report.

The modules form a one-way chain, each importing only those before it:
``spec``/``records`` -> ``runner`` (run the trials) and ``intervals`` -> ``stats`` ->
``power`` (the simulated MDE) -> ``verdicts`` -> ``explain`` -> ``metrics`` ->
``comparisons`` -> ``report`` (models, :func:`build_report`) -> ``plots``, ``render``
(Markdown, JSON, the report folder) and ``html``. This package re-exports the API users
call.
"""

from __future__ import annotations

from .metrics import METRICS, Metric
from .records import (
    RECORD_VERSION,
    ReadResult,
    RecordWarning,
    TrialKey,
    TrialRecord,
    TrialStatus,
    TrialWriter,
    append_record,
    finished_keys,
    latest_records,
    read_records,
)
from .render import render_json, render_markdown, write_report
from .report import (
    REPORT_VERSION,
    Comparison,
    MeanSummary,
    RateSummary,
    Report,
    TaskCell,
    VariantSummary,
    build_report,
)
from .runner import ExperimentProgress, RunSummary, run_experiment
from .spec import (
    ExperimentSettings,
    ExperimentSpec,
    GraderSpec,
    TaskSpec,
    VariantSpec,
    load_spec,
    parse_spec,
)
from .synthetic import synthetic_records

__all__ = [
    "METRICS",
    "RECORD_VERSION",
    "REPORT_VERSION",
    "Comparison",
    "ExperimentProgress",
    "ExperimentSettings",
    "ExperimentSpec",
    "GraderSpec",
    "MeanSummary",
    "Metric",
    "RateSummary",
    "ReadResult",
    "RecordWarning",
    "Report",
    "RunSummary",
    "TaskCell",
    "TaskSpec",
    "TrialKey",
    "TrialRecord",
    "TrialStatus",
    "TrialWriter",
    "VariantSpec",
    "VariantSummary",
    "append_record",
    "build_report",
    "finished_keys",
    "latest_records",
    "load_spec",
    "parse_spec",
    "read_records",
    "render_json",
    "render_markdown",
    "run_experiment",
    "synthetic_records",
    "write_report",
]
