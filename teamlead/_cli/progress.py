"""The experiment commands' glue: a progress bar over the runner, and report loading.

:func:`run_with_progress` records the experiment's control variant in
``<out>/experiment.json`` and runs the spec under a rich progress bar;
:func:`report_for` reads ``trials.jsonl`` back (control from that file unless given),
builds and writes the report, and returns the text the command prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..errors import UsageError
from ..experiment import (
    ExperimentProgress,
    ExperimentSpec,
    Report,
    RunSummary,
    build_report,
    read_records,
    render_json,
    render_markdown,
    run_experiment,
    write_report,
)

__all__ = ["report_for", "run_with_progress"]

_CONTROL_FILE = "experiment.json"


def run_with_progress(
    spec: ExperimentSpec, out_dir: Path, *, show: bool = True, ray: bool = False
) -> RunSummary:
    """Run ``spec`` with a live bar: done/total, in flight, 429s, ETA, concurrency changes.

    ``ray`` runs each trial as a Ray task (:mod:`teamlead.experiment.ray_backend`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / _CONTROL_FILE).write_text(
        json.dumps(
            {
                "version": 1,
                "name": spec.experiment.name,
                "control": spec.experiment.control,
                "seed": spec.experiment.seed,
            },
            indent=2,
        )
    )
    console = Console(stderr=True)
    columns: list[Any] = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "in flight {task.fields[in_flight]} · 429s {task.fields[limited]} · "
            "retried {task.fields[retried]}"
        ),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, disable=not show, transient=False) as bar:
        task = bar.add_task(
            spec.experiment.name, total=spec.total_trials, in_flight=0, limited=0, retried=0
        )
        seen_changes = seen_errors = 0

        def update(p: ExperimentProgress) -> None:
            nonlocal seen_changes, seen_errors
            bar.update(
                task,
                completed=p.done + p.skipped,
                in_flight=p.in_flight,
                limited=p.rate_limited,
                retried=p.retried,
            )
            for change in p.changes[seen_changes:]:
                bar.console.print(
                    f"concurrency {change.key}: {change.previous_cap} -> {change.cap} "
                    f"({change.reason})"
                )
            seen_changes = len(p.changes)
            for error in p.grader_errors[seen_errors:]:
                bar.console.print(
                    f"[yellow]grader failed for {error}; the trial is kept without a grade"
                )
            seen_errors = len(p.grader_errors)

        if not ray:
            return anyio.run(lambda: run_experiment(spec, out_dir, on_progress=update))
        from ..experiment.ray_backend import ray_session, run_experiment_ray

        with ray_session():
            return anyio.run(lambda: run_experiment_ray(spec, out_dir, on_progress=update))


def report_for(
    out_dir: Path,
    *,
    control: str | None,
    seed: int,
    json_: bool,
    plots: bool,
    html: Path | None = None,
) -> tuple[Report, str, list[str]]:
    """Build the report of ``out_dir``; returns (report, text to print, warnings).

    The Markdown form also writes ``report.md``, ``report.json`` and, when matplotlib is
    installed, the PNG plots into ``out_dir`` (without matplotlib they are skipped with a
    warning naming the extra). ``json_`` writes nothing: the JSON goes to stdout only.
    ``html`` writes the self-contained HTML report there.
    """
    from ..experiment.html import render_html
    from ..experiment.plots import matplotlib_available

    path = out_dir / "trials.jsonl"
    if not path.exists():
        raise UsageError(
            f"no trials.jsonl in {out_dir}; "
            f"run `teamlead experiment run SPEC --out {out_dir}` first"
        )
    read = read_records(path)
    warnings = [f"trials.jsonl line {w.line}: {w.message}" for w in read.warnings]
    if control is None:
        meta = out_dir / _CONTROL_FILE
        try:
            control = json.loads(meta.read_text())["control"]
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError("cannot tell the control variant; pass --control NAME") from None
    variants = {r.variant for r in read.records}
    if control not in variants:
        raise UsageError(
            f"control {control!r} has no trials in {path} "
            f"(variants: {', '.join(sorted(variants)) or 'none'})"
        )
    report = build_report(read.records, control=control, seed=seed)
    if not json_:
        with_plots = plots and matplotlib_available()
        if plots and not with_plots:
            warnings.append(
                "plots skipped: matplotlib is not installed; "
                "pip install 'teamlead[plots]' to get them"
            )
        write_report(out_dir, report, plots=with_plots)
    if html is not None:
        try:
            html.write_text(render_html(report, read.records), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {html}: {exc.strerror or exc}") from None
    text = render_json(report) if json_ else render_markdown(report)
    return report, text, warnings
