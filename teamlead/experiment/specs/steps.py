"""The spec's keys for where a trial runs and how it is judged: workspace, setup, check.

``workspace``, ``setup``, ``check`` and their timeouts may appear in the ``[experiment]``
table (the defaults) and in any ``[[tasks]]`` entry (overrides): both tables inherit
:class:`StepKeys`. :func:`resolve_steps` merges the two into the :class:`Steps` one trial
runs. They live apart from :mod:`~teamlead.experiment.specs.spec` because they are one concept
(issue: a workspace per trial, setup and check commands) with its own rules: a command is
a string split as a shell would, or an argument list; ``""`` or ``[]`` turns an
experiment-level default off for one task.

Example:
    >>> steps = resolve_steps(StepKeys(check="pytest -q"), StepKeys(setup=["make"]))
    >>> steps.setup, steps.check, steps.check_timeout_s
    (['make'], ['pytest', '-q'], 600.0)
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...policy import MAX_SECONDS

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Command",
    "PrimaryMetric",
    "StepKeys",
    "Steps",
    "WorkspaceKind",
    "check_command",
    "resolve_steps",
    "shell_syntax",
    "split_command",
]

WorkspaceKind = Literal["worktree", "copy", "shared"]
"""Where a trial runs: a git worktree, a copy of the task's folder, or the folder itself."""

Command = str | list[str]
"""A command in a spec: an argument list, or one string split as a shell would (but run
without one; ``""`` or ``[]`` means no command)."""


DEFAULT_TIMEOUT_S = 600.0
"""A setup or check command's timeout when neither the task nor the experiment sets one."""

PrimaryMetric = Literal[
    "parallel", "delegated", "passed", "wall_s", "agent_calls", "cost_usd", "tokens", "grade"
]
"""The metrics a spec may name as ``primary_metric`` (the names in
:data:`teamlead.experiment.stats.metrics.METRICS`; a test keeps the two in step)."""


_OPERATORS = ("&&", "||", ">>", ">&", "|", "&", ";", ">", "<")


def shell_syntax(command: str) -> list[str]:
    """The shell syntax in ``command`` that a shell would act on, in order of appearance.

    Commands run without a shell, so ``$(...)``, backticks, pipes, ``&&``/``||``, ``;``,
    ``&`` and redirections would reach the program as plain arguments. Quoted text counts
    as an argument (``grep 'a|b'`` is fine), except that ``$(`` and backticks inside
    double quotes are still shell syntax.

    Example:
        >>> shell_syntax("test $(ls out-*.txt | wc -l) -eq 1")
        ['$(', '|']
        >>> shell_syntax("grep -E 'a|b' notes.txt")
        []
    """
    found: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(command):
        char = command[i]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            i += 1  # the next character is literal
        elif char == "`" or command.startswith("$(", i):
            found.append("`" if char == "`" else "$(")
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        else:
            op = next((o for o in _OPERATORS if command.startswith(o, i)), None)
            if op is not None:
                found.append(op)
                i += len(op) - 1
        i += 1
    return list(dict.fromkeys(found))


def check_command(value: object) -> object:
    """Validate a spec's command: a string must split and use no shell syntax (see
    :func:`shell_syntax`), a list must hold non-empty strings."""
    if value is None:
        return value
    if not isinstance(value, str) and not (
        isinstance(value, list) and all(isinstance(part, str) for part in value)
    ):
        raise ValueError("a command is a string or a list of strings")
    if isinstance(value, str):
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command: {exc}") from None
        if syntax := shell_syntax(value):
            as_list = json.dumps(["sh", "-c", value], ensure_ascii=False)
            raise ValueError(
                f"{value!r} uses shell syntax ({', '.join(syntax)}) but runs without a "
                f"shell; write it as sh -c '…': {as_list}, or as a list of arguments"
            )
    elif any(not part for part in value):
        raise ValueError("a command's arguments must be non-empty strings")
    return value


def split_command(value: Command | None) -> list[str] | None:
    """The arguments of a spec's command; None for no command."""
    argv = shlex.split(value) if isinstance(value, str) else value
    return list(argv) if argv else None


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
    setup_timeout_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    check_timeout_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)

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
