"""A run's permission requests: what each one wants, and those waiting for an answer.

Claude Code asks the SDK's ``can_use_tool`` callback before a tool that needs approval runs.
:func:`describe_request` says in one short line what a request wants; :class:`PermissionRequests`
wraps the callback the user gave (the CLI's approval queue, an app's own) so the run knows
which requests wait for an answer now (``teamlead view`` shows them), never answering one.

Everything here is hostile text from agents: it is kept as plain text, cut short; a view
escapes it (a terminal with :func:`~teamlead._redact.terminal_safe`, a page as text nodes).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._parse import tool_summary
from ..clock import Clock
from ..tracker import StreamParse

__all__ = [
    "LabelFor",
    "PermissionRequests",
    "WaitingRequest",
    "WorkflowMeta",
    "clip",
    "describe_request",
    "labels_from",
    "workflow_meta",
]

#: Names an asking agent: ``None`` is the lead.
LabelFor = Callable[[str | None], str]

_WHAT_CHARS = 200
#: Requests listed as waiting at once (more are counted, not listed).
MAX_WAITING = 200


@dataclass(frozen=True)
class WorkflowMeta:
    """What a workflow script's ``export const meta = {...}`` says about it."""

    name: str | None = None
    description: str | None = None
    phases: tuple[str, ...] = ()


_META = re.compile(r"export\s+const\s+meta\s*=\s*\{")
_SCRIPT_CHARS = 200_000  # a script this long is not parsed further


def _object_at(text: str, start: int) -> str | None:
    """The JS object literal whose ``{`` is at ``start`` (strings and comments respected)."""
    depth = 0
    quote: str | None = None
    at = start
    while at < len(text):
        char = text[at]
        if quote is not None:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif text.startswith("//", at):
            newline = text.find("\n", at)
            at = len(text) if newline < 0 else newline
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : at + 1]
        at += 1
    return None


_STRING = r"""(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|`((?:[^`\\]|\\.)*)`)"""


def _string_field(obj: str, key: str) -> str | None:
    match = re.search(rf"""(?:^|[{{,\s])["']?{key}["']?\s*:\s*{_STRING}""", obj, flags=re.S)
    if match is None:
        return None
    return next(group for group in match.groups() if group is not None)


def workflow_meta(script: str) -> WorkflowMeta | None:
    """Name, description and phase titles from a workflow script, read tolerantly.

    The script is never run: the ``meta`` object literal is found by its braces, and its
    ``name``, ``description`` and ``phases`` (strings, or objects with a ``title``) are read
    by pattern. Anything missing or malformed is left out; no ``meta`` gives ``None``.

    Example:
        >>> workflow_meta("export const meta = { name: 'scan', phases: [{ title: 'Scan' }] }")
        WorkflowMeta(name='scan', description=None, phases=('Scan',))
    """
    text = script[:_SCRIPT_CHARS]
    match = _META.search(text)
    if match is None:
        return None
    obj = _object_at(text, match.end() - 1)
    if obj is None:
        return None
    phases: list[str] = []
    phase_list = re.search(r"""(?:^|[{,\s])["']?phases["']?\s*:\s*\[""", obj)
    if phase_list is not None:
        body = obj[phase_list.end() :]
        titles = re.finditer(rf"""(?:["']?title["']?\s*:\s*)?{_STRING}""", body)
        end = body.find("]")
        for found in titles:
            if 0 <= end < found.start():
                break
            phases.append(next(group for group in found.groups() if group is not None))
    return WorkflowMeta(
        name=_string_field(obj, "name"),
        description=_string_field(obj, "description"),
        phases=tuple(phases[:20]),
    )


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (cut with an ellipsis)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_request(tool: str, tool_input: Mapping[str, Any]) -> str:
    """What a tool call wants, in one short line of plain (not yet escaped) text.

    A ``Workflow`` call its script's name, description and phases (or the predefined
    workflow's name or script path); any other call what it works on, as a subagent's tool
    call shows it (:func:`~teamlead._parse.tool_summary`).
    """
    if tool == "Workflow":
        return _describe_workflow(tool_input)
    return clip(tool_summary(tool_input), _WHAT_CHARS)


def _describe_workflow(tool_input: Mapping[str, Any]) -> str:
    script = tool_input.get("script")
    meta = workflow_meta(script) if isinstance(script, str) else None
    if meta is None:
        for key in ("name", "scriptPath"):
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return clip(f"{key} {value}", _WHAT_CHARS)
        return "a script with no meta" if isinstance(script, str) else "no script"
    parts = [f"workflow {meta.name or '(unnamed)'}"]
    if meta.description:
        parts.append(f"“{meta.description}”")
    if meta.phases:
        parts.append("phases " + " → ".join(meta.phases))
    return clip(" · ".join(parts), _WHAT_CHARS)


@dataclass(frozen=True)
class WaitingRequest:
    """One permission request waiting for its answer: ``agent_id`` ``None`` is the lead's,
    ``what`` is :func:`describe_request`'s line, ``asked_at`` the run's ``clock.monotonic()``."""

    tool: str
    agent_id: str | None
    tool_use_id: str | None
    what: str
    asked_at: float


Callback = Callable[[str, dict[str, Any], Any], Awaitable[Any]]


class PermissionRequests:
    """The run's permission requests that wait for an answer (see the module docstring).

    Args:
        clock: the run's clock (when each request was asked).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waiting: dict[int, WaitingRequest] = {}
        self._next = 0

    @property
    def waiting(self) -> list[WaitingRequest]:
        """The requests waiting now, oldest first (at most :data:`MAX_WAITING`)."""
        return list(self._waiting.values())[:MAX_WAITING]

    @property
    def count(self) -> int:
        """How many requests wait now."""
        return len(self._waiting)

    def wrap(self, callback: Callback) -> Callback:
        """``callback`` (a ``can_use_tool``), with each request listed while it waits."""

        async def can_use_tool(tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
            key = self._next
            self._next += 1
            self._waiting[key] = WaitingRequest(
                tool=str(tool_name),
                agent_id=getattr(context, "agent_id", None) or None,
                tool_use_id=getattr(context, "tool_use_id", None),
                what=describe_request(str(tool_name), tool_input or {}),
                asked_at=self._clock.monotonic(),
            )
            try:
                return await callback(tool_name, tool_input, context)
            finally:
                self._waiting.pop(key, None)

        return can_use_tool


def labels_from(run: StreamParse) -> LabelFor:
    """A :data:`LabelFor` that reads the run's tracker when it is asked (so a task seen
    after its request arrived still names it): an Agent-tool subagent's task description,
    a workflow agent's label, else the agent id."""

    def label_for(agent_id: str | None) -> str:
        if agent_id is None:
            return "lead"
        tracker = run.tracker
        tasks = tracker.tasks if tracker is not None else {}
        task = tasks.get(agent_id)
        if task is not None and task.description.strip():
            return str(task.description)
        for parent in tasks.values():
            for agent in parent.workflow_agents.values():
                if agent.agent_id == agent_id and agent.label:
                    return str(agent.label)
        return f"agent {agent_id[:12]}"

    return label_for
