"""The inbox's data: an entry as Claude Code writes it, and what teamlead makes of it.

Teammates append JSON objects to the lead's inbox file. :class:`InboxEntry` is the schema
of one such object (unknown fields kept); :func:`decode_entry` turns it into a
:class:`TeammateMessage`, decoding the protocol frame (an idle notification, a shutdown
approval, ...) a teammate puts in ``text``. :class:`InboxRead`, :class:`InboxWait` and
:class:`ConsumeResult` are what reading, waiting and consuming report.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..._redact import redact
from ..files import loads

__all__ = [
    "DEFAULT_MAX_INBOX_BYTES",
    "ConsumeResult",
    "InboxEntry",
    "InboxRead",
    "InboxStatus",
    "InboxWait",
    "MessageKind",
    "TeammateMessage",
    "EntryFields",
    "decode_entry",
    "build_message",
    "message_fields",
    "entry_key",
]

DEFAULT_MAX_INBOX_BYTES = 8 * 1024 * 1024
"""Inboxes larger than this are left alone with a warning instead of being parsed (a
healthy inbox holds a handful of entries of a few KiB: 8 MiB is thousands of reports)."""

MessageKind = Literal[
    "idle",
    "message",
    "permission",
    "plan",
    "shutdown",
    "task_assignment",
    "task_completed",
    "terminated",
    "unknown_frame",
]

_FRAME_KINDS: dict[str, MessageKind] = {
    "idle_notification": "idle",
    "permission_request": "permission",
    "permission_response": "permission",
    "task_assignment": "task_assignment",
    "task_completed": "task_completed",
    "teammate_terminated": "terminated",
}
_FRAME_PREFIXES: dict[str, MessageKind] = {"plan_approval_": "plan", "shutdown_": "shutdown"}
_TERMINATING_FRAMES = frozenset({"teammate_terminated", "shutdown_approved"})


def entry_key(sender: str, timestamp: str, text: str) -> str:
    """The key of an entry without ``msg_id``: a SHA-256 digest of ``from|timestamp|text``,
    the same identity without carrying message content (or a secret in it) into logs and
    records."""
    # surrogatepass: a lone surrogate from a hostile entry must hash, not crash
    data = f"{sender}|{timestamp}|{text}".encode("utf-8", errors="surrogatepass")
    digest = hashlib.sha256(data).hexdigest()
    return f"sha256:{digest}"


class InboxEntry(BaseModel):
    """One inbox entry as Claude Code writes it; unknown fields are kept.

    ``from``, ``text`` and ``timestamp`` must be strings; an entry that fails this schema
    is skipped, as Claude Code's reader does.
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    sender: StrictStr = Field(alias="from")
    text: StrictStr
    timestamp: StrictStr
    read: StrictBool | None = None
    type: str | None = None
    color: str | None = None
    summary: str | None = None
    from_plugin: Any = None
    msgV: int | None = None
    msg_id: str | None = None
    lead_sig: str | None = None


class TeammateMessage(BaseModel):
    """A decoded inbox entry: a plain message or one teammate protocol frame.

    String fields are stripped of secret env var values. ``key`` identifies the raw entry
    for :func:`~teamlead._claude.inbox.consume_inbox`.
    """

    model_config = ConfigDict(frozen=True)

    kind: MessageKind
    sender: str
    text: str
    key: str
    timestamp: str
    msg_id: str | None = None
    read: bool = False
    frame_type: str | None = None
    result: str | None = None
    summary: str | None = None
    completed_status: str | None = None
    failure_reason: str | None = None
    idle_reason: str | None = None
    completed_task_id: str | None = None

    @property
    def is_result(self) -> bool:
        """Carries a result: an idle notification with a result or summary, or plain text."""
        if self.kind == "idle":
            return bool(self.result or self.summary)
        return self.kind == "message" and bool(self.text.strip())

    @property
    def is_report(self) -> bool:
        """The sender has reported: it went idle, was terminated or approved its shutdown."""
        return self.kind == "idle" or self.frame_type in _TERMINATING_FRAMES


def _opt_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError):
        return "[value nested too deeply]"


def _frame(text: str) -> dict[str, Any] | None:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        value = loads(stripped)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return value
    return None


def _frame_kind(frame_type: str) -> MessageKind:
    if frame_type in _FRAME_KINDS:
        return _FRAME_KINDS[frame_type]
    for prefix, kind in _FRAME_PREFIXES.items():
        if frame_type.startswith(prefix):
            return kind
    return "unknown_frame"


class EntryFields(NamedTuple):
    """The fields of a schema-valid entry that decoding needs, however it was checked."""

    sender: str
    text: str
    timestamp: str
    msg_id: str | None
    read: bool
    summary: str | None

    @property
    def key(self) -> str:
        """The dedupe key: ``msg_id`` when present, else :func:`entry_key`."""
        return self.msg_id or entry_key(self.sender, self.timestamp, self.text)

    @classmethod
    def of(cls, entry: InboxEntry) -> EntryFields:
        """The fields of a validated entry."""
        return cls(
            entry.sender,
            entry.text,
            entry.timestamp,
            entry.msg_id,
            entry.read is True,
            entry.summary,
        )


