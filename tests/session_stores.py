"""Helpers of the session-store tests: two machines, a look into a store, the last line.

A machine is a home of its own (``HOME``, ``CLAUDE_CONFIG_DIR``, ``TMPDIR``, cache) on the
scripted model; machines of one test share only what the test gives them (a Redis, a
file, the project directory's path).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from teamlead.sessions import open_session_store
from teamlead.testing import OfflineClaude, ScriptedServer

from .isolated import isolated_env

T = TypeVar("T")


@dataclass(frozen=True)
class Machine:
    """One machine: its home, and the environment its commands run with."""

    claude: OfflineClaude
    env: dict[str, str]


def machine(root: Path, name: str, server: ScriptedServer) -> Machine:
    claude = OfflineClaude(server.base_url, state_dir=root / name)
    return Machine(claude, {**isolated_env(root / name), **claude.env})


def in_store(url: str, check: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """``await check(store)`` on a store opened (and closed) for this one look."""

    async def look() -> T:
        store = open_session_store(url)
        try:
            return await check(store)
        finally:
            await store.aclose()

    return anyio.run(look)


def finished_line(stdout: str) -> dict[str, Any]:
    """The ``finished`` line that ends ``--json`` output."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert lines and lines[-1]["type"] == "finished", lines[-3:]
    return lines[-1]  # type: ignore[no-any-return]
