"""Rebuild a session's tracker state from its transcript, for ``teamlead resume``.

Claude Code keeps each session at ``<config>/projects/<sanitized cwd>/<session>.jsonl``.
The main thread's records (``isSidechain: false``) hold the lead's Agent calls, the
``toolUseResult`` that names each launched agent, the ``<task-notification>`` turns the
CLI injected, and the lead's replies (``isApiErrorMessage`` marks failed ones). Fed
through the same :class:`~teamlead.tracker.Tracker`, they tell what is still outstanding.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import UsageError
from ..tracker import Tracker
from .files import FileProblem, loads, open_regular

__all__ = ["find_session_file", "load_session", "replay", "session_messages"]

logger = logging.getLogger(__name__)

_SAFE_SESSION = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_TAG = re.compile(r"<([a-z-]+)>(.*?)</\1>", re.DOTALL)
_MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024


def find_session_file(config_dir: Path, session_id: str) -> Path:
    """The transcript of ``session_id`` under ``config_dir``.

    Raises:
        UsageError: the id is malformed, or no such session exists.
    """
    if not _SAFE_SESSION.fullmatch(session_id):
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


_NOTIFICATION = re.compile(r"<task-notification>(.*?)</task-notification>", re.DOTALL)


def _notifications(text: str) -> list[dict[str, Any]]:
    """Every ``<task-notification>`` block in an injected turn, as task_notification messages."""
    found: list[dict[str, Any]] = []
    for body in _NOTIFICATION.findall(text):
        tags = {name: value.strip() for name, value in _TAG.findall(body)}
        if not tags.get("task-id"):
            continue
        found.append(
            {
                "type": "system",
                "subtype": "task_notification",
                "task_id": tags["task-id"],
                "tool_use_id": tags.get("tool-use-id"),
                "status": tags.get("status", "completed"),
                "summary": tags.get("result") or tags.get("summary"),
                "output_file": tags.get("output-file"),
            }
        )
    return found


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
    if isinstance(result, dict) and isinstance(result.get("agentId"), str):
        content = message.get("content")
        tool_use_id = None
        if isinstance(content, list) and content and isinstance(content[0], dict):
            tool_use_id = content[0].get("tool_use_id")
        out.append(
            {
                "type": "system",
                "subtype": "task_started",
                "task_id": result["agentId"],
                "tool_use_id": tool_use_id,
                "description": result.get("description") or "",
                "prompt": result.get("prompt"),
            }
        )
    if isinstance(result, dict) and result.get("taskType") == "local_workflow":
        # a launched workflow: its task, and the tool result with its wf_ run id and script
        content = message.get("content")
        first = content[0] if isinstance(content, list) and content else None
        tool_use_id = first.get("tool_use_id") if isinstance(first, dict) else None
        if isinstance(result.get("taskId"), str):
            out.append(
                {
                    "type": "system",
                    "subtype": "task_started",
                    "task_id": result["taskId"],
                    "tool_use_id": tool_use_id,
                    "task_type": "local_workflow",
                    "workflow_name": result.get("workflowName"),
                    "description": result.get("summary") or "",
                }
            )
        out.append({"type": "user", "message": message, "tool_use_result": result})
    content = message.get("content")
    texts = (
        [content]
        if isinstance(content, str)
        else [
            b.get("text", "")
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text"
        ]
    )
    for text in texts:
        if isinstance(text, str):
            out.extend(_notifications(text))
    return out


def session_messages(config_dir: Path, session_id: str) -> list[dict[str, Any]]:
    """The stream-json messages the main thread of ``session_id``'s transcript stands for,
    in order: the lead's turns, its launched agents and workflows, the notifications.

    Raises:
        UsageError: no such session, or its transcript is too large to read.
    """
    path = find_session_file(config_dir, session_id)
    try:
        fh = open_regular(path)  # a FIFO here must not hang resume
    except FileProblem as problem:
        raise UsageError(f"session transcript {problem.message}") from None
    messages: list[dict[str, Any]] = []
    skipped = 0
    with fh:
        if os.fstat(fh.fileno()).st_size > _MAX_TRANSCRIPT_BYTES:
            raise UsageError(f"session transcript {path.name} is over 256 MiB; refusing to read it")
        for line in fh:
            try:
                record = loads(line.decode("utf-8", errors="replace"))
                if isinstance(record, dict):
                    messages += _records(record, session_id)
            except (ValueError, RecursionError):  # torn, hand-edited or nested too deeply
                skipped += 1
    if skipped:
        logger.warning("session transcript %s: skipped %d malformed line(s)", path.name, skipped)
    return messages


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
