"""``teamlead experiment run`` and ``teamlead experiment report``.

The commands parse options and print; running with a progress bar and loading a report
from a trials directory are :func:`~teamlead._cli.progress.run_with_progress` and
:func:`~teamlead._cli.progress.report_for`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..errors import SetupError, UsageError
from .exitcodes import EXIT_PARTIAL, SafeErrorsGroup, handle_errors
from .options import (
    limits_from_options,
    limits_options,
    no_relay_option,
    option,
    session_store_option,
)

__all__ = ["experiment", "require_experiment_extra"]

#: What the statistics import; a plain install carries none of them.
_STATS_MODULES = ("numpy", "scipy", "statsmodels")


def require_experiment_extra(*, grader: bool = False) -> None:
    """Fail with one line naming what to install when the ``experiment`` extra is missing.

    ``grader`` also asks for the ``anthropic`` client the model grader uses (a run may
    grade; a report never does).

    Raises:
        SetupError: numpy, scipy or statsmodels (or anthropic) cannot be imported.
    """
    import importlib

    missing = []
    for name in (*_STATS_MODULES, *(("anthropic",) if grader else ())):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise SetupError(
            f"`teamlead experiment` needs the experiment extra ({', '.join(missing)} missing): "
            "from a checkout, pip install -e '.[experiment]'"
        )


@click.group(cls=SafeErrorsGroup)
def experiment() -> None:
    """A/B experiments on strategy prompts, with statistics."""


@experiment.command("run")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for trials.jsonl (appended; reruns skip finished trials).",
)
@option("--quiet", "-q", is_flag=True, help="No progress bar.")
@option(
    "--backend",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where trials run: this process, or Ray tasks (RAY_ADDRESS, else a local Ray).",
)
@option(
    "--keep-workspaces",
    is_flag=True,
    help="Keep each trial's workspace for debugging (its path goes into the record).",
)
@no_relay_option
@session_store_option()
@limits_options
@handle_errors
def experiment_run(
    spec_path: str,
    out_dir: str,
    quiet: bool,
    backend: str,
    keep_workspaces: bool,
    no_relay: bool,
    session_store: str | None,
    **limits: Any,
) -> None:
    """Run each task x variant x trial of SPEC, a full run each.

    With --backend ray each trial is a Ray task on the cluster at RAY_ADDRESS (or a local
    Ray started for the run); this process still writes trials.jsonl, so runs resume alike.
    With --session-store every trial's transcripts are kept in that store too, whichever
    node ran it.
    """
    require_experiment_extra(grader=True)
    from ..experiment import load_spec
    from ..prompts import load_strategy
    from .progress import run_with_progress
    from .running import check_setup, merged_env

    def exists(name: str) -> bool:
        load_strategy(name)
        return True

    spec = load_spec(spec_path, strategy_exists=exists)
    check_setup(merged_env(), config_dir=False)  # every trial has a config dir of its own
    summary = run_with_progress(
        spec,
        Path(out_dir),
        show=not quiet,
        relay=not no_relay,
        keep_workspaces=keep_workspaces,
        ray=backend == "ray",
        limits=limits_from_options(**limits),
        session_store=(session_store or "").strip() or None,
    )
    from .team_view import cost_text

    click.echo(
        f"ran {summary.ran} trial(s), skipped {summary.skipped} finished, {summary.failed} failed, "
        f"{summary.retried} retried, {summary.rate_limited} rate-limited, "
        f"{cost_text(summary.cost_usd, scripted=summary.scripted)}"
    )
    if summary.stopped_reason:
        click.echo(f"teamlead: stopped early: {summary.stopped_reason}", err=True)
        sys.exit(EXIT_PARTIAL)


@experiment.command("report")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False))
@option("--json", "json_", is_flag=True, help="The report as JSON on stdout.")
@option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False),
    help="Also write the report (Markdown, or JSON with --json) here.",
)
@option("--control", help="Control variant (default: the spec's, recorded in the trials).")
@option(
    "--seed",
    type=click.IntRange(min=0),
    help="Seed for bootstrap and permutations [default: the spec's `seed`, recorded in DIR "
    "by the run; 0 if none is].",
)
@option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@option(
    "--permutations",
    type=click.IntRange(100, 1_000_000),
    default=10_000,
    show_default=True,
    help="Relabelings per permutation test: fewer is faster and coarser.",
)
@option(
    "--mde-simulations",
    type=click.IntRange(20, 100_000),
    default=400,
    show_default=True,
    help="Simulated experiments per minimum detectable effect: fewer is faster and coarser.",
)
@option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False),
    help="Also write a self-contained HTML report (charts, sortable tables, trial drill-down).",
)
@handle_errors
def experiment_report(
    out_dir: str,
    json_: bool,
    out_file: str | None,
    control: str | None,
    seed: int | None,
    no_plots: bool,
    permutations: int,
    mde_simulations: int,
    html_file: str | None,
) -> None:
    """Statistics for DIR's trials: rates, comparisons, verdicts.

    The rates per variant, paired comparisons with the control, verdicts and plots. Writes
    report.md, report.json and PNG plots into DIR (plots need the plots extra);
    with --json it writes nothing and prints the JSON, unless --out or --html ask for a file.
    """
    require_experiment_extra()
    from .progress import report_for

    _, text, warnings = report_for(
        Path(out_dir),
        control=control,
        seed=seed,
        json_=json_,
        plots=not no_plots,
        html=Path(html_file) if html_file else None,
        permutations=permutations,
        mde_simulations=mde_simulations,
    )
    for warning in warnings:
        click.echo(f"teamlead: warning: {warning}", err=True)
    click.echo(text)
    if out_file:
        try:
            Path(out_file).write_text(text + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write --out {out_file}: {exc.strerror or exc}") from None
