"""What ``teamlead-claude`` runs with: the real CLI's path and the run's policy.

Both come from the environment the app's SDK started the command with, read the way the
``teamlead`` command reads them, so one ``TEAMLEAD_*`` variable means the same in both:
the policy from the run options' variables (``TEAMLEAD_DEADLINE``,
``TEAMLEAD_MAX_RESUMES``, ``TEAMLEAD_MAX_CONCURRENT_AGENTS``, ``TEAMLEAD_NO_RELAY``, ...,
see :func:`teamlead._cli.ask.run_options`), the CLI from ``TEAMLEAD_CLAUDE_PATH`` (default:
the one ``claude_agent_sdk`` bundles, else ``claude`` on ``PATH``). What the CLI itself is
told (model, tools, permission mode, prompts) is the app's, in its argv: those variables of
``teamlead ask`` are not read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from .._claude.binary import bundled_cli_path
from .._cli.ask import run_options, settings_from_options
from .._cli.settings import build_policy, find_cli
from ..errors import SetupError, UsageError
from ..policy import Policy

__all__ = ["CLAUDE_PATH_VAR", "ShimSetup", "read_setup"]

#: Names the Claude Code CLI ``teamlead-claude`` runs (default: the bundled one).
CLAUDE_PATH_VAR = "TEAMLEAD_CLAUDE_PATH"
# the run options that say what the CLI is asked, not how the run is coordinated
_NOT_POLICY = ("json_", "quiet", "verbose", "no_history")


@dataclass(frozen=True)
class ShimSetup:
    """The real CLI to run and the policy of each run.

    Attributes:
        cli: the Claude Code CLI's path.
        policy: the run's limits and waits.
        history: keep the runs in the run history (``TEAMLEAD_NO_HISTORY`` turns it off).
    """

    cli: str
    policy: Policy
    history: bool = True


@click.command()
@run_options
def _run_variables(**params: Any) -> None:
    """The ``teamlead ask`` run options, parsed from their variables alone."""


def read_setup(environ: Mapping[str, str]) -> ShimSetup:
    """The setup ``environ`` describes.

    Raises:
        UsageError: a ``TEAMLEAD_*`` variable holds a value its option refuses.
        SetupError: ``TEAMLEAD_CLAUDE_PATH`` names no executable file, or there is no CLI.
    """
    try:
        params = _run_variables.make_context(
            "teamlead-claude", [], default_map=None, resilient_parsing=False
        ).params
    except click.BadParameter as exc:
        source = exc.param.envvar if exc.param is not None else None
        where = f"{source}: " if isinstance(source, str) else ""
        raise UsageError(f"{where}{exc.format_message()}") from None
    except click.ClickException as exc:
        raise UsageError(exc.format_message()) from None
    kept = {k: v for k, v in params.items() if k not in _NOT_POLICY}
    policy = build_policy(settings_from_options("delegation", **kept))
    cli = _cli_path(environ.get(CLAUDE_PATH_VAR, "").strip())
    return ShimSetup(cli=cli, policy=policy, history=not params["no_history"])


def _cli_path(named: str) -> str:
    """The CLI ``named`` (``TEAMLEAD_CLAUDE_PATH``), else the bundled one, else ``claude``
    on ``PATH``."""
    try:
        found = find_cli(named or None)
    except SetupError as exc:
        raise SetupError(f"{exc} ({CLAUDE_PATH_VAR})" if named else str(exc)) from None
    return found if found is not None else str(bundled_cli_path())
