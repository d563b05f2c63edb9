"""The experiment commands' glue: a progress bar over the runner, and report loading.

:func:`run_with_progress` records the experiment's control variant and primary metric
in ``<out>/experiment.json`` and runs the spec under a rich progress bar;
:func:`report_for` reads ``trials.jsonl`` back (control from that file unless given),
builds and writes the report, and returns the text the command prints.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from .._private import json_object
from .._procs import stop_descendants
from .._redact import terminal_safe
from .._sessions import close_store
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
from ..experiment.running.outdir import make_out_dir
from ..experiment.stats.metrics import PRIMARY_METRIC
from ..policy import LimitsPolicy, Policy
from ..sessions import open_session_store
from .exitcodes import EXIT_INTERRUPTED, fail
from .signals import run_interruptible

__all__ = ["report_for", "run_with_progress"]

_CONTROL_FILE = "experiment.json"


def run_with_progress(
    spec: ExperimentSpec,
    out_dir: Path,
    *,
    show: bool = True,
    relay: bool = True,
    keep_workspaces: bool = False,
    ray: bool = False,
    limits: LimitsPolicy | None = None,
    session_store: str | None = None,
) -> RunSummary:
    """Run ``spec`` with a live bar: done/total, in flight, 429s, ETA, concurrency changes.

    ``ray`` runs each trial as a Ray task (:mod:`teamlead.experiment.running.ray_backend`);
    ``limits`` are the relay's ceilings and where its learnt limits are shared;
    ``session_store`` is the URL of the store every trial's transcripts are kept in too.
    """
    store = open_session_store(session_store) if session_store is not None else None
    base = ClaudeAgentOptions(session_store=store)
    make_out_dir(out_dir)
    control = {
        "version": 1,
        "name": spec.experiment.name,
        "control": spec.experiment.control,
        "seed": spec.experiment.seed,
        "primary_metric": spec.experiment.primary_metric,
    }
    try:
        (out_dir / _CONTROL_FILE).write_text(json.dumps(control, indent=2))
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out_dir}: {exc.strerror or exc}") from None
    console = Console(stderr=True)
    columns: list[Any] = [
        TextColumn("{task.description}", style="bold", markup=False),
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
            terminal_safe(spec.experiment.name),
            total=spec.total_trials,
            in_flight=0,
            limited=0,
            retried=0,
        )
        seen_changes = seen_errors = 0
        reasons: set[str] = set()

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
                    Text(
                        f"concurrency {change.key}: {change.previous_cap} -> {change.cap} "
                        f"({terminal_safe(change.reason)})"
                    )
                )
            seen_changes = len(p.changes)
            for error in p.grader_errors[seen_errors:]:
                trial, _, why = error.partition(": ")
                if why in reasons:  # said once; the report counts them all
                    continue
                reasons.add(why)
                text = (
                    f"not graded: {terminal_safe(trial)}: {terminal_safe(why)}; the trial is "
                    "kept without a grade (later trials with this reason are not listed)"
                )
                bar.console.print(Text(text, style="yellow"))
            seen_errors = len(p.grader_errors)

        policy = Policy(relay=relay, limits=limits or LimitsPolicy())
        given: dict[str, Any] = {
            "base_options": base,
            "policy": policy,
            "on_progress": update,
            "keep_workspaces": keep_workspaces,
        }
        if ray:
            from ..experiment.running.ray_backend import ray_session, run_experiment_ray

            # on a stop, Ray cancels the trials as the run unwinds: stopping this process's
            # descendants at once would kill a local Ray under it
            with ray_session():
                result, stopped = run_interruptible(
                    lambda: run_experiment_ray(spec, out_dir, **given), stop=lambda: None
                )
            if stopped is not None:
                stop_descendants()  # whatever outlived the Ray shutdown
        else:

            async def local() -> RunSummary:
                try:
                    return await run_experiment(spec, out_dir, **given)
                finally:  # the store's connections belong to this event loop
                    await close_store(base.session_store)

            result, stopped = run_interruptible(local)
    if stopped is not None or result is None:  # the CLI tree is stopped by now
        fail(
            f"interrupted; finished trials are kept in {out_dir}: "
            "run the same command again to continue",
            EXIT_INTERRUPTED,
        )
    return result


def report_for(
    out_dir: Path,
    *,
    control: str | None,
    seed: int | None,
    json_: bool,
    plots: bool,
    html: Path | None = None,
    permutations: int = 10_000,
    mde_simulations: int = 400,
) -> tuple[Report, str, list[str]]:
    """Build the report of ``out_dir``; returns (report, text to print, warnings).

    ``permutations`` and ``mde_simulations`` size the permutation tests and the simulated
    minimum detectable effects (see :func:`~teamlead.experiment.build_report`). ``seed``
    ``None`` is the spec's, as the run recorded it in ``out_dir`` (0 when none is), so the
    report names the seed it really used.

    The Markdown form also writes ``report.md``, ``report.json`` and, when matplotlib is
    installed, the PNG plots into ``out_dir`` (without matplotlib they are skipped with a
    warning naming the extra, unless ``html`` is asked for: that page draws its own charts,
    so the plots were not what was asked). ``json_`` writes nothing: the JSON goes to
    stdout only. ``html`` writes the self-contained HTML report there.
    """
    from ..experiment.reporting.html import render_html
    from ..experiment.reporting.plots import matplotlib_available

    path = out_dir / "trials.jsonl"
    if not path.exists():
        raise UsageError(
            f"no trials.jsonl in {out_dir}; "
            f"run `teamlead experiment run SPEC --out {out_dir}` first"
        )
    read = read_records(path)
    warnings = [f"trials.jsonl line {w.line}: {w.message}" for w in read.warnings]
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError):
        meta = json_object((out_dir / _CONTROL_FILE).read_bytes()) or {}
    if control is None:
        control = meta.get("control")
        if not isinstance(control, str):
            raise UsageError("cannot tell the control variant; pass --control NAME") from None
    variants = {r.variant for r in read.records}
    if control not in variants:
        raise UsageError(
            f"control {control!r} has no trials in {path} "
            f"(variants: {', '.join(sorted(variants)) or 'none'})"
        )
    primary = meta.get("primary_metric")
    if seed is None:
        recorded = meta.get("seed")
        seed = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else 0
    report = build_report(
        read.records,
        control=control,
        seed=max(0, seed),
        n_permutations=permutations,
        mde_simulations=mde_simulations,
        primary=primary if isinstance(primary, str) else PRIMARY_METRIC,
    )
    if not json_:
        with_plots = plots and matplotlib_available()
        if plots and not with_plots and html is None:  # the HTML page needs no PNG
            warnings.append(
                "plots skipped: matplotlib is not installed; "
                "from a checkout, pip install -e '.[plots]' to get them"
            )
        write_report(out_dir, report, plots=with_plots)
    if html is not None:
        try:
            html.write_text(render_html(report, read.records), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {html}: {exc.strerror or exc}") from None
    text = render_json(report) if json_ else render_markdown(report)
    return report, text, warnings
