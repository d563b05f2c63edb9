"""Points of a ``teamlead`` process's start-up, read from outside (its CPU time, its
descriptors), never guessed with a sleep: where a test sends it a stop signal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = ["POINTS", "importing", "loading", "looping"]


def _cpu_s(pid: int) -> float:
    """The CPU time ``pid`` has used so far: how far its start-up has got, whatever the
    machine's load (0 once it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def importing(pid: int) -> bool:
    """A tenth of a second of CPU: teamlead's first line ran (about a third of that), the
    heavy imports are all ahead."""
    return _cpu_s(pid) >= 0.1


def loading(pid: int) -> bool:
    """Six tenths of a second of CPU: deep in the imports (the SDK's)."""
    return _cpu_s(pid) >= 0.6


def looping(pid: int) -> bool:
    """The process has an event loop: an ``eventpoll`` descriptor, once its first line ran,
    seen in two reads in a row (``selectors`` opens one for an instant as it loads, to see
    that it can; a loop's stays). Not a CPU threshold: a light command (``relay``) reaches
    its loop and waits on the model with under half a second of CPU."""
    return importing(pid) and _has_epoll(pid) and _has_epoll(pid)


def _has_epoll(pid: int) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        links = [str(fd.readlink()) for fd in fds.iterdir()]
    except OSError:
        return False
    return "anon_inode:[eventpoll]" in links


POINTS: dict[str, Callable[[int], bool]] = {
    "importing": importing,
    "loading": loading,
    "looping": looping,
}