def message_fields(
    entry: EntryFields, *, key: str | None = None, scrub: Callable[[str], str] = redact
) -> dict[str, Any]:
    """The :class:`TeammateMessage` fields of an entry, protocol frame decoded, secrets scrubbed."""

    def scrub_opt(value: str | None) -> str | None:
        return None if value is None else scrub(value)

    base: dict[str, Any] = {  # with _ALWAYS first, then frame fields: every field once
        "sender": scrub(entry.sender),
        "text": scrub(entry.text),
        "key": entry.key if key is None else key,
        "timestamp": entry.timestamp,
        "msg_id": entry.msg_id,
        "read": entry.read,
    }
    frame = _frame(entry.text)
    if frame is None:
        return {"kind": "message", "summary": scrub_opt(entry.summary), **base}
    frame_type: str = frame["type"]
    kind = _frame_kind(frame_type)
    fields: dict[str, Any] = {}
    if kind == "idle":
        fields = {
            "result": frame.get("result"),
            "summary": frame.get("summary"),
            "completed_status": frame.get("completedStatus"),
            "failure_reason": frame.get("failureReason"),
            "idle_reason": frame.get("idleReason"),
            "completed_task_id": frame.get("completedTaskId"),
        }
    fields = {name: scrub_opt(_opt_str(value)) for name, value in fields.items()}
    return {"kind": kind, "frame_type": frame_type, **fields, **base}


def decode_entry(entry: InboxEntry) -> TeammateMessage:
    """Turn an entry into a :class:`TeammateMessage`, decoding a protocol frame in ``text``.

    Example:
        >>> entry = InboxEntry.model_validate({"from": "alpha", "timestamp": "t",
        ...     "text": '{"type":"idle_notification","result":"42","completedStatus":"resolved"}'})
        >>> msg = decode_entry(entry)
        >>> msg.kind, msg.result, msg.is_result
        ('idle', '42', True)
    """
    return build_message(message_fields(EntryFields.of(entry)))


def build_message(fields: dict[str, Any]) -> TeammateMessage:
    """A message from :func:`message_fields`, without running the validator again.

    Those fields are typed by construction (strings, ``None``, a bool, a known kind), so
    the model is built as :meth:`~pydantic.BaseModel.model_construct` would, minus its
    per-field loop, every field given and one fields-set shared by all messages: that
    loop is most of the time, and a fields-set per message most of the memory, of
    reading a big inbox. It holds because :class:`TeammateMessage` has no post-init,
    private attributes or extras.
    """
    message = TeammateMessage.__new__(TeammateMessage)
    _set(message, "__dict__", {**_DEFAULTS, **fields})  # every field, in declaration order
    _set(message, "__pydantic_fields_set__", _ALL_FIELDS)
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message


_set = object.__setattr__
_ALL_FIELDS = set(TeammateMessage.model_fields)
_DEFAULTS: dict[str, Any] = {
    name: None if field.is_required() else field.default
    for name, field in TeammateMessage.model_fields.items()
}


InboxStatus = Literal["ok", "missing", "too_large", "invalid", "refused"]


@dataclass(frozen=True)
class InboxRead:
    """One read of an inbox.

    Attributes:
        path: the inbox file.
        status: ``ok`` (a 0-byte or whitespace-only file too: a writer has created it
            and not yet written ``[]``); ``missing`` (no file yet); ``too_large`` (over the
            cap, left alone); ``invalid`` (not a JSON array, e.g. truncated);
            ``refused`` (it leaves the config dir).
        messages: the valid entries, decoded, in file order, duplicates (same key) dropped.
        skipped: how many entries failed the schema.
        warnings: one line per problem, free of secrets and of message content.
    """

    path: Path
    status: InboxStatus
    messages: tuple[TeammateMessage, ...] = ()
    skipped: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def keys(self) -> frozenset[str]:
        """The keys of every message read."""
        return frozenset(m.key for m in self.messages)


@dataclass(frozen=True)
class InboxWait:
    """What :func:`~teamlead._claude.inbox.wait_for_inbox` saw last.

    Attributes:
        read: the last read of the inbox.
        satisfied: ``until(read)`` held.
        reads: how many times the inbox was read.
        events: how many change events woke the wait.
    """

    read: InboxRead
    satisfied: bool
    reads: int
    events: int


@dataclass(frozen=True)
class ConsumeResult:
    """What :func:`~teamlead._claude.inbox.consume_inbox` did.

    Attributes:
        removed: entries removed (delivered ones plus those marked ``read: true``).
        remaining: entries left in the file, including ones that fail the schema.
        refused: why nothing was touched (the lead reads its own inbox, the file is
            invalid or too large, it leaves the config dir), or ``None``.
    """

    removed: int = 0
    remaining: int = 0
    refused: str | None = None
