"""A directory watch straight on Linux inotify, awaited on the event loop: no thread, no tick.

``watchfiles`` watches from a thread that wakes every ``step`` ms, which costs CPU while
idle and adds a step or two of latency (``bench/inbox_latency.py``). Here the inotify
descriptor is awaited with :func:`anyio.wait_readable`: an idle wait costs nothing and a
change is seen as soon as the kernel queues it. :func:`open_watch` returns ``None`` where
inotify is unavailable (not Linux, no libc); the caller then uses ``watchfiles``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys
import threading
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio

__all__ = ["open_watch"]

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


async def _batches(fd: int) -> AsyncGenerator[tuple[set[str], bool], None]:
    """Changes to the entries of one directory, read from an inotify descriptor: batches,
    each the names changed and whether the directory went away. Closing it stops watching.

    Closing an inotify descriptor waits for the kernel to retire its watches (an RCU grace
    period, 5 to 15 ms), so the close runs on a short-lived thread: the wait that used the
    watch returns at once instead of paying that on every call.
    """
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                data = os.read(fd, 64 * 1024)
            except BlockingIOError:
                continue
            yield _parse(data)
    finally:
        anyio.notify_closing(fd)
        threading.Thread(target=os.close, args=(fd,), name="inotify-close", daemon=True).start()


def _parse(data: bytes) -> tuple[set[str], bool]:
    names: set[str] = set()
    gone = False
    offset = 0
    while offset + _HEADER.size <= len(data):
        _, mask, _, length = _HEADER.unpack_from(data, offset)
        offset += _HEADER.size
        raw = data[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        if raw:
            names.add(os.fsdecode(raw))
        gone = gone or bool(mask & _GONE)
    return names, gone


def open_watch(directory: Path) -> AsyncGenerator[tuple[set[str], bool], None] | None:
    """Watch ``directory`` through inotify, or ``None`` where that is not possible.

    The watch is in place when this returns: a change made afterwards is queued even
    before the first batch is awaited.
    """
    if _LIBC is None:
        return None
    fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    if _LIBC.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
        with contextlib.suppress(OSError):
            os.close(fd)
        return None
    return _batches(fd)
