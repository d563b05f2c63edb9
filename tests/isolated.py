"""The isolated environment of the tests, the ``teamlead`` command, and running
independent real runs side by side.

:func:`isolated_env` is what tests/conftest.py's autouse fixture gives every test. A
module-scoped fixture is set up before any test's own fixtures, so before that isolation;
a fixture that starts a process there passes it this environment instead.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

K = TypeVar("K")
R = TypeVar("R")

#: ``teamlead`` as the tests start it, the one way they do: ``python -m teamlead`` on this
#: interpreter, never whatever ``teamlead`` is first on ``PATH``.
TEAMLEAD = (sys.executable, "-m", "teamlead")


def isolated_env(root: Path) -> dict[str, str]:
    """``os.environ`` as the autouse isolation leaves it, with its own state under ``root``:
    HOME, the Claude config, the cache (the governor's shared limits) and the runtime
    directory (the registry of live runs, ``teamlead ps``) and the run history there, no API
    address or key, no TEAMLEAD_/OTEL_ settings and no trace inherited from the shell;
    ``teamlead-claude``'s warm processes of this test run's own (:func:`warm_idle`)."""
    home = root / "home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TEAMLEAD_", "OTEL_"))
        and name not in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "TRACEPARENT", "TRACESTATE")
    }
    env.update(
        HOME=str(home),
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        XDG_CACHE_HOME=str(root / "cache"),
        TEAMLEAD_RUNTIME_DIR=str(root / "run"),  # the runs this test starts register there
        TEAMLEAD_HISTORY_DIR=str(root / "history"),  # and are kept there when they finish
        TEAMLEAD_CLAUDE_WARM=warm_idle(300),  # warm processes of this test run's own
    )
    return env


def side_by_side(
    run: Callable[[K, Path], R],
    keys: Iterable[K],
    tmp_path_factory: pytest.TempPathFactory,
    *,
    at_once: int | None = None,
    root_name: Callable[[K], str] = str,
) -> dict[K, R]:
    """``run(key, root)`` for every key, ``at_once`` at a time (all at once by default),
    each with a fresh ``root`` of its own: independent runs (their own processes, Claude
    state and scripted model) that share nothing but the time."""
    keys = list(keys)
    roots = [tmp_path_factory.mktemp(root_name(key)) for key in keys]
    with ThreadPoolExecutor(at_once or len(keys)) as pool:
        return dict(zip(keys, pool.map(run, keys, roots), strict=True))


def run_to_the_end(
    args: Sequence[str], *, timeout: float, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args)`` with its output as text; a run that does not end within
    ``timeout`` is killed and comes back with code -1 and "no end within ..." as its
    stderr, so that only the test reading it fails, not the others run beside it."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(args, -1, "", f"no end within {exc.timeout} s")


#: what the command line of ``teamlead-claude``'s warm process (and its forks) holds
_WARM_MARK = "from teamlead._shim import warm"
#: This test run's tag: six digits (the last not 0), the same in every xdist worker (they
#: inherit the variable), added to the idle time of each warm ``teamlead-claude`` process
#: the run starts (:func:`warm_idle`). Its warm processes are then its own (their name
#: and command line differ), apart from the developer's and another test run's, and only
#: those are found and ended.
_TAG = os.environ.setdefault(
    "TL_TESTS_WARM_TAG", f"{random.randrange(10**5):05d}{random.randrange(1, 10)}"
)


def warm_idle(seconds: float) -> str:
    """``TEAMLEAD_CLAUDE_WARM`` for ``seconds`` of idle time (and under a millionth of a
    second more), tagged as this test run's: the value a warm process's command line then
    holds."""
    return repr(float(f"{seconds:.4f}{_TAG}"))


def warm_processes() -> list[psutil.Process]:
    """This test run's warm ``teamlead-claude`` processes and their workers (one process
    per session, and the one waiting for the next): their command line is the warm one,
    with an idle time of :func:`warm_idle`'s. Each one's ``info`` holds its ``cmdline`` and
    ``ppid`` as they were when found."""
    found = []
    for proc in psutil.process_iter(["cmdline", "uids", "ppid"]):
        try:
            cmdline = proc.info["cmdline"] or []
            warm = any(_WARM_MARK in word for word in cmdline) and cmdline[-1].endswith(_TAG)
            mine = proc.info["uids"].real == os.getuid()
            if warm and mine and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def end_warm_processes() -> None:
    """End this test run's warm processes (not their workers: a session ends as it would,
    and the worker waiting for the next ends with its warm process)."""
    warm = warm_processes()
    pids = {proc.pid for proc in warm}
    for proc in warm:
        with contextlib.suppress(psutil.Error):
            if proc.info["ppid"] not in pids:
                proc.kill()
