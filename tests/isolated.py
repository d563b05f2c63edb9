"""The environment of tests/conftest.py's per-test isolation, for a module's shared run.

A module-scoped fixture is set up before any test's own fixtures, so before the autouse
isolation; a fixture that starts a process there passes it this environment instead.
"""

from __future__ import annotations

import os
from pathlib import Path


def isolated_env(root: Path) -> dict[str, str]:
    """``os.environ`` as the autouse isolation leaves it, with its own state under ``root``:
    HOME, the Claude config and the cache (the governor's shared limits) there, no API
    address or key, no TEAMLEAD_/OTEL_ settings and no trace inherited from the shell."""
    home = root / "home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TEAMLEAD_", "OTEL_"))
        and name not in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "TRACEPARENT", "TRACESTATE")
    }
    env.update(
        HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude"), XDG_CACHE_HOME=str(root / "cache")
    )
    return env
