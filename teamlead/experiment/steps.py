"""The spec's keys for where a trial runs and how it is judged: workspace, setup, check.

``workspace``, ``setup``, ``check`` and their timeouts may appear in the ``[experiment]``
table (the defaults) and in any ``[[tasks]]`` entry (overrides): both tables inherit
:class:`StepKeys`. :func:`resolve_steps` merges the two into the :class:`Steps` one trial
runs. They live apart from :mod:`~teamlead.experiment.spec` because they are one concept
(issue: a workspace per trial, setup and check commands) with its own rules: a command is
a string split as a shell would, or an argument list; ``""`` or ``[]`` turns an
experiment-level default off for one task.

Example:
    >>> steps = resolve_steps(StepKeys(check="pytest -q"), StepKeys(setup=["make"]))
    >>> steps.setup, steps.check, steps.check_timeout_s
    (['make'], ['pytest', '-q'], 600.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .commands import Command, check_command, split_command
from .workspace import WorkspaceKind

__all__ = ["DEFAULT_TIMEOUT_S", "PrimaryMetric", "StepKeys", "Steps", "resolve_steps"]

DEFAULT_TIMEOUT_S = 600.0
"""A setup or check command's timeout when neither the task nor the experiment sets one."""

PrimaryMetric = Literal[
    "parallel", "delegated", "passed", "wall_s", "agent_calls", "cost_usd", "tokens", "grade"
]
"""The metrics a spec may name as ``primary_metric`` (the names in
:data:`teamlead.experiment.metrics.METRICS`; a test keeps the two in step)."""


class StepKeys(BaseModel):
    """The keys shared by ``[experiment]`` and ``[[tasks]]``.

    ``workspace``: ``worktree``, ``copy`` or ``shared`` (None: a worktree inside a git
    repository, else a copy). ``setup`` runs in the workspace before the lead starts,
    ``check`` after it (exit 0 is ``passed``); each has a timeout in seconds.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    workspace: WorkspaceKind | None = None
    setup: Command | None = None
    check: Command | None = None
    setup_timeout_s: float | None = Field(default=None, gt=0)
    check_timeout_s: float | None = Field(default=None, gt=0)

    _commands = field_validator("setup", "check", mode="before")(check_command)


@dataclass(frozen=True)
class Steps:
    """What one task's trials run: the workspace kind and the commands as arguments."""

    workspace: WorkspaceKind | None
    setup: list[str] | None
    check: list[str] | None
    setup_timeout_s: float
    check_timeout_s: float


def resolve_steps(task: StepKeys, default: StepKeys) -> Steps:
    """The task's keys where it sets them, else the experiment's (``default``)."""
    return Steps(
        workspace=task.workspace or default.workspace,
        setup=split_command(task.setup if task.setup is not None else default.setup),
        check=split_command(task.check if task.check is not None else default.check),
        setup_timeout_s=task.setup_timeout_s or default.setup_timeout_s or DEFAULT_TIMEOUT_S,
        check_timeout_s=task.check_timeout_s or default.check_timeout_s or DEFAULT_TIMEOUT_S,
    )
