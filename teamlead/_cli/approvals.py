"""The approval queue of ``teamlead ask``: every tool permission request of a run, in order.

Claude Code asks the SDK's ``can_use_tool`` before a tool that needs approval runs, for
the lead and every agent (the asking agent's ``agent_id`` in the context). Every request
joins one FIFO queue, and only the front one is shown and answered::

    (1/2) [security] Bash: rm -rf build && make

``y`` allows it, ``n`` denies it, ``a`` allows this tool for this agent for the rest of
the run (the waiting requests of that kind too); each answer becomes a
:class:`~teamlead.events.PermissionDecided` event. When nobody can answer (piped,
``--json``), each request is denied at once with a reason naming the flags that allow the
tool. Agents' names and tool inputs are hostile: every prompt line goes through
:func:`~teamlead._redact.terminal_safe`.
"""

from __future__ import annotations

from collections.abc import Callable
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
from .._run import WORKFLOW_DENIED, WORKFLOW_TOOL, LabelFor, clip, describe_request
from ..clock import SYSTEM_CLOCK, Clock, move_on_at
from ..events import PermissionAnswer, PermissionDecided

__all__ = ["ASKING_MODES", "ApprovalQueue", "Key", "Pending", "no_terminal_reason"]

#: The permission modes in which Claude Code asks before tools that change things.
ASKING_MODES = (None, "default", "acceptEdits")

#: The answer keys: allow, deny, allow this tool for this agent for the rest of the run.
Key = Literal["y", "n", "a"]


_LABEL_CHARS = 40
_DENIED_BY_USER = "The user denied this tool call at the terminal."

# -- the queue -----------------------------------------------------------------------------


@dataclass(eq=False)
class Pending:
    """One request waiting for its answer."""

    tool: str
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
        at_terminal: whether a person can answer; else each request is denied at once
            (:func:`no_terminal_reason`) and ``say`` gets one line for each tool.
        say: gets the line that says a tool was denied for want of a terminal.
    """

    label_for: LabelFor = lambda agent_id: "lead" if agent_id is None else agent_id
    on_decision: Callable[[PermissionDecided], None] = lambda event: None
    on_change: Callable[[], None] = lambda: None
    wait_limit_s: float = 1800.0
    clock: Clock = SYSTEM_CLOCK
    at_terminal: bool = True
    say: Callable[[str], None] = lambda line: None
    _told: set[str] = field(default_factory=set, init=False)
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
            agent_id=context.agent_id or None,
            tool_use_id=context.tool_use_id,
            what=describe_request(tool_name, tool_input),
            asked_at=self.clock.monotonic(),
        )
        if (request.agent_id, tool_name) in self._always:
            return self._decide(request, allow=True, by="rule")
        if not self.at_terminal:
            return self._no_terminal(request)
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
        label = clip(self.label_for(front.agent_id), _LABEL_CHARS)
        return terminal_safe(f"({place}/{total}) [{label}] {front.tool}: {front.what}")

    # the person's answer -------------------------------------------------------------------
    def answer(self, key: Key) -> bool:
        """Answer the front request with ``key``; ``False`` when nothing waits."""
        front = self.front
        if front is None:
            return False
        if key == "a":
            self._always.add((front.agent_id, front.tool))
        self._resolve(front, self._decide(front, allow=key != "n", by="user", always=key == "a"))
        if key == "a":  # the same agent's waiting requests for this tool need no answer now
            for other in [p for p in self._waiting if (p.agent_id, p.tool) in self._always]:
                self._resolve(other, self._decide(other, allow=True, by="rule"))
        return True

    def close(self) -> None:
        """The run ends: deny what still waits, and every later request."""
        self._closed = True
        for request in list(self._waiting):
            ended = self._decide(request, allow=False, by="run_ended", message=_RUN_ENDED)
            self._resolve(request, ended)

    # -- internals ---------------------------------------------------------------------------
    def _no_terminal(self, request: Pending) -> PermissionResult:
        """Deny ``request`` with the flags that allow it; the first denial of a tool is said."""
        reason = no_terminal_reason(request.tool)
        result = self._decide(request, allow=False, by="no_terminal", message=reason)
        if request.tool not in self._told and request.tool != WORKFLOW_TOOL:
            # a Workflow denial is said once by the run itself (its workflow_denied line)
            self._told.add(request.tool)
            agent = self.label_for(request.agent_id)
            self.say(terminal_safe(f"teamlead: denied {request.tool} for [{agent}]: {reason}"))
        return result

    def _resolve(self, request: Pending, result: PermissionResult) -> None:
        request.result = result
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
        return PermissionResultAllow() if allow else PermissionResultDeny(message=message)


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
