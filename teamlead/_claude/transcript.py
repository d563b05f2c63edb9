"""The transcript fallback: a subagent's answer read from the end of its JSONL transcript.

When a task notification arrives with an empty summary, or a background agent was
stopped before it reported, the answer may still be in its transcript:
``<config>/projects/<sanitized cwd>/<session>/subagents/agent-<id>.jsonl``. The
notification's ``output_file`` is a symlink to it. Transcripts grow large, so they are
read backwards in fixed-size blocks: memory stays flat whatever the file size, and
scanning stops at a byte cap.

Example:
    >>> last_assistant_text(notification.output_file)          # doctest: +SKIP
    'finding for SUBTASK-B: ok'
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .._redact import redact
from ..errors import UsageError

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_SCAN_BYTES",
    "find_subagent_transcript",
    "last_assistant_text",
    "sanitize_project_path",
]

logger = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 64 * 1024
"""Bytes read per step from the end of the file."""
DEFAULT_MAX_SCAN_BYTES = 256 * 1024 * 1024
"""Stop after scanning this many bytes back from the end."""
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
"""A record longer than this is skipped (with a warning) instead of being buffered."""

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_ASSISTANT_MARK = b'"assistant"'


def sanitize_project_path(cwd: str) -> str:
    """The project directory name Claude Code derives from a working directory.

    Example:
        >>> sanitize_project_path("/home/user/project")
        '-home-user-project'
    """
    return re.sub(r"[^a-zA-Z0-9]", "-", cwd)


def _check_id(value: str, what: str) -> str:
    if not _SAFE_ID.fullmatch(value) or ".." in value:
        raise UsageError(f"refused {what} {redact(value)!r}: not a plain id")
    return value


def find_subagent_transcript(
    config_dir: Path, session_id: str, agent_id: str, *, cwd: str | None = None
) -> Path | None:
    """Locate ``projects/<sanitized cwd>/<session>/subagents/agent-<id>.jsonl``.

    With ``cwd`` the direct path is tried first; otherwise (or when it is missing, e.g.
    for a cwd long enough that Claude Code shortened its name) every project is searched.

    Raises:
        UsageError: ``session_id`` or ``agent_id`` is not a plain id (it would steer the path).
    """
    _check_id(session_id, "session id")
    _check_id(agent_id, "agent id")
    projects = Path(config_dir) / "projects"
    tail = Path(session_id) / "subagents" / f"agent-{agent_id}.jsonl"
    if cwd is not None:
        direct = projects / sanitize_project_path(cwd) / tail
        if direct.is_file():
            return direct
    # The ids were checked above: they hold no glob metacharacters.
    matches = sorted(projects.glob(f"*/{tail.as_posix()}"))
    return matches[0] if matches else None


def _lines_backwards(
    fh: BinaryIO, size: int, *, block_bytes: int, max_scan: int, max_line: int
) -> Iterator[bytes | None]:
    """Yield the file's lines from last to first; ``None`` marks a line over ``max_line``.

    Holds at most one block plus one line (capped at ``max_line``) in memory.
    """
    stop = max(0, size - max_scan)
    pos = size
    pieces: list[bytes] = []  # the end of the current line, last piece first
    held = 0
    overlong = False

    def add(piece: bytes) -> None:
        nonlocal held, overlong
        if overlong:
            return
        pieces.append(piece)
        held += len(piece)
        if held > max_line:
            pieces.clear()
            overlong = True

    def finish() -> bytes | None:
        nonlocal held, overlong
        line = None if overlong else b"".join(reversed(pieces))
        pieces.clear()
        held, overlong = 0, False
        return line

    while pos > stop:
        step = min(block_bytes, pos - stop)
        pos -= step
        fh.seek(pos)
        parts = fh.read(step).split(b"\n")
        # parts[-1] ends the line being assembled; parts[1:-1] are whole lines;
        # parts[0] is the end of a line that starts further back.
        add(parts[-1])
        if len(parts) == 1:
            continue
        yield finish()
        yield from reversed(parts[1:-1])
        add(parts[0])
    if pos == 0:
        yield finish()


def _assistant_text(record: Any) -> str | None:
    if not isinstance(record, dict) or record.get("type") != "assistant":
        return None
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content if content.strip() else None
    if not isinstance(content, list):
        return None
    texts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    text = "\n".join(t for t in texts if t.strip())
    return text or None


def last_assistant_text(
    path: Path,
    *,
    max_bytes: int = DEFAULT_MAX_SCAN_BYTES,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> str | None:
    """The text of the last assistant record in a JSONL transcript, or ``None``.

    Reads backwards from the end in ``block_bytes`` blocks and stops after ``max_bytes``,
    so a 100 MB transcript costs the same memory as a small one. Malformed or overlong
    lines are skipped with a warning. Secret env var values are redacted from the text.

    Args:
        path: the transcript, or the ``output_file`` symlink pointing at it.
        max_bytes: how far back from the end to look.
        block_bytes: bytes read per step.
        max_line_bytes: longer records are skipped, never buffered whole.

    Returns:
        The joined text blocks of the last assistant record that has text; ``None`` when
        the file is missing, unreadable or holds no assistant text within the cap.

    Example:
        >>> last_assistant_text(Path(note.output_file))         # doctest: +SKIP
        'finding for SUBTASK-A: ok'
    """
    path = Path(path)
    if not path.is_file():  # checked first: opening a FIFO would block
        logger.warning("transcript %s is missing or not a regular file", path)
        return None
    try:
        fh = path.open("rb")
    except OSError as exc:
        logger.warning("transcript %s cannot be opened: %s", path, exc.strerror)
        return None
    with fh:
        info = os.fstat(fh.fileno())
        if info.st_size > max_bytes:
            logger.warning(
                "transcript %s is %d bytes; only the last %d are searched",
                path,
                info.st_size,
                max_bytes,
            )
        lines = _lines_backwards(
            fh, info.st_size, block_bytes=block_bytes, max_scan=max_bytes, max_line=max_line_bytes
        )
        for line in lines:
            if line is None:
                logger.warning(
                    "transcript %s: skipped a record over %d bytes", path, max_line_bytes
                )
                continue
            if _ASSISTANT_MARK not in line:
                continue  # cheap filter: only assistant records are parsed
            try:
                record = json.loads(line)
            except ValueError:
                logger.warning("transcript %s: skipped a malformed line", path)
                continue
            text = _assistant_text(record)
            if text is not None:
                return redact(text)
    return None
