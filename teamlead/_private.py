"""One user's private files: the rule for a folder that holds them, and how they are
written and read.

A private folder (the run history's, the registry's runtime directory) is made mode 0700
when missing, and refused when it is not a real directory (a symlink, a file), belongs to
another user, or its group or others can write to it: :func:`unsafe_dir` says why in one
line, :func:`private_dir` makes it or refuses. Files in it are written mode 0600 through a
temporary file and a rename (:func:`write_private`: a reader sees the old file or the new
one), and read back as untrusted data: never through a symlink, only a regular file, at
most a given size (:func:`read_small`), a JSON object only (:func:`json_object`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "dir_problem",
    "json_object",
    "private_dir",
    "read_small",
    "uid",
    "unsafe_dir",
    "write_private",
]


def dir_problem(folder: Path) -> str | None:
    """What keeps the existing ``folder`` from holding this user's private files, in a few
    words (``another user's``, ``shared (mode 1777)``), or ``None`` when nothing does. It is
    not a real directory (a symlink, a file), another user owns it, or it is shared: its
    group or others can write to it, or it is sticky like the temp directory. Chmodding a
    shared one would lock its other users out of their own files, so it is refused, never
    changed. A missing folder is ``None`` (it can be made private).

    Example:
        >>> dir_problem(Path("/nonexistent/folder")) is None
        True
    """
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory (a symlink?)"
    if info.st_uid != uid():
        return "another user's"
    if mode & (stat.S_ISVTX | 0o022):
        return f"shared (mode {mode:o})"
    return None


def unsafe_dir(folder: Path) -> str | None:
    """Why ``folder`` cannot hold this user's private files, as one line (see
    :func:`dir_problem`), or ``None`` when it can."""
    why = dir_problem(folder)
    return None if why is None else f"{str(folder)!r} is {why}"


def private_dir(folder: Path) -> Path:
    """``folder``, made mode 0700 when missing, once :func:`unsafe_dir` finds nothing wrong.

    Raises:
        PermissionError: the folder is refused (the message says why, in one line).
        OSError: it cannot be made.
    """
    why = unsafe_dir(folder)
    if why is None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = unsafe_dir(folder)  # made by someone else between the two looks
    if why is not None:
        raise PermissionError(f"{why}, and teamlead changes nothing it did not create")
    return folder


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) through a temporary file and a rename."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def read_small(path: Path, limit: int) -> bytes | None:
    """The bytes of regular file ``path`` (not followed if a symlink), or ``None`` when it
    is larger than ``limit`` bytes or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def json_object(raw: bytes | str) -> dict[str, Any] | None:
    """The JSON object ``raw`` holds, or ``None`` when it holds anything else (not JSON,
    nested too deep, an array...).

    Example:
        >>> json_object(b'{"run": 1}'), json_object(b"[1]"), json_object(b"{")
        ({'run': 1}, None, None)
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def named_dir(env: Mapping[str, str] | None, own: str, xdg: str, under: str) -> Path | None:
    """The folder ``env`` names for teamlead: the variable ``own`` names it outright, else it
    is ``under`` in the absolute base the XDG variable ``xdg`` names; ``None`` if neither.

    Example:
        >>> named_dir({"XDG_DATA_HOME": "/d"}, "OWN", "XDG_DATA_HOME", "teamlead/history")
        PosixPath('/d/teamlead/history')
        >>> named_dir({"XDG_DATA_HOME": "relative"}, "OWN", "XDG_DATA_HOME", "x") is None
        True
    """
    env = os.environ if env is None else env
    named = (env.get(own) or "").strip()
    if named:
        return Path(named).expanduser()
    base = (env.get(xdg) or "").strip()
    return Path(base) / under if base and Path(base).is_absolute() else None


def uid() -> int:
    """This process's user id (0 where there are no user ids)."""
    getuid = getattr(os, "getuid", None)
    return int(getuid()) if getuid is not None else 0
