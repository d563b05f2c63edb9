"""Stop the CLI processes this process started, and everything they started; when this
process started.

The processes are ended here but never reaped: our own children belong to whoever
started them (asyncio's child watcher for the SDK's CLI, a ``Popen``), which reaps them
and reads their exit status; a reap here would race it. A child counts as ended once it is
a zombie; the others (grandchildren) once they are gone.
"""

from __future__ import annotations

import contextlib
import os

import psutil

from .clock import block_until

#: Longest wait for a just-started child's own environment (see :func:`_environ`).
_SETTLE_S = 0.5


#: Two reads of one process's start time agree to within this (seconds): each adds the
#: boot time, which Linux gives in whole seconds, moved by one when the clock is stepped.
_START_TOLERANCE_S = 1.5


def started(pid: int, *, unreadable: float | None = None) -> float | None:
    """When process ``pid`` started (wall clock, as psutil reads it), or ``None`` when no
    such process runs; ``unreadable`` when one runs but cannot be read (another user's)."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, ValueError, OverflowError):  # gone, or no pid at all
        return None
    except (psutil.Error, OSError):
        return unreadable


def runs(pid: int, then: float | None, *, unreadable: bool) -> bool:
    """Whether ``pid`` still runs the process that started at ``then`` (as
    :func:`started_here` read it; any process when ``None``: its start was not known),
    not one that took its pid since; ``unreadable`` for one that cannot be read."""
    now = started(pid, unreadable=-1.0)
    if now is None or now < 0:
        return now is not None and unreadable
    return then is None or abs(now - then) <= _START_TOLERANCE_S


def started_here() -> float | None:
    """:func:`started` for this process, read once per process (a forked one reads its
    own)."""
    pid = os.getpid()
    if pid not in _STARTED and (when := started(pid)) is not None:
        _STARTED.clear()
        _STARTED[pid] = when
    return _STARTED.get(pid)


_STARTED: dict[int, float] = {}


def descendants() -> list[psutil.Process]:
    """Every live descendant of this process."""
    try:
        return list(psutil.Process(os.getpid()).children(recursive=True))
    except psutil.Error:
        return []


def stop_descendants(grace_s: float = 2.0) -> int:
    """SIGTERM every descendant, SIGKILL what is left after ``grace_s``; returns the count.

    The whole tree is collected first, so grandchildren (a subagent's shell) are not
    orphaned when their parent dies.
    """
    return _stop(descendants(), grace_s)


def stop_marked(name: str, value: str, grace_s: float = 2.0) -> int:
    """Like :func:`stop_descendants`, for the descendants whose environment has
    ``name=value`` (one run's CLI and all it started: children inherit the variable)."""
    marked = []
    own = _own_image()
    for proc in descendants():
        with contextlib.suppress(psutil.Error):
            if _environ(proc, own).get(name) == value:
                marked.append(proc)
    return _stop(marked, grace_s)


def _own_image() -> tuple[list[str], dict[str, str]] | None:
    """This process's command line and environment as ``/proc`` shows them."""
    try:
        me = psutil.Process(os.getpid())
        return me.cmdline(), me.environ()
    except psutil.Error:
        return None


def _environ(
    proc: psutil.Process,
    own: tuple[list[str], dict[str, str]] | None,
    settle_s: float = _SETTLE_S,
) -> dict[str, str]:
    """The environment of ``proc``. A child caught between its fork and its exec still
    shows ours (its memory is our copy) or none (the exec is replacing it), for a moment
    after ``Popen`` returned: read again until it shows its own, for at most ``settle_s``
    (a child that really is a copy of us, never exec'd, keeps ours)."""
    env: dict[str, str] = {}

    def settled() -> bool:
        nonlocal env
        env = proc.environ()
        return bool(env) and (own is None or (proc.cmdline(), env) != own)

    block_until(settled, settle_s, first_s=0.001, most_s=0.05)
    return env


def _stop(procs: list[psutil.Process], grace_s: float) -> int:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    alive = wait_ended(procs, grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_ended(alive, grace_s)
    return len(procs)


def wait_ended(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` to end, reaping none; returns those still alive.

    Unlike :func:`psutil.wait_procs`, which reaps a child of ours with ``waitpid`` and so
    takes its exit status from its owner, a child is only watched until it is a zombie.
    """
    alive = [proc for proc in procs if not _ended(proc)]

    def ended() -> bool:
        alive[:] = [proc for proc in alive if not _ended(proc)]
        return not alive

    block_until(ended, timeout_s, first_s=0.005, most_s=0.1)
    return alive


def _ended(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone, or no access to its state: it is not ours to wait for
        return True
