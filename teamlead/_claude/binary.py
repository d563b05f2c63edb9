"""The Claude Code CLI that ``claude_agent_sdk`` bundles: where it is and which version.

The SDK wheel ships the CLI as ``_bundled/claude`` next to a ``claude.version`` stamp.
``teamlead ask`` runs it when no other CLI is given, and experiment records carry its
version.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import SetupError

__all__ = ["bundled_cli_path", "cli_version"]


def _bundled_dir() -> Path:
    """The SDK's ``_bundled`` folder, found without importing the SDK (its import takes a
    second: ``teamlead-claude`` looks the CLI up before it starts it)."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        raise SetupError("claude-agent-sdk is not installed; pip install claude-agent-sdk")
    return Path(spec.origin).parent / "_bundled"


def bundled_cli_path() -> Path:
    """The Claude Code CLI that ``claude_agent_sdk`` ships.

    Raises:
        SetupError: the wheel carries no CLI (a source install of the SDK, say).
    """
    path = _bundled_dir() / "claude"
    if not path.is_file():
        raise SetupError(
            f"claude-agent-sdk has no bundled CLI at {path.name!r}; reinstall it from a wheel "
            "(pip install --force-reinstall claude-agent-sdk)"
        )
    if not os.access(path, os.X_OK):
        raise SetupError(f"the bundled Claude Code CLI is not executable: {path}")
    return path


def cli_version() -> str:
    """The bundled CLI's version, e.g. ``"2.1.332"``, or ``"unknown"``."""
    stamp = _bundled_dir() / "claude.version"
    try:
        return stamp.read_text().split()[0]
    except (OSError, IndexError):
        return "unknown"
