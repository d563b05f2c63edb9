"""One trial's life around its lead: a workspace, the setup command, the lead, the check.

The runner hands in the lead as a callable (options, cwd) -> outcome; this module makes
the trial's workspace and Claude config dir, runs ``setup`` (a failure is an
infrastructure failure, so the runner retries it), runs the lead there, runs ``check``
(exit 0 is ``passed``), and adds the workspace's provenance to the record. The workspace
is removed on the way out, whatever happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

from ..._version import __version__
from ..specs.records import CommandRun, TrialKey, TrialRecord
from ..specs.spec import ExperimentSpec, TaskSpec
from .trial_commands import command_env, output_name, run_command
from .workspace import Workspace, WorkspaceError, Workspaces

__all__ = ["Lead", "Outcome", "run_trial", "trial_source"]

#: (record, infrastructure failure?, 429s met)
Outcome = tuple[TrialRecord, bool, int]
"""(record, infrastructure failure?, retry-after hint)."""

Lead = Callable[[ClaudeAgentOptions, Path], Awaitable[Outcome]]
"""Runs the lead with these options (env included) in this directory."""


def trial_source(spec: ExperimentSpec, task: TaskSpec, base: ClaudeAgentOptions) -> Path:
    """The directory a trial's workspace comes from: the task's or experiment's ``cwd``,
    else the base options' ``cwd``, else this process's working directory."""
    return Path(spec.cwd_for(task) or base.cwd or Path.cwd())


async def run_trial(
    key: TrialKey,
    spec: ExperimentSpec,
    base: ClaudeAgentOptions,
    lead: Lead,
    attempt: int,
    workspaces: Workspaces,
    out_dir: Path,
) -> Outcome:
    """Run one trial in its own workspace: setup, the lead, check.

    Returns (record, infrastructure failure?, retry-after hint). A workspace that cannot
    be made, or a setup command that fails, is an infrastructure failure.
    """
    task = spec.task(key.task)
    started_at = datetime.now(timezone.utc)
    try:
        async with workspaces.open(
            trial_source(spec, task, base), spec.steps_for(task).workspace, base.env
        ) as ws:
            record, infra, hint = await _in_workspace(key, spec, base, lead, attempt, ws, out_dir)
    except WorkspaceError as exc:
        text = f"workspace failed: {exc}"
        return _infra_record(key, spec, text, started_at), True, 0
    update: dict[str, Any] = {
        "workspace": ws.kind,
        "workspace_setup_s": ws.setup_s,
        "git_sha": ws.commit,
        "git_dirty": ws.dirty,
        "skipped_links": ws.skipped_links,
    }
    if workspaces.keep:
        update["workspace_path"] = str(ws.root)
    return record.model_copy(update=update), infra, hint


def _infra_record(
    key: TrialKey, spec: ExperimentSpec, text: str, started_at: datetime
) -> TrialRecord:
    return TrialRecord(
        variant=key.variant,
        task=key.task,
        trial=key.trial,
        status="failed",
        error_class="infrastructure",
        wall_s=(datetime.now(timezone.utc) - started_at).total_seconds(),
        final_text=text,
        model=spec.model_for(spec.variant(key.variant)),
        teamlead_version=__version__,
        started_at=started_at,
    )


async def _in_workspace(
    key: TrialKey,
    spec: ExperimentSpec,
    base: ClaudeAgentOptions,
    lead: Lead,
    attempt: int,
    ws: Workspace,
    out_dir: Path,
) -> Outcome:
    task = spec.task(key.task)
    env = {**base.env, "CLAUDE_CONFIG_DIR": str(ws.config_dir)}
    steps = spec.steps_for(task)

    async def command(argv: list[str] | None, step: str, timeout_s: float) -> CommandRun | None:
        if argv is None:
            return None
        name = output_name(key.variant, key.task, key.trial, attempt, step)
        return await run_command(
            argv, cwd=ws.cwd, env=command_env(env), timeout_s=timeout_s, out_dir=out_dir, name=name
        )

    started_at = datetime.now(timezone.utc)
    setup = await command(steps.setup, "setup", steps.setup_timeout_s)
    if setup is not None and not setup.ok:
        record = _infra_record(key, spec, f"setup failed: {setup.describe()}", started_at)
        return record.model_copy(update={"setup": setup}), True, 0
    trial_base = dataclasses.replace(base, env=env)
    record, infra, hint = await lead(trial_base, ws.cwd)
    check = None if infra else await command(steps.check, "check", steps.check_timeout_s)
    if check is not None and check.error is not None:
        infra = True  # the check could not even start: the harness's problem, not the model's
        record = record.model_copy(update={"status": "failed", "error_class": "infrastructure"})
    passed = None if check is None or check.error is not None else check.ok
    return record.model_copy(update={"setup": setup, "check": check, "passed": passed}), infra, hint
