"""The command's stdout and stderr, guarded: a stream that cannot be written is lost, never
a traceback.

:func:`guard_streams` puts a :class:`GuardedStream` in front of ``sys.stdout`` and
``sys.stderr`` before the command loads. The first write or flush that fails (a closed
stream, a full disk, a reader gone) marks the stream lost, points its descriptor at the
null device and drops what is written after: the run goes on to its end, only its output
is gone. The entry point then says so in one line on the stream that still works
(:func:`report_lost`) and exits 74. Loads nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

__all__ = ["GuardedStream", "guard_streams", "is_terminal", "moment", "report_lost", "stdout_lost"]


class GuardedStream:
    """A text stream whose failing write or flush loses it (see the module docstring).

    Everything else (``encoding``, ``isatty``, ``fileno``, ...) is the stream's own.

    Attributes:
        name: ``stdout`` or ``stderr``, for the line that says it was lost.
        lost: why it was lost (``No space left on device``), or ``None`` while it works.
    """

    def __init__(self, stream: TextIO, name: str, *, lost: str | None = None) -> None:
        self._stream = stream
        self.name = name
        self.lost = lost

    def write(self, text: str) -> int:
        """Write ``text``; once the stream is lost, drop it (its length is returned)."""
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the standard stream it stands for (as pickle libraries pickle
        ``sys.stdout``): a copy in another process (a Ray task's) writes to its own."""
        return getattr, (sys, self.name)

    def _lose(self, exc: OSError) -> None:
        self.lost = exc.strerror or str(exc)
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            _to_null(self._stream.fileno())


def _to_null(fd: int) -> None:
    """Point ``fd`` at the null device: what is still buffered for it goes nowhere."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _guarded(stream: TextIO | None, fd: int, name: str) -> GuardedStream:
    if stream is None:  # the descriptor was closed when the interpreter started
        with contextlib.suppress(OSError):
            _to_null(fd)
        null = Path(os.devnull).open("w", encoding="utf-8")  # noqa: SIM115 - the process's stream
        return GuardedStream(null, name, lost="it is closed")
    return GuardedStream(stream, name)


def guard_streams() -> None:
    """Put a :class:`GuardedStream` in front of ``sys.stdout`` and ``sys.stderr`` (once)."""
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = _guarded(sys.stdout, 1, "stdout")
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = _guarded(sys.stderr, 2, "stderr")


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (``False`` for one with no ``isatty``, or closed)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def moment(when: float, *, per_second: int = 1, local: bool = False) -> str | None:
    """``when`` (in ``1/per_second`` s since the epoch) as a person reads it, to the second:
    in UTC, said so, or local time; ``None`` for a number no calendar has (nan, 1e300,
    2**63 ms: a record or a store is anyone's to write)."""
    try:
        at = datetime.fromtimestamp(when / per_second, timezone.utc)
        at = at.astimezone() if local else at
    except (OverflowError, ValueError, OSError):
        return None
    return f"{at:%Y-%m-%d %H:%M:%S}" + ("" if local else " UTC")


def stdout_lost() -> bool:
    """Whether this command's stdout can no longer be written (a command that only writes,
    like ``teamlead watch``, stops then)."""
    return isinstance(sys.stdout, GuardedStream) and sys.stdout.lost is not None


def report_lost() -> bool:
    """Say in one line which output was lost and why, on the stream that still works
    (stderr first; on none when both are lost); whether any was."""
    streams = [s for s in (sys.stderr, sys.stdout) if isinstance(s, GuardedStream)]
    lost = [s for s in streams if s.lost is not None]
    if not lost:
        return False
    said = "; ".join(f"cannot write to {s.name}: {s.lost}" for s in lost)
    for stream in streams:
        if stream.lost is None:
            stream.write(f"teamlead: {said}\n")
            stream.flush()
            break
    return True
