"""A run's settings and what they resolve to before anything runs: the CLI and the policy.

``teamlead ask`` and ``teamlead-claude`` both read these, and ``teamlead-claude`` does so
before it starts the real CLI, so this module loads neither the Agent SDK nor the terminal
views: a command line the shim passes through (``--version``) never waits on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SetupError, UsageError
from ..policy import LimitsPolicy, Policy, SpawnPolicy

__all__ = ["AskSettings", "build_policy", "find_cli"]


@dataclass
class AskSettings:
    """Settings of one ``teamlead ask`` run (each maps to an option and a TEAMLEAD_* variable)."""

    strategy: str = "delegation"
    model: str | None = None
    cwd: str | None = None
    max_resumes: int = 3
    wait_s: float = 60.0
    deadline_s: float = 1800.0
    max_cost_usd: float | None = None
    allowed_tools: list[str] = field(default_factory=list)
    permission_mode: str | None = None
    allow_workflows: bool = False
    max_concurrent_agents: int | None = None
    max_agents_per_turn: int | None = None
    spawn_budget: int | None = None
    stagger_s: float = 0.0
    max_depth: int = 1
    wrap_up_reserve_s: float | None = None
    agent_timeout_s: float | None = None
    subagent_model: str | None = None
    token_budget: int | None = None
    request_budget: int | None = None
    spawn_gate: bool = True
    cli_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    relay: bool = True
    overload_hold_s: float = 300.0
    limits: LimitsPolicy = field(default_factory=LimitsPolicy)
    session_store: str | None = None


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


def build_policy(settings: AskSettings) -> Policy:
    """The run's :class:`~teamlead.policy.Policy` for ``settings`` (the ``TEAMLEAD_*``
    variables' and the options' limits; ``teamlead-claude`` reads its policy here too).

    Raises:
        UsageError: a limit the policy refuses (its first line says which).
    """
    try:
        return Policy(
            max_resumes=settings.max_resumes,
            wait_s=settings.wait_s,
            deadline_s=settings.deadline_s,
            max_cost_usd=settings.max_cost_usd,
            spawn=SpawnPolicy(
                enabled=settings.spawn_gate,
                max_concurrent_agents=settings.max_concurrent_agents,
                max_agents_per_turn=settings.max_agents_per_turn,
                spawn_budget=settings.spawn_budget,
                stagger_s=settings.stagger_s,
                max_depth=settings.max_depth,
                wrap_up_reserve_s=settings.wrap_up_reserve_s,
                agent_timeout_s=settings.agent_timeout_s,
                subagent_model=settings.subagent_model,
            ),
            relay=settings.relay,
            overload_hold_s=settings.overload_hold_s,
            limits=settings.limits,
            token_budget=settings.token_budget,
            request_budget=settings.request_budget,
        )
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(f"bad limit: {first[1] if len(first) > 1 else first[0]}") from None
