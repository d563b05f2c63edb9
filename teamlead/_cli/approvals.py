"""The approval queue of ``teamlead ask``: every tool permission request of a run, in order.

Claude Code asks the SDK's ``can_use_tool`` callback before a tool that needs approval runs,
for the lead, its Agent-tool subagents and workflow agents alike, with the asking agent's
``agent_id`` in the context (none for the lead). A single approval slot lets a second
request replace the first while the person reads it, so they approve one agent's command
believing it is another's. Here every request joins one FIFO queue and only the one in front
is shown and answered:

    (1/2) [security] Bash: rm -rf build && make

``k/n``: the front's place among the requests of this burst (those answered since the queue
was last empty, plus those waiting). ``y`` allows it, ``n`` denies it, ``a`` allows it and
this tool for this agent for the rest of the run (also the requests of that kind already
waiting). Each answer resolves exactly the request it was given for, so it reaches the
agent that asked and no other. Every decision becomes a
:class:`~teamlead.events.PermissionDecided` event.

:class:`NoTerminal` stands in when nobody can answer (piped, ``--json``): it denies each
request at once with a reason naming the flags that allow it, and says so in one line per
tool.

Names, descriptions and tool inputs come from agents and are hostile: every piece of a
prompt line goes through :func:`~teamlead._redact.terminal_safe` (no control character or
escape sequence survives) and is shown as plain text, never as Rich markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from claude_agent_sdk import (
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)
from claude_agent_sdk.types import PermissionResult

from .._redact import terminal_safe
from .._run.workflow_permission import WORKFLOW_DENIED, WORKFLOW_TOOL
from ..clock import SYSTEM_CLOCK, Clock, move_on_at
from ..events import PermissionAnswer, PermissionDecided
from ..tracker import StreamParse

__all__ = [
    "ASKING_MODES",
    "ApprovalQueue",
    "Key",
    "LabelFor",
    "NoTerminal",
    "Pending",
    "WorkflowMeta",
    "describe_request",
    "hint_keys",
    "labels_from",
    "no_terminal_reason",
    "workflow_meta",
]

#: The permission modes in which Claude Code asks before tools that change things.
ASKING_MODES = (None, "default", "acceptEdits")

#: The answer keys: allow, deny, allow this tool for this agent for the rest of the run.
Key = Literal["y", "n", "a"]

#: Names an asking agent for a prompt line: ``None`` is the lead.
LabelFor = Callable[[str | None], str]

_LABEL_CHARS = 40
_WHAT_CHARS = 200
_DENIED_BY_USER = "The user denied this tool call at the terminal."

# -- what a request wants ------------------------------------------------------------------

#: The input field that says what a tool call wants, by tool.
_MAIN_FIELD = {
    "Bash": "command",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Read": "file_path",
    "NotebookEdit": "notebook_path",
    "WebFetch": "url",
    "WebSearch": "query",
    "Grep": "pattern",
    "Glob": "pattern",
}


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


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_request(tool: str, tool_input: Mapping[str, Any]) -> str:
    """What a tool call wants, in one short line of plain (not yet escaped) text.

    A command, a path, a URL; a ``Workflow`` call its script's name, description and
    phases (or the predefined workflow's name or script path); any other tool its input as
    compact JSON.
    """
    if tool == "Workflow":
        return _describe_workflow(tool_input)
    key = _MAIN_FIELD.get(tool)
    value = tool_input.get(key) if key else None
    if isinstance(value, str) and value.strip():
        return _clip(value, _WHAT_CHARS)
    try:
        shown = json.dumps(dict(tool_input), ensure_ascii=False, default=str, sort_keys=True)
    except (TypeError, ValueError):
        shown = repr(dict(tool_input))
    return _clip(shown, _WHAT_CHARS)


def _describe_workflow(tool_input: Mapping[str, Any]) -> str:
    script = tool_input.get("script")
    meta = workflow_meta(script) if isinstance(script, str) else None
    if meta is None:
        for key in ("name", "scriptPath"):
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return _clip(f"{key} {value}", _WHAT_CHARS)
        return "a script with no meta" if isinstance(script, str) else "no script"
    parts = [f"workflow {meta.name or '(unnamed)'}"]
    if meta.description:
        parts.append(f"“{meta.description}”")
    if meta.phases:
        parts.append("phases " + " → ".join(meta.phases))
    return _clip(" · ".join(parts), _WHAT_CHARS)


# -- the queue -----------------------------------------------------------------------------


@dataclass(eq=False)
class Pending:
    """One request waiting for its answer."""

    tool: str
    tool_input: Mapping[str, Any]
    agent_id: str | None
    tool_use_id: str | None
    what: str
    asked_at: float
    answered: anyio.Event = field(default_factory=anyio.Event)
    result: PermissionResult | None = None


@dataclass
class ApprovalQueue:
    """One FIFO queue of the run's permission requests; the front one is shown and answered.

    Args:
        label_for: names the asking agent (its task's description; ``None`` is the lead).
        on_decision: gets each decision's event (the NDJSON line, the progress log).
        on_change: called when the front or the queue's length changed (re-render).
        wait_limit_s: how long a request may wait for its answer; then it is denied (the
            run's deadline bounds it anyway).
        clock: the time source of the wait limit and ``waited_s`` (tests inject a fake).
    """

    label_for: LabelFor = lambda agent_id: "lead" if agent_id is None else agent_id
    on_decision: Callable[[PermissionDecided], None] = lambda event: None
    on_change: Callable[[], None] = lambda: None
    wait_limit_s: float = 1800.0
    clock: Clock = SYSTEM_CLOCK
    _waiting: list[Pending] = field(default_factory=list, init=False)
    _answered_in_burst: int = field(default=0, init=False)
    _always: set[tuple[str | None, str]] = field(default_factory=set, init=False)
    _closed: bool = field(default=False, init=False)

    # the SDK's callback ------------------------------------------------------------------
    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        """The ``can_use_tool`` callback: wait in line for the person's answer."""
        request = Pending(
            tool=tool_name,
            tool_input=tool_input,
            agent_id=context.agent_id or None,
            tool_use_id=context.tool_use_id,
            what=describe_request(tool_name, tool_input),
            asked_at=self.clock.monotonic(),
        )
        if (request.agent_id, tool_name) in self._always:
            return self._decide(request, allow=True, by="rule")
        if self._closed:
            return self._decide(request, allow=False, by="run_ended", message=_RUN_ENDED)
        self._waiting.append(request)
        self.on_change()
        try:
            with move_on_at(self.clock, request.asked_at + self.wait_limit_s):
                await request.answered.wait()
            if request.result is None:
                message = "No answer came before the run's time ran out."
                return self._decide(request, allow=False, by="run_ended", message=message)
            return request.result
        finally:
            if request in self._waiting:  # cancelled, or timed out: it leaves the line
                self._remove(request)

    # what the terminal shows ---------------------------------------------------------------
    @property
    def front(self) -> Pending | None:
        """The request shown and answered now, if any."""
        return self._waiting[0] if self._waiting else None

    @property
    def waiting(self) -> int:
        """How many requests wait for an answer."""
        return len(self._waiting)

    def prompt(self) -> str | None:
        """The front's line, ``(k/n) [agent] Tool: what``, escaped for a terminal."""
        front = self.front
        if front is None:
            return None
        place = self._answered_in_burst + 1
        total = self._answered_in_burst + len(self._waiting)
        label = _clip(self.label_for(front.agent_id), _LABEL_CHARS)
        return terminal_safe(f"({place}/{total}) [{label}] {front.tool}: {front.what}")

    # the person's answer -------------------------------------------------------------------
    def answer(self, key: Key) -> bool:
        """Answer the front request with ``key``; ``False`` when nothing waits."""
        front = self.front
        if front is None:
            return False
        if key == "a":
            self._always.add((front.agent_id, front.tool))
        self._resolve(front, allow=key != "n", by="user", always=key == "a")
        if key == "a":  # the same agent's waiting requests for this tool need no answer now
            for other in [p for p in self._waiting if (p.agent_id, p.tool) in self._always]:
                self._resolve(other, allow=True, by="rule")
        return True

    def close(self) -> None:
        """The run ends: deny what still waits, and every later request."""
        self._closed = True
        for request in list(self._waiting):
            self._resolve(request, allow=False, by="run_ended", message=_RUN_ENDED)

    # -- internals ---------------------------------------------------------------------------
    def _resolve(
        self,
        request: Pending,
        *,
        allow: bool,
        by: PermissionAnswer,
        always: bool = False,
        message: str = _DENIED_BY_USER,
    ) -> None:
        request.result = self._decide(request, allow=allow, by=by, always=always, message=message)
        self._answered_in_burst += 1
        self._remove(request)
        request.answered.set()

    def _remove(self, request: Pending) -> None:
        self._waiting.remove(request)
        if not self._waiting:
            self._answered_in_burst = 0
        self.on_change()

    def _decide(
        self,
        request: Pending,
        *,
        allow: bool,
        by: PermissionAnswer,
        always: bool = False,
        message: str = _DENIED_BY_USER,
    ) -> PermissionResult:
        self.on_decision(
            PermissionDecided(
                tool=request.tool,
                agent_id=request.agent_id,
                agent=self.label_for(request.agent_id),
                tool_use_id=request.tool_use_id,
                what=request.what,
                decision="allow" if allow else "deny",
                by=by,
                always=always,
                waited_s=round(max(0.0, self.clock.monotonic() - request.asked_at), 3),
                message=None if allow else message,
            )
        )
        if allow:
            return PermissionResultAllow()
        return PermissionResultDeny(message=message)


_RUN_ENDED = "The run is ending; the tool call was not approved."


# -- no terminal ---------------------------------------------------------------------------


def no_terminal_reason(tool: str) -> str:
    """What a request is told when nobody can approve it, with the flags that allow it (a
    Workflow call's reads as Claude Code's own refusal does, so the run reports it once)."""
    if tool == WORKFLOW_TOOL:
        return (
            f"{WORKFLOW_DENIED}: nobody is at a terminal to approve it; to allow it, run "
            "teamlead with --allow-workflows (or TEAMLEAD_ALLOW_WORKFLOWS=1), or with "
            "--permission-mode bypassPermissions"
        )
    return (
        f"{tool} needs approval and nobody is at a terminal to give it; to allow it, run "
        f"teamlead with --allowed-tools '{tool}' (or a pattern such as 'Bash(npm test:*)'), "
        "or with --permission-mode acceptEdits (edits) or bypassPermissions (everything)"
    )


@dataclass
class NoTerminal:
    """The ``can_use_tool`` of a run nobody can answer: deny at once, say it once per tool.

    Args:
        label_for: names the asking agent (``None`` is the lead).
        on_decision: gets each decision's event.
        say: gets the one line per tool (the first denial of each tool).
    """

    label_for: LabelFor = lambda agent_id: "lead" if agent_id is None else agent_id
    on_decision: Callable[[PermissionDecided], None] = lambda event: None
    say: Callable[[str], None] = lambda line: None
    _told: set[str] = field(default_factory=set, init=False)

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        """Deny ``tool_name`` with the reason; the first denial of a tool is said in a line."""
        reason = no_terminal_reason(tool_name)
        agent = self.label_for(context.agent_id or None)
        self.on_decision(
            PermissionDecided(
                tool=tool_name,
                agent_id=context.agent_id or None,
                agent=agent,
                tool_use_id=context.tool_use_id,
                what=describe_request(tool_name, tool_input),
                decision="deny",
                by="no_terminal",
                message=reason,
            )
        )
        if tool_name not in self._told and tool_name != WORKFLOW_TOOL:
            # a Workflow denial is said once by the run itself (its workflow_denied line)
            self._told.add(tool_name)
            self.say(terminal_safe(f"teamlead: denied {tool_name} for [{agent}]: {reason}"))
        return PermissionResultDeny(message=reason)


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


def hint_keys(bindings: Sequence[tuple[str, str]]) -> str:
    """``y allow · n deny`` from ``(key, what)`` pairs."""
    return " · ".join(f"{key} {what}" for key, what in bindings)
