"""The ``<task-notification>`` turns Claude Code injects for the lead, and what they showed.

When a background task ends, the CLI gives the lead a turn whose text is a
``<task-notification>``: the task id, its status, its summary and (for a workflow) its
``<result>``. The stream's ``task_notification`` message carries only the summary; the text
the lead really read is in the session's transcript. A workflow's result longer than 8000
characters is cut there, and the CLI writes a note in place of the rest (Claude Code
2.1.332)::

    <result>{"r":["FINDING[k000]: …","FIN
    ... (truncated 1407 chars, full result in /…/tasks/wj8enzjn6.output)</result>

:func:`parse_notifications` reads every notification in a turn's text, and a cut result as
a :class:`ResultCut`: what the lead was shown, and how much it was not. Everything in a
result was written by workflow agents, so a result is read as hostile: the task's own
fields come from the head of the notification (before its ``<result>``), the first value of
a tag wins, and the cut note counts only at the very end of the result.

Example:
    >>> text = ("<task-notification><task-id>w1</task-id><status>completed</status>"
    ...         "<result>[\\"a\\",\\"b\\n... (truncated 3 chars)</result></task-notification>")
    >>> parse_notifications(text)[0].cut
    ResultCut(shown='["a","b', chars=3, path=None)
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Notification", "ResultCut", "parse_notifications", "turn_limit"]

_OPEN = "<task-notification>"
_CLOSE = "</task-notification>"
_TAG_OPEN = re.compile(r"<([a-z-]+)>")
_TAG_CLOSE = re.compile(r"</([a-z-]+)>")
_RESULT_OPEN = "<result>"
_RESULT_CLOSE = "</result>"
#: where an item of a result begins: a JSON string after ``[``, ``,`` or ``{``, or a line
_ITEM_START = re.compile(r'[\[,{]"|\n')
_ITEM_END = frozenset(",]}\n")
_ITEM_WINDOW = 2000  # an item longer than this is continued where it was cut
#: the CLI's word that it stopped an agent at its subagent type's ``maxTurns`` (2.1.332): it
#: opens the result (``NOTE: this agent stopped at its 3-turn limit before finishing. …``)
#: and the lead's summary (``Agent "…" stopped at its 3-turn limit (partial result; …)``)
_TURN_LIMIT = re.compile(
    r'(?:NOTE: this agent|Agent "[^\n]{0,400}") stopped at its (\d{1,6})-turn limit'
)
#: the CLI's note in place of the part of a result it cut (2.1.332)
_CUT_NOTE = re.compile(
    r"\n\.\.\. \(truncated (\d{1,12}) chars(?:, full result in ([^\n]{1,4096}))?\)\Z"
)


@dataclass(frozen=True)
class ResultCut:
    """A result the CLI cut in the notification.

    Attributes:
        shown: the part of the result the lead was shown (its head).
        chars: how many characters the CLI left out, as its note says.
        path: the file where the note says the whole result is, if it names one.
    """

    shown: str
    chars: int
    path: str | None

    def rest(self, whole: str) -> tuple[int, str] | None:
        """The part of ``whole`` (the whole result) the lead was not shown, and where in
        ``whole`` it starts; ``None`` when ``whole`` holds nothing past what was shown.

        The rest starts at the beginning of the item the cut fell in (a JSON string, or a
        line), so that item reaches the lead whole; the few characters of it the lead saw
        come again. When ``whole`` does not begin with what was shown (it was written in
        another way), the rest is its last ``chars`` characters, as the CLI's note counts.
        """
        if whole.startswith(self.shown):
            cut_at = len(self.shown)
        elif 0 < self.chars <= len(whole):
            cut_at = len(whole) - self.chars
        else:
            return None
        if cut_at >= len(whole):
            return None
        start = cut_at
        if whole[cut_at] not in _ITEM_END and not _ITEM_START.match(whole, cut_at):
            # the cut fell inside an item: go back to where it began (never past what was
            # shown: nothing unseen is skipped)
            window = _ITEM_START.finditer(whole, max(0, cut_at - _ITEM_WINDOW), cut_at + 1)
            begun = [m for m in window if m.start() < cut_at]
            if begun:
                last = begun[-1]
                start = last.end() if last.group() == "\n" else last.end() - 1
        return start, whole[start:]


@dataclass(frozen=True)
class Notification:
    """One ``<task-notification>`` as the lead read it.

    Attributes:
        task_id: the task it reports.
        tool_use_id: the lead's tool call that started the task.
        status: the task's terminal state (``completed`` when it names none).
        summary: its ``<summary>``.
        result: its ``<result>`` text as shown (the cut note included), if it has one.
        output_file: its ``<output-file>``.
        cut: how the CLI cut the result, when it did.
    """

    task_id: str
    tool_use_id: str | None
    status: str
    summary: str | None
    result: str | None
    output_file: str | None
    cut: ResultCut | None = None


def _bodies(text: str) -> Iterator[str]:
    """What each ``<task-notification>...</task-notification>`` of ``text`` holds, in order
    (each to the first close after its open), in one pass: an agent's result quoted in a turn
    can hold thousands of opens that no close follows, each of which a lazy regex would scan
    to the end of the text."""
    at = 0
    while (start := text.find(_OPEN, at)) >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            return  # no close after this open, so none after a later one either
        yield text[start + len(_OPEN) : end]
        at = end + len(_CLOSE)


def _tags(head: str) -> Iterator[tuple[str, str]]:
    """Each ``<name>value</name>`` of ``head`` (the first close of its name after the open;
    what it holds is not searched further), in order, as a lazy regex with a backreference
    finds them, but with each close looked up among the closes, found once: many opens with
    no close cost one pass, not one each."""
    closes: dict[str, list[int]] = {}
    for match in _TAG_CLOSE.finditer(head):
        closes.setdefault(match.group(1), []).append(match.start())
    at = 0
    for match in _TAG_OPEN.finditer(head):
        name = match.group(1)
        if match.start() < at or name not in closes:
            continue
        found = closes[name]
        index = bisect.bisect_left(found, match.end())
        if index < len(found):
            yield name, head[match.end() : found[index]]
            at = found[index] + len(name) + 3


def parse_notifications(text: str) -> list[Notification]:
    """Every ``<task-notification>`` in ``text`` that names its task, in order."""
    found: list[Notification] = []
    for body in _bodies(text):
        start = body.find(_RESULT_OPEN)
        head = body if start < 0 else body[:start]
        tags: dict[str, str] = {}
        for name, value in _tags(head):
            tags.setdefault(name, value.strip())
        if not tags.get("task-id"):
            continue
        result: str | None = None
        cut: ResultCut | None = None
        end = body.rfind(_RESULT_CLOSE)
        if start >= 0 and end > start:
            result = body[start + len(_RESULT_OPEN) : end]
            note = _CUT_NOTE.search(result)
            if note is not None:
                path = note.group(2).strip() if note.group(2) else None
                cut = ResultCut(result[: note.start()], int(note.group(1)), path)
        found.append(
            Notification(
                task_id=tags["task-id"],
                tool_use_id=tags.get("tool-use-id"),
                status=tags.get("status", "completed"),
                summary=tags.get("summary"),
                result=result.strip() if result is not None else None,
                output_file=tags.get("output-file"),
                cut=cut,
            )
        )
    return found


def turn_limit(text: str | None) -> int | None:
    """The turn limit the CLI says it stopped an agent at, when ``text`` (a notification's
    summary or result) opens with its note; ``None`` otherwise (an agent's own words later in
    the text do not count).

    Example:
        >>> turn_limit("NOTE: this agent stopped at its 3-turn limit before finishing.")
        3
    """
    found = _TURN_LIMIT.match(text.lstrip()) if text else None
    return int(found.group(1)) if found else None
