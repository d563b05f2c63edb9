"""A run's settings (its policy among them) and the CLI it runs, found before anything runs.

``teamlead ask`` and ``teamlead-claude`` both read these, and ``teamlead-claude`` does so
before it starts the real CLI, so this module loads neither the Agent SDK nor the terminal
views: a command line the shim passes through (``--version``) never waits on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SetupError
from ..policy import Policy

__all__ = ["AskSettings", "find_cli"]


@dataclass
class AskSettings:
    """Settings of one ``teamlead ask`` run (each maps to an option and a TEAMLEAD_* variable):
    what the lead is asked with, and the run's :class:`~teamlead.policy.Policy` (its limits,
    waits, spawn gate and relay)."""

    strategy: str = "delegation"
    model: str | None = None
    cwd: str | None = None
    allowed_tools: list[str] = field(default_factory=list)
    permission_mode: str | None = None
    allow_workflows: bool = False
    cli_path: str | None = None
    session_store: str | None = None
    policy: Policy = field(default_factory=Policy)


def find_cli(cli_path: str | None) -> str | None:
    """The Claude Code CLI to run: ``cli_path``, else the bundled one, else ``claude`` on PATH.

    Returns ``None`` for "let the SDK pick the bundled CLI".

    Raises:
        SetupError: no usable CLI; the message names the cause.
    """
    import shutil

    from .._claude import bundled_cli_path

    if cli_path:
        path = Path(cli_path).expanduser()
        if not path.is_file():
            raise SetupError(f"the Claude Code CLI {cli_path!r} does not exist")
        if not os.access(path, os.X_OK):
            raise SetupError(f"the Claude Code CLI {cli_path!r} is not executable")
        return str(path)
    try:
        bundled_cli_path()
        return None
    except SetupError as exc:
        on_path = shutil.which("claude")
        if on_path:
            return on_path
        raise SetupError(f"{exc}; or put `claude` on PATH, or pass --cli-path") from None
