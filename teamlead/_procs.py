"""Stop the CLI processes this process started, and everything they started."""

from __future__ import annotations

import contextlib
import os

import psutil


def descendants() -> list[psutil.Process]:
    """Every live descendant of this process."""
    try:
        children: list[psutil.Process] = psutil.Process(os.getpid()).children(recursive=True)
        return children
    except psutil.Error:
        return []


def stop_descendants(grace_s: float = 2.0) -> int:
    """SIGTERM every descendant, SIGKILL what is left after ``grace_s``, reap; returns the count.

    The whole tree is collected first, so grandchildren (a subagent's shell) are not
    orphaned when their parent dies.
    """
    return _stop(descendants(), grace_s)


def stop_marked(name: str, value: str, grace_s: float = 2.0) -> int:
    """Like :func:`stop_descendants`, for the descendants whose environment has
    ``name=value`` (one run's CLI and all it started: children inherit the variable)."""
    marked = []
    for proc in descendants():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(name) == value:
                marked.append(proc)
    return _stop(marked, grace_s)


def _stop(procs: list[psutil.Process], grace_s: float) -> int:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)
