"""Rebuild a session's tracker state from its transcript, for ``teamlead resume``.

Claude Code keeps each session at ``<config>/projects/<sanitized cwd>/<session>.jsonl``.
The main thread's records (``isSidechain: false``) hold the lead's Agent calls, the
``toolUseResult`` that names each launched agent, the ``<task-notification>`` turns the
CLI injected, and the lead's replies (``isApiErrorMessage`` marks failed ones). Fed
through the same :class:`~teamlead.tracker.Tracker`, they tell what is still outstanding.
:func:`session_notifications` reads the notification turns themselves: the text the lead
was shown of each task's result (the stream carries only the summary).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import UsageError
from ..tracker import Tracker
from .files import FileProblem, is_session_id, loads, open_regular
from .notification import Notification, parse_notifications

__all__ = [
    "find_session_file",
    "load_session",
    "replay",
    "session_messages",
    "session_notifications",
]

logger = logging.getLogger(__name__)

_MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
#: words of the CLI's refusal to resume a workflow run (the tracker reads which call it was)
_REFUSED_RESUME = ("resumeFromRunId", "journal")


def find_session_file(config_dir: Path, session_id: str) -> Path:
    """The transcript of ``session_id`` under ``config_dir``.

    Raises:
        UsageError: the id is malformed, or no such session exists.
    """
    if not is_session_id(session_id):
        raise UsageError(
            f"{session_id!r} is not a session id (expected letters, digits and dashes)"
        )
    matches = sorted((Path(config_dir) / "projects").glob(f"*/{session_id}.jsonl"))
    if not matches:
        raise UsageError(
            f"no session {session_id} under {config_dir}/projects; check CLAUDE_CONFIG_DIR "
            "(teamlead resume must see the same Claude config dir as the original run)"
        )
    return matches[0]


def _records(record: dict[str, Any], session_id: str) -> list[dict[str, Any]]:
    """The stream-json messages a transcript record stands for."""
    if record.get("isSidechain") or record.get("type") not in ("user", "assistant"):
        return []
    message = record.get("message")
    if not isinstance(message, dict):
        return []
    if record["type"] == "assistant":
        error = record.get("error") or ("api_error" if record.get("isApiErrorMessage") else None)
        return [{"type": "assistant", "message": message, "error": error, "session_id": session_id}]
    out: list[dict[str, Any]] = []
    result = record.get("toolUseResult")
    content = message.get("content")
    first = content[0] if isinstance(content, list) and content else None
    tool_use_id = first.get("tool_use_id") if isinstance(first, dict) else None
    started = {"type": "system", "subtype": "task_started", "tool_use_id": tool_use_id}
    if isinstance(result, dict) and isinstance(result.get("agentId"), str):
        out.append(
            {
                **started,
                "task_id": result["agentId"],
                "description": result.get("description") or "",
                "prompt": result.get("prompt"),
            }
        )
    if (result is None or isinstance(result, str)) and isinstance(content, list):
        refused = [  # a tool's error: a refused resume, say
            b
            for b in content
            if isinstance(b, dict)
            and b.get("type") == "tool_result"
            and b.get("is_error")
            and any(word in str(b.get("content")) for word in _REFUSED_RESUME)
        ]
        if refused:
            out.append({"type": "user", "message": {**message, "content": refused}})
    if isinstance(result, dict) and result.get("taskType") == "local_workflow":
        # a launched workflow: its task, and the tool result with its wf_ run id and script
        if isinstance(result.get("taskId"), str):
            out.append(
                {
                    **started,
                    "task_id": result["taskId"],
                    "task_type": "local_workflow",
                    "workflow_name": result.get("workflowName"),
                    "description": result.get("summary") or "",
                }
            )
        out.append({"type": "user", "message": message, "tool_use_result": result})
    texts = (
        [content]
        if isinstance(content, str)
        else [
            b.get("text", "")
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text"
        ]
    )
    for text in texts:  # every <task-notification> block, as a task_notification message
        if isinstance(text, str):
            out.extend(
                {
                    "type": "system",
                    "subtype": "task_notification",
                    "task_id": note.task_id,
                    "tool_use_id": note.tool_use_id,
                    "status": note.status,
                    "summary": note.result or note.summary,
                    "output_file": note.output_file,
                }
                for note in parse_notifications(text)
            )
    return out


def _main_thread_records(config_dir: Path, session_id: str) -> Iterator[dict[str, Any]]:
    """The records of ``session_id``'s transcript, in order (a malformed line is skipped and
    counted in one warning at the end).

    Raises:
        UsageError: no such session, or its transcript is too large to read.
    """
    path = find_session_file(config_dir, session_id)
    try:
        fh = open_regular(path)  # a FIFO here must not hang resume
    except FileProblem as problem:
        raise UsageError(f"session transcript {problem.message}") from None
    skipped = 0
    with fh:
        if os.fstat(fh.fileno()).st_size > _MAX_TRANSCRIPT_BYTES:
            raise UsageError(f"session transcript {path.name} is over 256 MiB; refusing to read it")
        for line in fh:
            try:
                record = loads(line.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):  # torn, hand-edited or nested too deeply
                skipped += 1
                continue
            if isinstance(record, dict):
                yield record
    if skipped:
        logger.warning("session transcript %s: skipped %d malformed line(s)", path.name, skipped)


def session_messages(config_dir: Path, session_id: str) -> list[dict[str, Any]]:
    """The stream-json messages the main thread of ``session_id``'s transcript stands for,
    in order: the lead's turns, its launched agents and workflows, the notifications.

    Raises:
        UsageError: no such session, or its transcript is too large to read.
    """
    messages: list[dict[str, Any]] = []
    for record in _main_thread_records(config_dir, session_id):
        try:
            messages += _records(record, session_id)
        except (ValueError, RecursionError):  # fields nested too deeply to walk
            continue
    return messages


def session_notifications(config_dir: Path, session_id: str) -> dict[str, Notification]:
    """The ``<task-notification>`` turns the CLI gave the lead of ``session_id``, by task id
    (the last one of a task wins): what the lead was shown of each task's result.

    Only a user turn of the main thread whose text *is* a notification counts (the CLI
    writes it so); a notification quoted inside another turn (a result a teamlead prompt
    carried, a user's own prompt) is not one the CLI gave.

    Raises:
        UsageError: no such session, or its transcript is too large to read.
    """
    found: dict[str, Notification] = {}
    for record in _main_thread_records(config_dir, session_id):
        if record.get("isSidechain") or record.get("type") != "user":
            continue
        origin = record.get("origin")
        if isinstance(origin, dict) and origin.get("kind") != "task-notification":
            continue
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # text blocks
            parts = [b.get("text") for b in content if isinstance(b, dict)]
            content = "".join(p for p in parts if isinstance(p, str))
        if isinstance(content, str) and content.lstrip().startswith("<task-notification>"):
            for note in parse_notifications(content):
                found[note.task_id] = note
    return found


def load_session(config_dir: Path, session_id: str, *, clock: Clock = SYSTEM_CLOCK) -> Tracker:
    """A :class:`Tracker` rebuilt from the session's transcript, stamping on ``clock``.

    Raises:
        UsageError: no such session, or its transcript is too large to read.
    """
    return replay(session_messages(config_dir, session_id), session_id, clock=clock)


def replay(
    messages: list[dict[str, Any]], session_id: str, *, clock: Clock = SYSTEM_CLOCK
) -> Tracker:
    """A :class:`Tracker` fed ``messages`` (from :func:`session_messages`) in order, with a
    stand-in ``result`` for the lead's last reply (a transcript has no result records)."""
    tracker = Tracker(clock=clock)
    tracker.session_id = session_id
    unread = 0
    for raw in messages:
        try:
            tracker.feed(raw)
        except (ValueError, RecursionError):  # a record whose fields make no sense
            unread += 1
    if unread:
        logger.warning("session %s: skipped %d unreadable record(s)", session_id, unread)
    if tracker.lead_texts:
        tracker.feed(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": tracker.lead_texts[-1],
                "session_id": session_id,
            }
        )
    return tracker
