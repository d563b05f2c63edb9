"""Reading Claude Code's state files as hostile input: regular files only, bounded, depth-safe.

Teams, inboxes and transcripts are written by the CLI or by a teammate, so anything able
to write the config dir controls them. Every reader of that state goes through here:

- :func:`open_regular` refuses anything but a regular file. It checks before opening and
  opens with ``O_NONBLOCK``, then checks the open descriptor again, so a FIFO swapped in
  between can never block the run.
- :func:`read_regular` reads at most ``max_bytes`` (plus one, to tell "over the cap").
- :func:`loads` decodes JSON and turns every way it can fail, including the
  ``RecursionError`` of deeply nested arrays, into one :class:`ValueError`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO, Literal

__all__ = ["FileProblem", "is_plain_id", "is_session_id", "loads", "open_regular", "read_regular"]

_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: what :func:`read_regular` reads at a time past the size the file had when opened
_CHUNK = 1024 * 1024

ProblemKind = Literal["missing", "not_regular", "too_large", "unreadable"]


class FileProblem(Exception):
    """Why a state file was not read; ``message`` is one line fit for a warning."""

    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.kind: ProblemKind = kind
        self.message = message


def _check(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise FileProblem("not_regular", f"{path} is not a regular file; left alone")


def open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading without ever blocking on a FIFO or device.

    Raises:
        FileProblem: missing, not a regular file, or unreadable.
    """
    try:
        _check(path, Path(path).stat().st_mode)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileProblem("missing", f"{path} does not exist") from None
    except OSError as exc:
        raise FileProblem("unreadable", f"{path} cannot be read: {exc.strerror}") from None
    try:
        _check(path, os.fstat(fd).st_mode)  # swapped for a FIFO after the first check
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``.

    Raises:
        FileProblem: missing, not a regular file, unreadable, or over ``max_bytes``.
    """
    fh = open_regular(path)
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            why = f"is {size} bytes, over the {max_bytes}-byte cap"
            raise FileProblem("too_large", f"{path} {why}; left alone")
        try:
            # a buffer of the file's size, not of the cap: ``read(n)`` allocates n bytes up
            # front (64 MB for a workflow's output of a few KB); a file that grew since it
            # was opened is read on in chunks, up to one byte over the cap
            data = fh.read(size + 1)
            while size < len(data) <= max_bytes and (
                more := fh.read(min(_CHUNK, max_bytes + 1 - len(data)))
            ):
                data += more
        except OSError as exc:
            raise FileProblem("unreadable", f"{path} cannot be read: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise FileProblem("too_large", f"{path} grew over the {max_bytes}-byte cap; left alone")
    return data


def is_plain_id(value: str) -> bool:
    """Whether an agent or run id (from the stream, a file) is plain: safe in a path or a glob."""
    return bool(_PLAIN_ID.fullmatch(value)) and ".." not in value


def is_session_id(value: str) -> bool:
    """Whether ``value`` has a session id's shape (letters, digits, ``_`` and ``-``)."""
    return bool(_SESSION_ID.fullmatch(value))


def loads(data: bytes | str) -> Any:
    """``json.loads`` that fails only with :class:`ValueError`.

    Raises:
        ValueError: not UTF-8, not JSON (``JSONDecodeError`` keeps its line), or nested
            too deeply to decode.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
