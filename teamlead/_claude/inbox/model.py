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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..._redact import redact, redact_opt

__all__ = [
    "DEFAULT_MAX_INBOX_BYTES",
    "ConsumeResult",
    "InboxEntry",
    "InboxRead",
    "InboxStatus",
    "InboxWait",
    "MessageKind",
    "TeammateMessage",
    "decode_entry",
    "entry_key",
]

DEFAULT_MAX_INBOX_BYTES = 8 * 1024 * 1024
"""Inboxes larger than this are left alone with a warning instead of being parsed."""

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
    """The key of an entry without ``msg_id``: a digest of ``from|timestamp|text``."""
    digest = hashlib.sha256(f"{sender}|{timestamp}|{text}".encode()).hexdigest()
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

    @property
    def key(self) -> str:
        """The dedupe key: ``msg_id`` when present, else ``from|timestamp|text``.

        The fallback is stored as a SHA-256 digest of that string: the same identity,
        without carrying message content (or a secret in it) into logs and records.
        """
        return self.msg_id or entry_key(self.sender, self.timestamp, self.text)


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
    return json.dumps(value, ensure_ascii=False)


def _frame(text: str) -> dict[str, Any] | None:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
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


def decode_entry(entry: InboxEntry) -> TeammateMessage:
    """Turn an entry into a :class:`TeammateMessage`, decoding a protocol frame in ``text``.

    Example:
        >>> entry = InboxEntry.model_validate({"from": "alpha", "timestamp": "t",
        ...     "text": '{"type":"idle_notification","result":"42","completedStatus":"resolved"}'})
        >>> msg = decode_entry(entry)
        >>> msg.kind, msg.result, msg.is_result
        ('idle', '42', True)
    """
    base: dict[str, Any] = {
        "sender": redact(entry.sender),
        "text": redact(entry.text),
        "key": entry.key,
        "timestamp": entry.timestamp,
        "msg_id": entry.msg_id,
        "read": bool(entry.read),
    }
    frame = _frame(entry.text)
    if frame is None:
        return TeammateMessage(kind="message", summary=redact_opt(entry.summary), **base)
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
    fields = {name: redact_opt(_opt_str(value)) for name, value in fields.items()}
    return TeammateMessage(kind=kind, frame_type=frame_type, **fields, **base)


InboxStatus = Literal["ok", "missing", "too_large", "invalid", "refused"]


@dataclass(frozen=True)
class InboxRead:
    """One read of an inbox.

    Attributes:
        path: the inbox file.
        status: ``ok``; ``missing`` (no file yet); ``too_large`` (over the cap, left
            alone); ``invalid`` (not a JSON array); ``refused`` (it leaves the config dir).
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
