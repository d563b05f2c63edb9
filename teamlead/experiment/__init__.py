"""Prompt-strategy A/B experiments: the spec, trial records, statistics and the report.

The subpackages follow the stages of an experiment, each importing only those before it:
``specs`` (the spec and the trial records) -> ``running`` (run the trials) and ``stats``
(the statistics, clustered by task) -> ``reporting`` (the report, its Markdown, JSON,
plots and HTML). This package re-exports the API users call.
"""

from __future__ import annotations

from .reporting.render import render_json, render_markdown, write_report
from .reporting.report import (
    REPORT_VERSION,
    Comparison,
    GradingSummary,
    MeanSummary,
    RateSummary,
    Report,
    TaskCell,
    VariantSummary,
    WorkflowAgentsSummary,
    build_report,
)
from .running.runner import ExperimentProgress, RunSummary, run_experiment
from .specs.records import (
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
from .specs.spec import (
    ExperimentSettings,
    ExperimentSpec,
    GraderSpec,
    TaskSpec,
    VariantSpec,
    load_spec,
    parse_spec,
)
from .specs.synthetic import synthetic_records
from .stats.metrics import METRICS, Metric

__all__ = [
    "METRICS",
    "RECORD_VERSION",
    "REPORT_VERSION",
    "Comparison",
    "ExperimentProgress",
    "ExperimentSettings",
    "ExperimentSpec",
    "GraderSpec",
    "GradingSummary",
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
    "WorkflowAgentsSummary",
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
