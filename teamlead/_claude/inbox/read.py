"""Reading an inbox: tolerant, bounded, confined to the config dir, and never a write.

:func:`read_inbox` parses ``<config>/teams/<team>/inboxes/<agent>.json`` the way Claude
Code's own reader does: entries that fail the schema are skipped with a warning, the valid
ones kept. A missing, truncated, non-array or oversized file, or one that resolves outside
the config dir, gives a status and one warning line, never an exception. The wait and the
consumer re-use the pieces (:func:`load_array`, :func:`parse_entry`, :func:`read_unlogged`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..._redact import redact
from ..team import within
from .model import (
    DEFAULT_MAX_INBOX_BYTES,
    InboxEntry,
    InboxRead,
    InboxStatus,
    TeammateMessage,
    decode_entry,
)

__all__ = ["confine_root", "load_array", "parse_entry", "read_inbox", "read_unlogged"]

logger = logging.getLogger("teamlead.inbox")  # the name users configure; stable across moves


def confine_root(path: Path, config_dir: Path | None) -> Path:
    """The directory an inbox must stay in: the config dir, inferred from the layout."""
    if config_dir is not None:
        return config_dir
    parents = path.parents
    if path.parent.name == "inboxes" and len(parents) > 3 and parents[2].name == "teams":
        return parents[3]
    return path.parent


def load_array(path: Path, max_bytes: int) -> tuple[InboxStatus, list[Any] | None, str | None]:
    """Read the raw JSON array; never raises for bad content."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "missing", None, None
    except OSError as exc:
        return "invalid", None, f"inbox {path} cannot be read: {exc.strerror}"
    if not path.is_file():
        return "invalid", None, f"inbox {path} is not a regular file; left alone"
    if info.st_size > max_bytes:
        why = f"is {info.st_size} bytes, over the {max_bytes}-byte cap"
        return "too_large", None, f"inbox {path} {why}; left alone (not parsed, not consumed)"
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return "missing", None, None
    except OSError as exc:
        return "invalid", None, f"inbox {path} cannot be read: {exc.strerror}"
    if len(data) > max_bytes:
        return "too_large", None, f"inbox {path} grew over the {max_bytes}-byte cap; left alone"
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "invalid", None, f"inbox {path} is not UTF-8 text; left alone"
    except ValueError as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        return "invalid", None, f"inbox {path} is not valid JSON{where} (truncated?); left alone"
    if not isinstance(raw, list):
        kind = type(raw).__name__
        return "invalid", None, f"inbox {path} holds a JSON {kind}, not an array; left alone"
    return "ok", raw, None


def parse_entry(raw: Any) -> InboxEntry | str:
    """The entry, or a one-line reason it fails the schema."""
    try:
        return InboxEntry.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "entry"
        return f"{where}: {err.get('msg', 'invalid')}"


def read_unlogged(path: Path, config_dir: Path | None, max_bytes: int) -> InboxRead:
    root = confine_root(path, config_dir)
    if not within(path, root):
        warning = f"inbox {path} resolves outside {root} (a symlink out?); refused"
        return InboxRead(path=path, status="refused", warnings=(redact(warning),))
    status, raw, problem = load_array(path, max_bytes)
    if raw is None:
        warnings = () if problem is None else (redact(problem),)
        return InboxRead(path=path, status=status, warnings=warnings)
    messages: list[TeammateMessage] = []
    seen: set[str] = set()
    warnings_list: list[str] = []
    for index, item in enumerate(raw):
        entry = parse_entry(item)
        if isinstance(entry, str):
            warnings_list.append(redact(f"inbox {path}: skipped entry {index}: {entry}"))
            continue
        if entry.key in seen:
            continue
        seen.add(entry.key)
        messages.append(decode_entry(entry))
    return InboxRead(
        path=path,
        status="ok",
        messages=tuple(messages),
        skipped=len(warnings_list),
        warnings=tuple(warnings_list),
    )


def read_inbox(
    path: Path,
    *,
    config_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
) -> InboxRead:
    """Read and decode an inbox without locking or changing it.

    Never raises for bad content: a missing file, a truncated or non-array file, an
    oversized file or a symlink leaving the config dir each give a status and a warning
    (also logged), and invalid entries are skipped without losing the valid ones.

    Args:
        path: the inbox file.
        config_dir: the Claude Code config dir the inbox must stay in; by default inferred
            from ``<config>/teams/<team>/inboxes/<agent>.json``.
        max_bytes: files larger than this are left alone.

    Example:
        >>> read = read_inbox(team.lead_inbox)                    # doctest: +SKIP
        >>> [m.result for m in read.messages if m.is_result]      # doctest: +SKIP
    """
    read = read_unlogged(Path(path), config_dir, max_bytes)
    for warning in read.warnings:
        logger.warning("%s", warning)
    return read
