"""The transcript fallback: a subagent's answer read from the end of its JSONL transcript.

When a task notification arrives with an empty summary, or a background agent was
stopped before it reported, the answer may still be in its transcript:
``<config>/projects/<sanitized cwd>/<session>/subagents/agent-<id>.jsonl``. The
notification's ``output_file`` is a symlink to it. Transcripts grow large, so they are
read backwards in fixed-size blocks: memory stays flat whatever the file size, and
scanning stops at a byte cap.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from .._parse import tool_summary
from .._redact import redact
from ..errors import UsageError
from .files import FileProblem, is_plain_id, loads, open_regular

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_SCAN_BYTES",
    "TAIL_SCAN_BYTES",
    "TranscriptCall",
    "TranscriptEnd",
    "TranscriptTail",
    "find_subagent_transcript",
    "last_assistant_text",
    "transcript_end",
    "transcript_tail",
]

logger = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 64 * 1024
"""Bytes read per step from the end of the file."""
DEFAULT_MAX_SCAN_BYTES = 256 * 1024 * 1024
"""Stop after scanning this many bytes back from the end."""
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
"""A record longer than this is skipped (with a warning) instead of being buffered."""

TAIL_SCAN_BYTES = 4 * 1024 * 1024
"""How far back :func:`transcript_tail` reads: a focus view wants the last few moves only."""
_MAX_LINE_CHARS = 300

_ASSISTANT_MARK = b'"assistant"'


def find_subagent_transcript(config_dir: Path, session_id: str, agent_id: str) -> Path | None:
    """Locate ``projects/<project>/<session>/subagents/agent-<id>.jsonl`` (a workflow agent's
    is one level further, under ``subagents/workflows/<run>/``) in whichever project holds it.

    Raises:
        UsageError: ``session_id`` or ``agent_id`` is not a plain id (it would steer the path).
    """
    for value, what in ((session_id, "session id"), (agent_id, "agent id")):
        if not is_plain_id(value):
            raise UsageError(f"refused {what} {redact(value)!r}: not a plain id")
    # The ids were checked above: they hold no glob metacharacters.
    for folder in ("subagents", "subagents/workflows/*"):
        matches = sorted(
            Path(config_dir).glob(f"projects/*/{session_id}/{folder}/agent-{agent_id}.jsonl")
        )
        if matches:
            return matches[0]
    return None


def _lines_backwards(
    fh: BinaryIO,
    *,
    max_scan: int,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    max_line: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[bytes | None]:
    """Yield the file's lines from last to first; ``None`` marks a line over ``max_line``.

    Holds at most one block plus one line (capped at ``max_line``) in memory.
    """
    size = os.fstat(fh.fileno()).st_size
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


def _records(lines: Iterator[bytes | None], mark: bytes = b"") -> Iterator[dict[str, Any] | str]:
    """The JSON objects among ``lines`` (a line without ``mark`` is not parsed); a line
    skipped is named by why: ``"overlong"`` or ``"malformed"``."""
    for line in lines:
        if line is None:
            yield "overlong"
        elif line and mark in line:
            try:
                record = loads(line)
            except (ValueError, RecursionError):
                yield "malformed"
                continue
            if isinstance(record, dict):
                yield record


def _assistant_text(record: Any) -> str | None:
    """The text of an assistant record of the agent's own (not the CLI's error line)."""
    if not isinstance(record, dict) or record.get("type") != "assistant":
        return None
    message = record.get("message")
    if not isinstance(message, dict) or _synthetic(record, message):
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
    """The text of the agent's last assistant record in a JSONL transcript, or ``None``.

    Reads backwards from the end in ``block_bytes`` blocks and stops after ``max_bytes``,
    so a 100 MB transcript costs the same memory as a small one. Malformed or overlong
    lines are skipped with a warning. Secret env var values are redacted from the text.

    Args:
        path: the transcript, or the ``output_file`` symlink pointing at it.
        max_bytes: how far back from the end to look.
        block_bytes: bytes read per step.
        max_line_bytes: longer records are skipped, never buffered whole.

    Returns:
        The joined text blocks of the last assistant record that has text (the CLI's own
        error lines passed over); ``None`` when the file is missing, unreadable or holds no
        assistant text within the cap.

    Example:
        >>> last_assistant_text(Path(note.output_file))         # doctest: +SKIP
        'finding for SUBTASK-A: ok'
    """
    path = Path(path)
    try:
        fh = open_regular(path)  # a FIFO or device never blocks the run
    except FileProblem as problem:
        if problem.kind == "unreadable":
            logger.warning("transcript %s", problem.message)
        else:
            logger.warning("transcript %s is missing or not a regular file", path)
        return None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            logger.warning(
                "transcript %s is %d bytes; only the last %d are searched", path, size, max_bytes
            )
        lines = _lines_backwards(
            fh, block_bytes=block_bytes, max_scan=max_bytes, max_line=max_line_bytes
        )
        for record in _records(lines, _ASSISTANT_MARK):
            if record == "overlong":
                logger.warning(
                    "transcript %s: skipped a record over %d bytes", path, max_line_bytes
                )
            elif isinstance(record, str):
                logger.warning("transcript %s: skipped a malformed line", path)
            elif (text := _assistant_text(record)) is not None:
                return redact(text)
    return None


def _synthetic(record: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether an assistant record is the CLI's own (an API error it wrote in the agent's
    place, ``isApiErrorMessage``, model ``<synthetic>``), not a reply of the model."""
    return record.get("isApiErrorMessage") is True or message.get("model") == "<synthetic>"


