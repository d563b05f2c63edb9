"""What a session store holds, read back as untrusted input.

A store is written by every machine of a team, by older and newer teamleads and SDKs, and
by anything else that can reach it: an entry may be no JSON at all, JSON of another shape,
or far larger than any transcript line. So every value read back is checked like a file
of the config dir (:mod:`teamlead._claude.files`):

- an entry (:func:`read_entry`) is a JSON object with a string ``type``, at most
  :data:`MAX_ENTRY_BYTES`, nested no deeper than JSON decoding allows; anything else is
  skipped;
- a summary (:func:`read_summary`) has the session id it is filed under, a finite epoch-ms
  ``mtime`` and an object ``data``;
- a session loads at most :data:`MAX_SESSION_BYTES`: past that, the rest is left unread.

Each store skips a bad value where it finds it and tells it once per kind (a
:class:`WarnOnce` on the ``teamlead.sessions`` logger, :data:`log`); nothing read back is
ever raised into a run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import quote

from claude_agent_sdk.types import SessionKey, SessionStoreEntry, SessionSummaryEntry

from .._claude import loads
from .._governor import WarnOnce
from .._redact import escape_surrogates

__all__ = [
    "MAX_ENTRY_BYTES",
    "MAX_SESSION_BYTES",
    "EntryReader",
    "WarnOnce",
    "dump_entry",
    "dump_json",
    "encode",
    "entry_uuid",
    "log",
    "read_entry",
    "read_summary",
    "readable_summaries",
    "subpath_of",
]

log = logging.getLogger("teamlead.sessions")

#: The largest single entry read back; a transcript line is rarely over a megabyte.
MAX_ENTRY_BYTES = 16 * 1024 * 1024
#: The most of one key (a transcript) read back; the local reader's cap too.
MAX_SESSION_BYTES = 256 * 1024 * 1024
#: The largest epoch-ms value a store keeps (SQLite's largest INTEGER).
_MAX_MS = 2**63 - 1


def encode(part: str) -> str:
    """One key component as it goes into a store's key: ``%``-encoded, so no ``:`` (the
    separator) and no control character can come from a caller's key.

    Example:
        >>> encode("proj:a b")
        'proj%3Aa%20b'
    """
    if not isinstance(part, str):
        raise TypeError(f"a session key's parts are strings, not {type(part).__name__}")
    return quote(part, safe="-_.~")


def subpath_of(key: SessionKey) -> str:
    """The key's subpath, ``""`` for a main transcript."""
    subpath = key.get("subpath")
    if subpath is not None and not isinstance(subpath, str):
        raise TypeError(f"a session key's subpath is a string, not {type(subpath).__name__}")
    return subpath or ""


def dump_entry(entry: SessionStoreEntry) -> str:
    """An entry as stored (:func:`dump_json`)."""
    return dump_json(entry)


def dump_json(value: object) -> str:
    """A value as a store keeps it: compact JSON, characters as they are, but for a lone
    surrogate (half a pair, as JavaScript leaves it when it cuts a string), written as its
    ``\\uXXXX`` escape: no UTF-8 text holds it raw, and the escape reads back as the same
    value.

    Example:
        >>> dump_json({"type": "user", "text": "é\\ud83d"})
        '{"type":"user","text":"é\\\\ud83d"}'
    """
    return escape_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def entry_uuid(entry: SessionStoreEntry) -> str:
    """The entry's ``uuid`` (its idempotency key: a retried batch is stored once), or ``""``
    for an entry without one (titles, tags, mode markers), which is always appended."""
    value = entry.get("uuid") if isinstance(entry, dict) else None
    return value if isinstance(value, str) and value else ""


def _decoded(raw: str | bytes | None) -> Any:
    """The JSON value stored, or ``None`` for none, one over :data:`MAX_ENTRY_BYTES` or no JSON."""
    if raw is None or len(raw) > MAX_ENTRY_BYTES:
        return None
    try:
        return loads(raw)
    except ValueError:
        return None


def read_entry(raw: str | bytes | None) -> SessionStoreEntry | None:
    """A stored entry, or ``None`` when it is no JSON object with a string ``type`` or is
    over :data:`MAX_ENTRY_BYTES`.

    Example:
        >>> read_entry('{"type": "user", "uuid": "a"}')
        {'type': 'user', 'uuid': 'a'}
        >>> read_entry('[1, 2]') is None, read_entry('{"type": 3}') is None
        (True, True)
    """
    value = _decoded(raw)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return None
    return cast(SessionStoreEntry, value)


def read_summary(
    raw: str | bytes | None, session_id: str, *, mtime: object = None
) -> SessionSummaryEntry | None:
    """A stored summary of ``session_id``, or ``None`` when it is not one. With ``mtime``,
    ``raw`` is the summary's ``data`` alone (a store that keeps the mtime beside it).

    Example:
        >>> read_summary('{"session_id": "s", "mtime": 1700000000000, "data": {}}', "s")
        {'session_id': 's', 'mtime': 1700000000000, 'data': {}}
        >>> read_summary('{"session_id": "other", "mtime": 1, "data": {}}', "s") is None
        True
    """
    value = _decoded(raw)
    if mtime is not None:
        value = {"session_id": session_id, "mtime": mtime, "data": value}
    if not isinstance(value, dict) or value.get("session_id") != session_id:
        return None
    mtime = value.get("mtime")
    if isinstance(mtime, bool) or not isinstance(mtime, (int, float)) or not _epoch_ms(mtime):
        return None
    if not isinstance(value.get("data"), dict):
        return None
    return {"session_id": session_id, "mtime": int(mtime), "data": value["data"]}


def _epoch_ms(value: float) -> bool:
    """Whether ``value`` can be a moment in epoch ms: finite, and small enough for every
    store to keep (an SQLite INTEGER; a whole number of 400 digits is no float either)."""
    return -_MAX_MS <= value <= _MAX_MS  # nan compares false


class EntryReader:
    """One key's entries read back in append order: an unreadable one is skipped and
    counted, and no more than :data:`MAX_SESSION_BYTES` is read."""

    def __init__(self) -> None:
        self.entries: list[SessionStoreEntry] = []
        self.bad = 0
        self.size = 0
        self.cut = False

    def add(self, raw: str | None) -> bool:
        """Read the next stored entry; ``False`` once the size cap is passed (read no more)."""
        self.size += len(raw or "")
        self.cut = self.size > MAX_SESSION_BYTES
        if self.cut:
            return False
        entry = read_entry(raw)
        if entry is None:
            self.bad += 1
        else:
            self.entries.append(entry)
        return True

    def result(self, warn: WarnOnce, where: str) -> list[SessionStoreEntry] | None:
        """The entries (``None`` when none), after telling, once per kind, that some were
        skipped or the size cap stopped the read."""
        if self.bad:
            noun = "entry" if self.bad == 1 else "entries"
            warn(
                "entry",
                f"session store {where}: skipped {self.bad} unreadable {noun} "
                "(not a transcript line)",
            )
        if self.cut:
            warn(
                "too-large",
                f"session store {where}: a transcript over 256 MiB was read only up to that",
            )
        return self.entries or None


def readable_summaries(
    found: Iterable[SessionSummaryEntry | None], warn: WarnOnce, where: str
) -> list[SessionSummaryEntry]:
    """The summaries of ``found`` that could be read (``None``: one that could not, skipped
    and told once)."""
    listed = list(found)
    kept = [summary for summary in listed if summary is not None]
    if len(kept) < len(listed):
        skipped = len(listed) - len(kept)
        warn("summary", f"session store {where}: skipped {skipped} unreadable summary(ies)")
    return kept
