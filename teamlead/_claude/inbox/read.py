"""Reading an inbox: tolerant, bounded, confined to the config dir, and never a write.

:func:`read_inbox` parses ``<config>/teams/<team>/inboxes/<agent>.json`` the way Claude
Code's own reader does: entries that fail the schema are skipped with a warning, the valid
ones kept; a file that is no readable array gives a status and one warning line, never an
exception. The wait and the consumer re-use the pieces (:func:`load_array`,
:func:`scan_entry`, :func:`read_unlogged`), so all three agree.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..._redact import redact, secret_scrubber
from ..files import FileProblem, ProblemKind, loads, read_regular
from ..team import first_error, within
from .model import (
    DEFAULT_MAX_INBOX_BYTES,
    EntryFields,
    InboxEntry,
    InboxRead,
    InboxStatus,
    TeammateMessage,
    build_message,
    message_fields,
)

__all__ = [
    "confine_root",
    "load_array",
    "read_inbox",
    "scan_entry",
    "read_unlogged",
]

logger = logging.getLogger("teamlead.inbox")  # the name users configure; stable across moves

_STATUS: dict[ProblemKind, InboxStatus] = {
    "missing": "missing",
    "not_regular": "invalid",
    "too_large": "too_large",
    "unreadable": "invalid",
}
_LISTED_SKIPS = 10
_NO_VALUE = re.compile(rb"[ \t\n\r]*")  # JSON's whitespace; matching stops at the first value byte
_REQUIRED = ("from", "text", "timestamp")
_OPTIONAL_STR = ("type", "color", "summary", "msg_id", "lead_sig")


def _well_formed(raw: Any) -> bool:
    """True when every known field of ``raw`` already has its exact schema type."""
    if type(raw) is not dict or "sender" in raw:  # "sender" is the alias's field name
        return False
    for name in _REQUIRED:
        if type(raw.get(name)) is not str:
            return False
    for name in _OPTIONAL_STR:
        value = raw.get(name)
        if value is not None and type(value) is not str:
            return False
    read = raw.get("read")
    msgv = raw.get("msgV")
    return (read is None or type(read) is bool) and (msgv is None or type(msgv) is int)


def confine_root(path: Path, config_dir: Path | None) -> Path:
    """The directory an inbox must stay in: the config dir, inferred from the layout."""
    if config_dir is not None:
        return config_dir
    parents = path.parents
    if path.parent.name == "inboxes" and len(parents) > 3 and parents[2].name == "teams":
        return parents[3]
    return path.parent


def load_array(path: Path, max_bytes: int) -> tuple[InboxStatus, list[Any] | None, str | None]:
    """Read the raw JSON array; never raises for bad content, never blocks on a FIFO.

    A file with no JSON value in it at all (0 bytes, or only JSON whitespace) is an
    empty inbox: status ``ok``, no entries, no warning. Claude Code's writers create the
    inbox with flag ``wx`` and only then write ``[]``, so an unlocked read can see 0
    bytes for a moment, and Claude Code's own reader takes such a file (whose
    ``JSON.parse`` fails) as empty, whitespace-only included. It holds no entries, so
    calling it empty loses nothing, and the consumer has nothing to remove, so it never
    rewrites the file a writer is about to fill. A truncated value (``[{``) may hold
    entries: it stays ``invalid`` with its warning and is left alone.
    """
    try:
        data = read_regular(path, max_bytes)
    except FileProblem as problem:
        status: InboxStatus = _STATUS[problem.kind]
        if status == "missing":
            return "missing", None, None
        suffix = " (not parsed, not consumed)" if status == "too_large" else ""
        return status, None, f"inbox {problem.message}{suffix}"
    if _NO_VALUE.fullmatch(data):  # no copy of a big inbox, unlike data.strip()
        return "ok", [], None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid", None, f"inbox {path} is not UTF-8 text; left alone"
    del data
    try:
        raw = loads(text)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            why = f"is not valid JSON at line {exc.lineno} (truncated?)"
        else:
            why = f"is not valid JSON ({exc})"
        return "invalid", None, f"inbox {path} {why}; left alone"
    if not isinstance(raw, list):
        kind = type(raw).__name__
        return "invalid", None, f"inbox {path} holds a JSON {kind}, not an array; left alone"
    return "ok", raw, None


def scan_entry(raw: Any) -> EntryFields | str:
    """The fields of a schema-valid entry, or a one-line reason it fails the schema.

    A well-formed entry (every known field already of its exact type) is read straight
    from the dict: the validator would only repeat those checks, and it is most of the
    cost of a big inbox. Anything else goes through :class:`InboxEntry`'s schema, so both
    paths accept and refuse the same entries.
    """
    if _well_formed(raw):
        get = raw.get
        return EntryFields(
            raw["from"],
            raw["text"],
            raw["timestamp"],
            get("msg_id"),
            get("read") is True,
            get("summary"),
        )
    try:
        return EntryFields.of(InboxEntry.model_validate(raw))
    except RecursionError:
        return "entry: nested too deeply"
    except ValidationError as exc:
        return first_error(exc)


def read_unlogged(path: Path, config_dir: Path | None, max_bytes: int) -> InboxRead:
    root = confine_root(path, config_dir)
    if not within(path, root):
        warning = f"inbox {path} resolves outside {root} (a symlink out?); refused"
        return InboxRead(path=path, status="refused", warnings=(redact(warning),))
    status, raw, problem = load_array(path, max_bytes)
    if raw is None:
        warnings = () if problem is None else (redact(problem),)
        return InboxRead(path=path, status=status, warnings=warnings)
    seen: set[str] = set()
    warnings_list: list[str] = []
    skipped = 0
    messages: list[TeammateMessage] = []
    scrub = secret_scrubber()
    for index, item in enumerate(raw):
        entry = scan_entry(item)
        if isinstance(entry, str):
            skipped += 1
            if skipped <= _LISTED_SKIPS:  # the rest are counted in one line, not listed
                warnings_list.append(scrub(f"inbox {path}: skipped entry {index}: {entry}"))
            continue
        key = entry.key
        if key in seen:
            continue
        seen.add(key)
        raw[index] = None  # the message replaces it: a big inbox is not held twice
        messages.append(build_message(message_fields(entry, key=key, scrub=scrub)))
    del raw, seen
    if skipped > _LISTED_SKIPS:
        more = skipped - _LISTED_SKIPS
        warnings_list.append(redact(f"inbox {path}: skipped {more} more invalid entries"))
    return InboxRead(
        path=path,
        status="ok",
        messages=tuple(messages),
        skipped=skipped,
        warnings=tuple(warnings_list),
    )


def read_inbox(
    path: Path,
    *,
    config_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
    log: bool = True,
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
        log: log the warnings; a caller that shows them itself passes False, so each
            is printed once.

    Example:
        >>> read = read_inbox(team.lead_inbox)                    # doctest: +SKIP
        >>> [m.result for m in read.messages if m.is_result]      # doctest: +SKIP
    """
    read = read_unlogged(Path(path), config_dir, max_bytes)
    if log:
        for warning in read.warnings:
            logger.warning("%s", warning)
    return read