@dataclass(frozen=True)
class TranscriptEnd:
    """How a transcript ends: the evidence of how its agent ended.

    Attributes:
        stop_reason: the API's ``stop_reason`` of the last assistant message (``end_turn``,
            ``tool_use``, ``max_tokens``...); ``None`` when there is no assistant message.
        final_text: the text of the last assistant message, when it ended its turn with one
            (a message that called a tool, or was cut at the output limit, is not final).
    """

    stop_reason: str | None
    final_text: str | None

    @property
    def natural_end(self) -> bool:
        """Whether the agent ended its turn of its own accord with a final text (the API's
        ``end_turn`` or ``stop_sequence``): proof it finished, with no word of the CLI."""
        return self.final_text is not None and self.stop_reason in ("end_turn", "stop_sequence")


def transcript_end(path: Path, *, max_bytes: int = TAIL_SCAN_BYTES) -> TranscriptEnd | None:
    """How the transcript at ``path`` ends: its last assistant message's ``stop_reason``, and
    its text when that message ended the turn.

    Read backwards from the end, at most ``max_bytes`` back, as :func:`transcript_tail`. One
    API message is written as several records (one per content block) that share its
    ``stop_reason``; their texts are joined. The CLI's own error lines (an API error it wrote
    in the agent's place) are not the agent's messages and are passed over. ``None`` when the
    file is missing, unreadable or not a regular file.

    Example:
        >>> transcript_end(Path(task.output_file)).stop_reason  # doctest: +SKIP
        'tool_use'
    """
    try:
        fh = open_regular(Path(path))
    except FileProblem:
        return None
    message_id: object = None  # the last message's id, which its records share
    stop_reason: str | None = None
    texts: list[str] = []
    with fh:
        for record in _records(_lines_backwards(fh, max_scan=max_bytes), _ASSISTANT_MARK):
            if isinstance(record, str) or record.get("type") != "assistant":
                continue
            message = record.get("message")
            if not isinstance(message, dict) or _synthetic(record, message):
                continue  # the CLI's own error line, not the agent's message
            if stop_reason is None:  # the last message
                message_id = message.get("id")
                reason = message.get("stop_reason")
                stop_reason = reason if isinstance(reason, str) else "unknown"
            elif message_id is None or message.get("id") != message_id:
                break  # an earlier message: the last one is read whole
            text = _assistant_text(record)
            if text is not None:
                texts.append(text)
    if stop_reason is None:
        return TranscriptEnd(None, None)
    final = "\n".join(reversed(texts)) if stop_reason not in ("tool_use", "max_tokens") else ""
    return TranscriptEnd(stop_reason, redact(final) if final.strip() else None)


@dataclass(frozen=True)
class TranscriptCall:
    """One tool call read from a transcript: what it works on and how it ended."""

    tool_use_id: str
    name: str
    summary: str
    outcome: Literal["running", "ok", "error"]


@dataclass(frozen=True)
class TranscriptTail:
    """An agent's last moves in its transcript, oldest first (text raw, secrets redacted)."""

    calls: tuple[TranscriptCall, ...]
    lines: tuple[str, ...]


def transcript_tail(
    path: Path,
    *,
    max_calls: int = 5,
    max_lines: int = 6,
    max_bytes: int = TAIL_SCAN_BYTES,
) -> TranscriptTail | None:
    """The last ``max_calls`` tool calls and ``max_lines`` lines of text of a transcript.

    Read backwards from the end, at most ``max_bytes`` back, so it costs the same on a
    100 MB transcript as on a small one; a tool result read before its call (it comes
    after it in the file) gives the call its outcome. Malformed and overlong records are
    skipped. ``None`` when the file is missing, unreadable or not a regular file.

    Example:
        >>> transcript_tail(Path(task.output_file)).calls[-1].name  # doctest: +SKIP
        'Bash'
    """
    try:
        fh = open_regular(Path(path))
    except FileProblem:
        return None
    calls: list[TranscriptCall] = []
    lines: list[str] = []
    results: dict[str, Literal["ok", "error"]] = {}  # by tool_use_id, from user records
    with fh:
        for record in _records(_lines_backwards(fh, max_scan=max_bytes)):
            if len(calls) >= max_calls and len(lines) >= max_lines:
                break
            if isinstance(record, str):
                continue
            message = record.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            kind = record.get("type")
            for block in reversed(content):
                if not isinstance(block, dict):
                    continue
                if kind == "user" and block.get("type") == "tool_result":
                    if isinstance(block.get("tool_use_id"), str):
                        results[block["tool_use_id"]] = "error" if block.get("is_error") else "ok"
                elif kind == "assistant" and block.get("type") == "tool_use":
                    if len(calls) < max_calls and isinstance(block.get("id"), str):
                        calls.append(
                            TranscriptCall(
                                block["id"],
                                redact(str(block.get("name")))[:_MAX_LINE_CHARS],
                                redact(tool_summary(block.get("input"))),
                                results.get(block["id"], "running"),
                            )
                        )
                elif kind == "assistant" and block.get("type") == "text":
                    text = block.get("text")
                    if isinstance(text, str):
                        for line in reversed([x for x in text.splitlines() if x.strip()]):
                            if len(lines) < max_lines:
                                lines.append(redact(line)[:_MAX_LINE_CHARS])
    return TranscriptTail(tuple(reversed(calls)), tuple(reversed(lines)))
